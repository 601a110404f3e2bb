package bot

import (
	"errors"
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

var flows = map[string]*Flow{}

// NewFlow registers a flow under name (call it from init or a package var).
func NewFlow(name string, fn func(f *FlowContext) error) *Flow {
	f := &Flow{name: name, fn: fn}
	flows[name] = f
	return f
}

const flowKey = "botrun.flow"

// flowState is what the host keeps: the flow's name and its answers, one per
// line, escaped.
func encodeFlow(name string, answers []string) []byte {
	var b strings.Builder
	b.WriteString(name)
	for _, a := range answers {
		b.WriteByte('\n')
		b.WriteString(strconv.Quote(a))
	}
	return []byte(b.String())
}

func decodeFlow(b []byte) (string, []string, error) {
	lines := strings.Split(string(b), "\n")
	answers := make([]string, 0, len(lines)-1)
	for _, l := range lines[1:] {
		a, err := strconv.Unquote(l)
		if err != nil {
			return "", nil, errors.New("botrun flow: corrupt flow state")
		}
		answers = append(answers, a)
	}
	return lines[0], answers, nil
}

// Ask returns the answer to the question, or sends it and returns ErrWaiting
// when the flow reaches it for the first time.
func (f *FlowContext) Ask(question string, opts ...SendOption) (string, error) {
	f.asked++
	if f.asked <= len(f.answers) {
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

// InFlow reports whether the chat has a flow in progress, and its name.
func (c *Context) InFlow() (string, bool) {
	b, ok, err := c.StateGet(flowKey)
	if err != nil || !ok {
		return "", false
	}
	name, _, err := decodeFlow(b)
	return name, err == nil
}

// Continue feeds this message to the chat's flow in progress as the answer to
// its pending question. It reports false when there is no flow in progress.
func (c *Context) Continue() (bool, error) {
	b, ok, err := c.StateGet(flowKey)
	if err != nil || !ok {
		return false, err
	}
	name, answers, err := decodeFlow(b)
	if err != nil {
		return true, err
	}
	flow, ok := flows[name]
	if !ok {
		// The module no longer has that flow: forget it.
		return false, c.StateDelete(flowKey)
	}
	return true, c.runFlow(flow, append(answers, c.Event.Text))
}

func (c *Context) runFlow(flow *Flow, answers []string) error {
	f := &FlowContext{Context: c, answers: answers}
	err := flow.fn(f)
	switch {
	case errors.Is(err, ErrWaiting):
		return c.StateSet(flowKey, encodeFlow(flow.name, answers))
	case err != nil:
		return err
	}
	return c.StateDelete(flowKey) // finished
}
