package bot

import (
	"errors"
	"sort"
	"strconv"
	"strings"
)

// A Flow is a persistent conversation: a function that asks questions and
// takes the chat's next messages as the answers. Its progress is conversation
// state, which the host commits atomically with each message, so a flow
// survives a crash or a restart: a question already asked is not asked again,
// and the next message is taken as its answer.
//
// The function is re-run from the start for every message of the flow, with
// the answers given so far; it must ask the same questions in the same order
// (deterministic, like every durable handler). Ask returns ErrWaiting the
// first time a question is reached: return it (or any error wrapping it) from
// the function to wait for the answer.
//
// While the flow replays the steps it already took (up to the Ask that returns
// the answer this message carries), its sends and enqueues are not made: they
// went out with the message that took the step, so they return a SendResult
// with status "replayed" and no host call. A reply between two questions thus
// goes out once. Its Edit and Typing calls are skipped too (they return nil),
// a Broadcast answers Replayed, and its Fetch calls are answered from the
// calls kept with the flow (see Context.Fetch). The flow's state has the
// format of abi/SPEC.md section 7, the same in every SDK.
type Flow struct {
	name string
	fn   func(f *FlowContext) error
}

// FlowContext is what a flow function gets: the event that fed this step, and
// Ask.
type FlowContext struct {
	*Context
	answers []string
	asked   int
}

// ErrWaiting is returned by Ask when the flow waits for an answer.
var ErrWaiting = errors.New("botrun flow: waiting for an answer")

// StatusReplayed is the SendResult status of a send a flow makes while it
// replays a step already taken: nothing went to the host.
const StatusReplayed = "replayed"

var flows = map[string]*Flow{}

// NewFlow registers a flow under name (call it from init or a package var).
func NewFlow(name string, fn func(f *FlowContext) error) *Flow {
	f := &Flow{name: name, fn: fn}
	flows[name] = f
	return f
}

const flowKey = "botrun.flow"

// encodeFlow is the flow state (SPEC.md section 7): netstrings, the flow's
// name and then each answer in order.
func encodeFlow(name string, answers []string) []byte {
	b := appendNetstring(nil, name)
	for _, a := range answers {
		b = appendNetstring(b, a)
	}
	return b
}

func appendNetstring(b []byte, s string) []byte {
	b = strconv.AppendInt(b, int64(len(s)), 10)
	b = append(b, ':')
	b = append(b, s...)
	return append(b, ',')
}

var errFlowState = errors.New("not a sequence of netstrings")

// decodeFlow reads a flow state; any value encodeFlow cannot have written is
// an error.
func decodeFlow(b []byte) (string, []string, error) {
	fields, err := splitNetstrings(b)
	if err != nil {
		return "", nil, err
	}
	if len(fields) == 0 {
		return "", nil, errFlowState
	}
	return fields[0], fields[1:], nil
}

// splitNetstrings reads a sequence of netstrings.
func splitNetstrings(b []byte) ([]string, error) {
	var fields []string
	for len(b) > 0 {
		n, i := 0, 0
		for ; i < len(b) && b[i] >= '0' && b[i] <= '9'; i++ {
			if i > 0 && n == 0 {
				return nil, errFlowState // a leading zero
			}
			n = n*10 + int(b[i]-'0')
			if n > len(b) {
				return nil, errFlowState
			}
		}
		if i == 0 || i+1+n >= len(b) || b[i] != ':' || b[i+1+n] != ',' {
			return nil, errFlowState
		}
		fields = append(fields, string(b[i+1:i+1+n]))
		b = b[i+2+n:]
	}
	return fields, nil
}

// flowCallsKey is the chat's state key that keeps the answers of a flow's
// API calls (Fetch), beside the flow's own state (flowKey).
const flowCallsKey = "botrun.flow.calls"

// flowCalls are the calls of the steps a flow took, in order: each a
// netstring sequence of its id ("api method path"), then "R", the status,
// the header count, the headers' names and values and the body; or "E",
// the reason and the message of a call that got no response.
type flowCalls struct {
	loaded bool
	kept   []keptCall
	// next is the kept call a replayed step's next Fetch reads; dirty says
	// kept changed in this run.
	next  int
	dirty bool
}

type keptCall struct {
	id  string
	res *Response
	err *FetchError
}

// load reads the kept calls once, when a replayed step first calls Fetch;
// a state it cannot read, or that does not parse, is as none (the calls
// are made again).
func (fc *flowCalls) load(c *Context) {
	if fc.loaded {
		return
	}
	fc.loaded = true
	b, ok, err := c.StateGet(flowCallsKey)
	if err != nil || !ok {
		return
	}
	fc.kept = decodeFlowCalls(b)
}

// decodeFlowCalls reads kept calls, or returns nil for a value encode cannot
// have written: not netstrings, a call cut short, a kind other than R or E,
// a number that is not decimal (digits, no leading zero, at most 9), headers
// not sorted by name or a name given twice. Nothing of such a value is kept:
// a prefix of it is not the flow's calls.
func decodeFlowCalls(b []byte) []keptCall {
	f, err := splitNetstrings(b)
	if err != nil {
		return nil
	}
	var kept []keptCall
	for len(f) > 0 {
		if len(f) < 2 {
			return nil
		}
		k := keptCall{id: f[0]}
		switch f[1] {
		case "E":
			if len(f) < 4 {
				return nil
			}
			k.err, f = &FetchError{Reason: f[2], Message: f[3]}, f[4:]
		case "R":
			if len(f) < 5 {
				return nil
			}
			status, ok1 := decimal(f[2])
			n, ok2 := decimal(f[3])
			if !ok1 || !ok2 || n > (len(f)-5)/2 {
				return nil
			}
			k.res = &Response{Status: status, Header: make(map[string]string, n)}
			for i := range n {
				name := f[4+2*i]
				if i > 0 && name <= f[2+2*i] {
					return nil // not sorted, or a name twice
				}
				k.res.Header[name] = f[5+2*i]
			}
			k.res.Body = []byte(f[4+2*n])
			f = f[5+2*n:]
		default:
			return nil
		}
		kept = append(kept, k)
	}
	return kept
}

// decimal reads a number of the kept calls: 1 to 9 ASCII digits, no leading
// zero (strconv.Itoa's form, within every SDK's int).
func decimal(s string) (int, bool) {
	if len(s) == 0 || len(s) > 9 || (s[0] == '0' && len(s) > 1) {
		return 0, false
	}
	n := 0
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
		n = n*10 + int(s[i]-'0')
	}
	return n, true
}

// take answers a replayed step's call from the kept one at its place, if
// that one is the same call.
func (fc *flowCalls) take(c *Context, id string) (*Response, error, bool) {
	fc.load(c)
	if fc.next >= len(fc.kept) || fc.kept[fc.next].id != id {
		return nil, nil, false
	}
	k := fc.kept[fc.next]
	fc.next++
	if k.err != nil {
		e := *k.err
		e.API, _, _ = strings.Cut(id, " ")
		return nil, &e, true
	}
	r := *k.res
	r.Replayed = true
	return &r, nil, true
}

// keep adds the answer of a call of the step this message takes: what
// replayed steps did not read is dropped first (they no longer make it).
func (fc *flowCalls) keep(id string, res *Response, err error) {
	var failed *FetchError
	if res == nil && !errors.As(err, &failed) {
		return // no answer to keep: the host refused the call
	}
	fc.kept, fc.dirty = append(fc.kept[:fc.next], keptCall{id: id, res: res, err: failed}), true
	fc.next = len(fc.kept)
}

// encode is the kept calls as the state holds them.
func (fc *flowCalls) encode() []byte {
	var b []byte
	for _, k := range fc.kept {
		b = appendNetstring(b, k.id)
		if k.err != nil {
			b = appendNetstring(appendNetstring(appendNetstring(b, "E"), k.err.Reason), k.err.Message)
			continue
		}
		b = appendNetstring(appendNetstring(appendNetstring(b, "R"), strconv.Itoa(k.res.Status)), strconv.Itoa(len(k.res.Header)))
		names := make([]string, 0, len(k.res.Header))
		for name := range k.res.Header {
			names = append(names, name)
		}
		sort.Strings(names) // the same answer, the same bytes
		for _, name := range names {
			b = appendNetstring(appendNetstring(b, name), k.res.Header[name])
		}
		b = appendNetstring(b, string(k.res.Body))
	}
	return b
}

// save writes the kept calls with the flow's state when this run changed
// them; an answer over the chat's state limits is not kept (logged).
func (fc *flowCalls) save(c *Context) error {
	if !fc.dirty {
		return nil
	}
	err := c.StateSet(flowCallsKey, fc.encode())
	if errors.Is(err, ErrTooLarge) {
		logf(LevelWarn, "botrun flow: the answers of the flow's API calls are too large for the chat's state (bot.max_chat_state): a later message of the flow calls its APIs again")
		return c.StateDelete(flowCallsKey)
	}
	return err
}

// forget deletes the kept calls of a flow that ended, if it had any.
func (fc *flowCalls) forget(c *Context) error {
	if len(fc.kept) == 0 && !fc.dirty {
		return nil
	}
	return c.StateDelete(flowCallsKey)
}

// Ask returns the answer to the question, or sends it and returns ErrWaiting
// when the flow reaches it for the first time.
func (f *FlowContext) Ask(question string, opts ...SendOption) (string, error) {
	f.asked++
	if f.asked <= len(f.answers) {
		if f.asked == len(f.answers) {
			f.replaying = false // this message's answer: what follows is new
			if fc := f.flowCalls; fc != nil && fc.next < len(fc.kept) {
				// Kept calls the replayed steps no longer made.
				fc.kept, fc.dirty = fc.kept[:fc.next], true
			}
		}
		return f.answers[f.asked-1], nil
	}
	if _, err := f.Reply(question, opts...); err != nil {
		return "", err
	}
	return "", ErrWaiting
}

// Start begins the flow in this chat, replacing any flow in progress.
func (c *Context) Start(flow *Flow) error {
	return c.runFlow(flow, nil)
}

// InFlow reports whether the chat has a flow in progress, and its name. A
// flow state that does not parse reads as no flow (Continue forgets it). An
// error reading the state (a *HostError: UNSUPPORTED, HOST_ERROR, ...) is
// returned, never taken for "no flow".
func (c *Context) InFlow() (name string, ok bool, err error) {
	b, ok, err := c.StateGet(flowKey)
	if err != nil || !ok {
		return "", false, err
	}
	name, _, perr := decodeFlow(b)
	if perr != nil {
		return "", false, nil
	}
	return name, true, nil
}

// Continue feeds this message to the chat's flow in progress as the answer to
// its pending question. It reports false when there is no flow in progress; a
// flow state that does not parse, or names a flow this module does not have,
// is forgotten (logged), and the message is not the flow's: handle it as any
// other message.
func (c *Context) Continue() (bool, error) {
	b, ok, err := c.StateGet(flowKey)
	if err != nil || !ok {
		return false, err
	}
	name, answers, err := decodeFlow(b)
	if err != nil {
		logf(LevelWarn, "botrun flow: forgetting the chat's flow: its state %q is %v (SPEC.md section 7); the message is handled as a normal message", flowKey, err)
		return false, c.StateDelete(flowKey)
	}
	flow, ok := flows[name]
	if !ok {
		logf(LevelWarn, "botrun flow: forgetting the chat's flow %q: this module has no flow of that name; the message is handled as a normal message", name)
		return false, c.StateDelete(flowKey)
	}
	return true, c.runFlow(flow, append(answers, c.Event.Text))
}

func (c *Context) runFlow(flow *Flow, answers []string) error {
	f := &FlowContext{Context: c, answers: answers}
	c.replaying = len(answers) > 0
	fc := &flowCalls{loaded: len(answers) == 0} // a new flow starts with no calls
	c.flowCalls = fc
	defer func() { c.flowCalls = nil }()
	err := flow.fn(f)
	if c.replaying {
		c.replaying = false
		logf(LevelWarn, "botrun flow: flow %q ended before the question this message answers (was the module changed?); sends of the steps it replayed were not repeated", flow.name)
	}
	switch {
	case errors.Is(err, ErrWaiting):
		if err := fc.save(c); err != nil {
			return err
		}
		return c.StateSet(flowKey, encodeFlow(flow.name, answers))
	case err != nil:
		return err
	}
	if err := fc.forget(c); err != nil {
		return err
	}
	return c.StateDelete(flowKey) // finished
}
