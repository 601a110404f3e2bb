package wasm_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/tetratelabs/wazero"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/host/wasm"
	"github.com/botrun/botrun/internal/wasmbuild"
)

// The conformance guests, one per SDK: each reads a command from the event's
// text, runs it through its SDK (never the raw imports) and posts the
// outcome, one line, to the chat "report" (examples/CONFORMANCE.md).
var conformanceGuests = []struct {
	lang  string
	build func(t *testing.T) string
}{
	{"go", func(t *testing.T) string { return wasmbuild.Go(t, "../../examples/go-conformance") }},
	{"c", func(t *testing.T) string {
		return wasmbuild.C(t, "../../examples/c-conformance", "conformance.c", "../../guest-sdk/c/botrun.c")
	}},
	{"rust", func(t *testing.T) string { return wasmbuild.Rust(t, "../../examples/rust-conformance") }},
	{"assemblyscript", func(t *testing.T) string { return wasmbuild.AssemblyScript(t, "../../examples/as-conformance") }},
}

// answer is a scripted answer to a send, enqueue or post.
type answer struct {
	res abi.SendResult
	err error
}

// scripted is a wasm.Env whose answers a row chooses. Sends, enqueues and
// posts are numbered across the three, like the host's, and keyed
// "<event id>:<n>" unless the guest names the key; a post to the chat
// "report" is the guest's outcome line and is only recorded.
type scripted struct {
	event string
	// now is the host's clock: an enqueue whose "at" is later is scheduled.
	now int64
	// send, enqueue and post answer the calls in order; past the list they
	// answer like a healthy host (sent; deferred, or scheduled for an "at"
	// after now; queued).
	send, enqueue, post []answer
	// maxSends fails the send, enqueue or post past it, like bot.max_sends.
	maxSends int
	state    map[string]string
	// getErr, setErr and delErr answer every StateGet, StateSet, StateDelete;
	// with setErrKey, setErr answers only the StateSet of that key.
	getErr, setErr, delErr error
	setErrKey              string
	// media answers LoadMedia (default: 11 bytes at index 0, else ErrNoMedia).
	media func(index int) ([]byte, error)
	// journal holds the broadcast keys journaled so far: a key already in it
	// counts as existing, as in the host's outbox. broadcastErr answers every
	// Broadcast; maxBroadcast refuses more chats (wasm.ErrTooLarge), like
	// bot.max_broadcast; noBroadcast hands the guest an Env without
	// wasm.Broadcaster, like a host that lacks it.
	journal      map[string]bool
	broadcastErr error
	maxBroadcast int
	noBroadcast  bool
	// editErr and typingErr answer every Edit and Typing (wasm.Editor):
	// wasm.ErrUnsupported is a channel without the operation, any other
	// error the channel's failure. noEditor hands the guest an Env without
	// wasm.Editor, like a host that lacks edit and typing.
	editErr, typingErr error
	noEditor           bool
	// fetch answers every Fetch (wasm.Fetcher; nil: 200, text/plain,
	// "hello"). noFetcher hands the guest an Env without wasm.Fetcher, like
	// a host that lacks fetch.
	fetch     func(req abi.FetchRequest) (abi.FetchResponse, error)
	noFetcher bool

	n       int
	calls   []string
	reports []string
}

var errSendCap = errors.New("the handler sent more than bot.max_sends")

// short is s as the calls record it: in full up to 256 bytes (a flow's
// state, botrun.flow.calls included, is checked byte for byte), else its
// length.
func short(s string) string {
	if len(s) > 256 {
		return fmt.Sprintf("<%d bytes>", len(s))
	}
	return s
}

func (e *scripted) call(fn string, req abi.SendRequest, script *[]answer, def abi.SendStatus) (abi.SendResult, error) {
	if fn == "post" && req.Chat == "report" {
		e.reports = append(e.reports, req.Text)
		return abi.SendResult{Status: abi.SendQueued, Key: "report"}, nil
	}
	e.n++
	call := fmt.Sprintf("%s %s %s key=%s", fn, req.Chat, short(req.Text), req.IdempotencyKey)
	if req.At != 0 {
		call += fmt.Sprintf(" at=%d", req.At)
	}
	if len(req.Buttons) > 0 {
		call += " buttons=" + exactJSON(req.Buttons)
	}
	if req.List != nil {
		call += " list=" + exactJSON(req.List)
	}
	e.calls = append(e.calls, call)
	if e.maxSends > 0 && e.n > e.maxSends {
		return abi.SendResult{}, errSendCap
	}
	if len(*script) > 0 {
		a := (*script)[0]
		*script = (*script)[1:]
		return a.res, a.err
	}
	key := req.IdempotencyKey
	if key == "" {
		key = fmt.Sprintf("%s:%d", e.event, e.n)
	}
	res := abi.SendResult{Status: def, Key: key}
	if def == abi.SendSent {
		res.Ref = fmt.Sprint("r", e.n)
	}
	return res, nil
}

// exactJSON is v as the host decoded it, in JSON without HTML escaping: a
// send's buttons and list exactly as they reached the Env.
func exactJSON(v any) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return "<" + err.Error() + ">"
	}
	return strings.TrimSuffix(b.String(), "\n")
}

func (e *scripted) Send(_ context.Context, req abi.SendRequest) (abi.SendResult, error) {
	return e.call("send", req, &e.send, abi.SendSent)
}

// Enqueue answers scheduled for an "at" after now, as the host does (a past
// "at" is due: deferred). Send and Post never see an "at": wasm refuses it.
func (e *scripted) Enqueue(_ context.Context, req abi.SendRequest) (abi.SendResult, error) {
	if req.At > e.now {
		return e.call("enqueue", req, &e.enqueue, abi.SendScheduled)
	}
	return e.call("enqueue", req, &e.enqueue, abi.SendDeferred)
}

func (e *scripted) Post(_ context.Context, req abi.SendRequest) (abi.SendResult, error) {
	return e.call("post", req, &e.post, abi.SendQueued)
}

// Broadcast counts once against maxSends, as one send (and takes a number,
// as the host's does), then journals "<prefix>:<chat>" for each chat once.
func (e *scripted) Broadcast(_ context.Context, req abi.BroadcastRequest) (abi.BroadcastResult, error) {
	e.n++
	call := fmt.Sprintf("broadcast %s %s chats=%s", req.KeyPrefix, short(req.Text), strings.Join(req.Chats, ","))
	if req.At != 0 {
		call += fmt.Sprintf(" at=%d", req.At)
	}
	e.calls = append(e.calls, call)
	switch {
	case e.maxSends > 0 && e.n > e.maxSends:
		return abi.BroadcastResult{}, errSendCap
	case e.maxBroadcast > 0 && len(req.Chats) > e.maxBroadcast:
		return abi.BroadcastResult{}, fmt.Errorf("a broadcast to %d chats is over bot.max_broadcast (%d): %w", len(req.Chats), e.maxBroadcast, wasm.ErrTooLarge)
	case e.broadcastErr != nil:
		return abi.BroadcastResult{}, e.broadcastErr
	}
	var res abi.BroadcastResult
	seen := map[string]bool{}
	for _, chat := range req.Chats {
		if seen[chat] {
			continue
		}
		seen[chat] = true
		if key := req.KeyPrefix + ":" + chat; e.journal[key] {
			res.Existing++
		} else {
			e.journal[key] = true
			res.Journaled++
		}
	}
	return res, nil
}

// noBroadcaster is an Env without Broadcast (nor Edit and Typing): a host
// that lacks it.
type noBroadcaster struct{ wasm.Env }

// Edit records the edit, which is neither numbered nor counted as a send,
// and answers editErr.
func (e *scripted) Edit(_ context.Context, req abi.EditRequest) error {
	e.calls = append(e.calls, fmt.Sprintf("edit %s %s %s", req.Chat, req.Message, short(req.Text)))
	return e.editErr
}

// Typing records the typing indicator and answers typingErr.
func (e *scripted) Typing(_ context.Context, req abi.TypingRequest) error {
	e.calls = append(e.calls, "typing "+req.Chat)
	return e.typingErr
}

// noEditor is an Env without Edit and Typing (with Broadcast): a host that
// lacks them.
type noEditor struct {
	wasm.Env
	wasm.Broadcaster
}

// Fetch records the call as "fetch <the FetchRequest as JSON>" (neither
// numbered nor counted as a send) and answers fetch.
func (e *scripted) Fetch(_ context.Context, req abi.FetchRequest) (abi.FetchResponse, error) {
	e.calls = append(e.calls, "fetch "+exactJSON(req))
	if e.fetch != nil {
		return e.fetch(req)
	}
	return abi.FetchResponse{Status: 200, Headers: map[string]string{"Content-Type": "text/plain"}, Body: "hello"}, nil
}

// noFetcher is an Env without Fetch (with Broadcast, Edit and Typing): a
// host that lacks it.
type noFetcher struct {
	wasm.Env
	wasm.Broadcaster
	wasm.Editor
}

func (e *scripted) StateGet(_ context.Context, key string) ([]byte, bool, error) {
	if e.getErr != nil {
		return nil, false, e.getErr
	}
	v, ok := e.state[key]
	return []byte(v), ok, nil
}

func (e *scripted) StateSet(_ context.Context, key string, value []byte) error {
	e.calls = append(e.calls, fmt.Sprintf("state-set %s %s", key, short(string(value))))
	if e.setErr != nil && (e.setErrKey == "" || e.setErrKey == key) {
		return e.setErr
	}
	e.state[key] = string(value)
	return nil
}

func (e *scripted) StateDelete(_ context.Context, key string) error {
	e.calls = append(e.calls, "state-delete "+key)
	if e.delErr != nil {
		return e.delErr
	}
	delete(e.state, key)
	return nil
}

func (e *scripted) LoadMedia(_ context.Context, index int) ([]byte, error) {
	if e.media != nil {
		return e.media(index)
	}
	if index == 0 {
		return []byte("hello image"), nil
	}
	return nil, wasm.ErrNoMedia
}

func unavailable(reason string) func(int) ([]byte, error) {
	return unavailableMsg(reason, "gone")
}

func unavailableMsg(reason, msg string) func(int) ([]byte, error) {
	return func(int) ([]byte, error) {
		return nil, &abi.MediaUnavailableError{Reason: reason, Message: msg}
	}
}

// conformanceRow is one command, the host's scripted answers, and what every
// SDK must make of them.
type conformanceRow struct {
	name string
	// text is the command (examples/CONFORMANCE.md).
	text string
	// env scripts the host's answers (nil: a healthy host).
	env func(e *scripted)
	// event changes the event before it is handled (nil: a message).
	event func(ev *abi.Event)
	// want is the outcome line the guest posts.
	want string
	// fault is the kind of fault Handle returns ("" for none); handlerErr
	// the HandlerError's message ("" for none).
	fault      wasm.FaultKind
	handlerErr string
	// calls, when set, are the guest's sends and state writes as the host
	// saw them, in order.
	calls []string
	// again handles the event a second time on the same host (its retry):
	// want is the retry's outcome, calls those of both.
	again bool
	// logs must each appear in the host log; noLogs must not.
	logs, noLogs []string
}

var errJournalDown = errors.New("journal down")

var conformanceRows = []conformanceRow{
	// event_read and now_ms
	{name: "now", text: "now", want: "now 1764412800000"},

	// state_get
	{name: "state-get/value", text: "state-get k", env: func(e *scripted) { e.state["k"] = "v1" }, want: "value v1"},
	{name: "state-get/absent", text: "state-get k", want: "absent"},
	{name: "state-get/unsupported", text: "state-get k", env: func(e *scripted) { e.getErr = wasm.ErrUnsupported }, want: "err UNSUPPORTED"},
	{name: "state-get/key-too-long", text: "state-get @65537", want: "err TOO_LARGE"},
	{name: "state-get/empty-key", text: "state-get -", want: "err BAD_PAYLOAD"},
	{name: "state-get/host-error", text: "state-get k", env: func(e *scripted) { e.getErr = errJournalDown }, want: "err HOST_ERROR", fault: wasm.FaultHost},

	// state_set
	{name: "state-set/ok", text: "state-set k v2", want: "ok", calls: []string{"state-set k v2"}},
	{name: "state-set/too-large", text: "state-set k v2", env: func(e *scripted) { e.setErr = wasm.ErrStateTooLarge }, want: "err TOO_LARGE",
		logs: []string{"guest state write refused"}},
	{name: "state-set/value-over-1MiB", text: "state-set k @1048577", want: "err TOO_LARGE", calls: []string{}},
	{name: "state-set/unsupported", text: "state-set k v", env: func(e *scripted) { e.setErr = wasm.ErrUnsupported }, want: "err UNSUPPORTED"},
	// A bad state key is not logged (a bad SendRequest is).
	{name: "state-set/empty-key", text: "state-set - v", want: "err BAD_PAYLOAD", calls: []string{}, noLogs: []string{"level=WARN"}},
	{name: "state-set/host-error", text: "state-set k v", env: func(e *scripted) { e.setErr = errJournalDown }, want: "err HOST_ERROR", fault: wasm.FaultHost},

	// state_delete
	{name: "state-delete/ok", text: "state-delete k", want: "ok", calls: []string{"state-delete k"}},
	{name: "state-delete/too-large", text: "state-delete k", env: func(e *scripted) { e.delErr = wasm.ErrStateTooLarge }, want: "err TOO_LARGE"},
	{name: "state-delete/unsupported", text: "state-delete k", env: func(e *scripted) { e.delErr = wasm.ErrUnsupported }, want: "err UNSUPPORTED"},
	{name: "state-delete/empty-key", text: "state-delete -", want: "err BAD_PAYLOAD"},

	// media_load
	{name: "media/bytes", text: "media 0", want: "bytes 11"},
	{name: "media/no-such-index", text: "media 3", want: "err NOT_FOUND"},
	{name: "media/negative-index", text: "media -1", want: "err NOT_FOUND"},
	{name: "media/unsupported", text: "media 0", env: func(e *scripted) { e.media = func(int) ([]byte, error) { return nil, wasm.ErrUnsupported } }, want: "err UNSUPPORTED"},
	{name: "media/too-large", text: "media 0", env: func(e *scripted) { e.media = func(int) ([]byte, error) { return nil, wasm.ErrMediaTooLarge } }, want: "err TOO_LARGE"},
	{name: "media/not-durable", text: "media 0", env: func(e *scripted) { e.media = unavailable(abi.MediaNotDurable) }, want: "unavailable not-durable gone"},
	{name: "media/provider-mismatch", text: "media 0", env: func(e *scripted) { e.media = unavailable(abi.MediaProviderMismatch) }, want: "unavailable provider-mismatch gone"},
	{name: "media/rehydrate-failed", text: "media 0", env: func(e *scripted) { e.media = unavailable(abi.MediaRehydrateFailed) }, want: "unavailable rehydrate-failed gone"},
	// The message is omitted from the JSON when empty.
	{name: "media/unavailable-no-message", text: "media 0", env: func(e *scripted) { e.media = unavailableMsg(abi.MediaNotDurable, "") }, want: "unavailable not-durable "},
	{name: "media/host-error", text: "media 0", env: func(e *scripted) { e.media = func(int) ([]byte, error) { return nil, errJournalDown } }, want: "err HOST_ERROR", fault: wasm.FaultHost},

	// send
	{name: "send/sent", text: "send c1 hi", want: "sent key=ev:1 ref=r1 error=", calls: []string{"send c1 hi key="}},
	{name: "send/explicit-key", text: "send c1 hi order-7", want: "sent key=order-7 ref=r1 error=", calls: []string{"send c1 hi key=order-7"}},
	{name: "send/deduped", text: "send c1 hi", env: func(e *scripted) {
		e.send = []answer{{res: abi.SendResult{Status: abi.SendDeduped, Key: "ev:1", Ref: "old"}}}
	}, want: "deduped key=ev:1 ref=old error="},
	{name: "send/dead", text: "send c1 hi", env: func(e *scripted) {
		e.send = []answer{{res: abi.SendResult{Status: abi.SendDead, Key: "ev:1", Error: "blocked"}}}
	}, want: "not-sent dead key=ev:1 ref= error=blocked"},
	{name: "send/deferred", text: "send c1 hi", env: func(e *scripted) {
		e.send = []answer{{res: abi.SendResult{Status: abi.SendDeferred, Key: "ev:1", Error: "503"}}}
	}, want: "not-sent deferred key=ev:1 ref= error=503"},
	{name: "send/deduped-outcome-unknown", text: "send c1 hi", env: func(e *scripted) {
		e.send = []answer{{res: abi.SendResult{Status: abi.SendDeduped, Key: "ev:1", Error: "outcome unknown after a crash (on_ambiguous = skip)"}}}
	}, want: "deduped key=ev:1 ref= error=outcome unknown after a crash (on_ambiguous = skip)"},
	{name: "send/bad-payload-no-chat", text: "send - hi", want: "err BAD_PAYLOAD", calls: []string{}, logs: []string{"guest passed a bad payload"}},
	{name: "send/bad-payload-no-text", text: "send c1 -", want: "err BAD_PAYLOAD", calls: []string{}},
	{name: "send/too-large", text: "send c1 @1048577", want: "err TOO_LARGE", calls: []string{}},
	{name: "send/host-error", text: "send c1 hi", env: func(e *scripted) { e.send = []answer{{err: errJournalDown}} }, want: "err HOST_ERROR", fault: wasm.FaultHost},
	// The host has no UNSUPPORTED for a send: an Env's error is a host failure.
	{name: "send/env-unsupported-is-host-error", text: "send c1 hi", env: func(e *scripted) { e.send = []answer{{err: wasm.ErrUnsupported}} }, want: "err HOST_ERROR", fault: wasm.FaultHost},

	// enqueue
	{name: "enqueue/deferred", text: "enqueue c1 later", want: "deferred key=ev:1 ref= error=", calls: []string{"enqueue c1 later key="}},
	{name: "enqueue/explicit-key", text: "enqueue c1 later job-1", want: "deferred key=job-1 ref= error=", calls: []string{"enqueue c1 later key=job-1"}},
	{name: "enqueue/deduped", text: "enqueue c1 later job-1", env: func(e *scripted) {
		e.enqueue = []answer{{res: abi.SendResult{Status: abi.SendDeduped, Key: "job-1"}}}
	}, want: "deduped key=job-1 ref= error="},
	// enqueue's dead (the key is already dead) is a result, not an error.
	{name: "enqueue/dead", text: "enqueue c1 later job-1", env: func(e *scripted) {
		e.enqueue = []answer{{res: abi.SendResult{Status: abi.SendDead, Key: "job-1", Error: "blocked"}}}
	}, want: "dead key=job-1 ref= error=blocked"},
	{name: "enqueue/bad-key", text: "enqueue c1 later bad\x01key", want: "err BAD_PAYLOAD", calls: []string{}},
	{name: "enqueue/host-error", text: "enqueue c1 later", env: func(e *scripted) { e.enqueue = []answer{{err: errJournalDown}} }, want: "err HOST_ERROR", fault: wasm.FaultHost},

	// enqueue-at: a scheduled send. The guest computes "at" from the event's
	// time (1764412800000); only enqueue takes it.
	{name: "enqueue-at/scheduled", text: "enqueue-at c1 +5000 later", want: "scheduled key=ev:1 ref= error=",
		calls: []string{"enqueue c1 later key= at=1764412805000"}},
	{name: "enqueue-at/explicit-key", text: "enqueue-at c1 +3600000 later r-1", want: "scheduled key=r-1 ref= error=",
		calls: []string{"enqueue c1 later key=r-1 at=1764416400000"}},
	{name: "enqueue-at/deduped", text: "enqueue-at c1 +5000 later r-1", env: func(e *scripted) {
		e.enqueue = []answer{{res: abi.SendResult{Status: abi.SendDeduped, Key: "r-1"}}}
	}, want: "deduped key=r-1 ref= error=", calls: []string{"enqueue c1 later key=r-1 at=1764412805000"}},
	// at = 0 is no "at": deferred, as before.
	{name: "enqueue-at/zero-is-now", text: "enqueue-at c1 0 now", want: "deferred key=ev:1 ref= error=", calls: []string{"enqueue c1 now key="}},
	// A past "at" is due: deferred.
	{name: "enqueue-at/past", text: "enqueue-at c1 1000 late", want: "deferred key=ev:1 ref= error=", calls: []string{"enqueue c1 late key= at=1000"}},
	{name: "enqueue-at/negative", text: "enqueue-at c1 -1 later", want: "err BAD_PAYLOAD", calls: []string{},
		logs: []string{"guest passed a bad payload", "is negative"}},
	// send and post refuse an "at" (the SDKs pass it on, the host refuses it);
	// at = 0 is no "at".
	{name: "send-at/refused", text: "send-at c1 +5000 hi", want: "err BAD_PAYLOAD", calls: []string{},
		logs: []string{"guest passed a bad payload", "schedules an enqueue; send sends now"}},
	{name: "post-at/refused", text: "post-at c2 +5000 hi", want: "err BAD_PAYLOAD", calls: []string{},
		logs: []string{"guest passed a bad payload", "schedules an enqueue; post sends now"}},
	{name: "send-at/zero-is-now", text: "send-at c1 0 hi", want: "sent key=ev:1 ref=r1 error=", calls: []string{"send c1 hi key="}},
	{name: "post-at/zero-is-now", text: "post-at c2 0 hi p-1", want: "queued key=p-1 ref= error=", calls: []string{"post c2 hi key=p-1"}},

	// post and reply
	{name: "post/queued", text: "post c2 hello", want: "queued key=ev:1 ref= error=", calls: []string{"post c2 hello key="}},
	{name: "post/explicit-key", text: "post c2 hello p-1", want: "queued key=p-1 ref= error=", calls: []string{"post c2 hello key=p-1"}},
	{name: "post/too-large", text: "post c2 @1048577", want: "err TOO_LARGE"},
	{name: "post/host-error", text: "post c2 hello", env: func(e *scripted) { e.post = []answer{{err: errJournalDown}} }, want: "err HOST_ERROR", fault: wasm.FaultHost},
	{name: "reply/queued", text: "reply hello", want: "queued key=ev:1 ref= error=", calls: []string{"post c1 hello key="}},

	// derived keys count send, enqueue and post together; the send cap
	{name: "sends/numbered", text: "sends 3", want: "sent 3", calls: []string{"send c1 n1 key=", "send c1 n2 key=", "send c1 n3 key="}},
	{name: "sends/cap", text: "sends 5", env: func(e *scripted) { e.maxSends = 3 }, want: "err HOST_ERROR at 4", fault: wasm.FaultHost,
		logs: []string{"more than bot.max_sends"}},

	// log: levels, the 8 KiB line cut, the per-event budget
	{name: "log/debug", text: "log 0 dbg-line", want: "ok", logs: []string{"level=DEBUG msg=dbg-line module="}},
	{name: "log/info", text: "log 1 info-line", want: "ok", logs: []string{"level=INFO msg=info-line module="}},
	{name: "log/warn", text: "log 2 warn-line", want: "ok", logs: []string{"level=WARN msg=warn-line module="}},
	{name: "log/error", text: "log 3 err-line", want: "ok", logs: []string{"level=ERROR msg=err-line module="}},
	{name: "log/line-cut-at-8KiB", text: "log 1 @9000", want: "ok",
		logs: []string{"msg=" + strings.Repeat("x", 8192) + " ", "guest output truncated 808 bytes"}, noLogs: []string{strings.Repeat("x", 8193)}},
	{name: "log/lines-budget", text: "log 1 hi 1100", want: "ok", logs: []string{"guest output truncated 152 bytes"}},
	{name: "log/bytes-budget", text: "log 1 @8192 20", want: "ok", logs: []string{"guest output truncated 32768 bytes"}},

	// a handler error: logged at level error, reported, not a fault; an
	// SDK error the handler returns as its own carries the SDK's message
	{name: "handler-error", text: "fail boom", want: "failing", handlerErr: "boom"},
	{name: "handler-error/sdk-error", text: "fail-state-set k v", env: func(e *scripted) { e.setErr = wasm.ErrStateTooLarge },
		want: "err TOO_LARGE", handlerErr: "botrun.state_set: TOO_LARGE"},
	{name: "handler-error/media-unavailable", text: "fail-media 0", env: func(e *scripted) { e.media = unavailable(abi.MediaNotDurable) },
		want: "unavailable not-durable gone", handlerErr: "media unavailable: not-durable: gone"},
	{name: "handler-error/media-unavailable-no-message", text: "fail-media 0", env: func(e *scripted) { e.media = unavailableMsg(abi.MediaProviderMismatch, "") },
		want: "unavailable provider-mismatch ", handlerErr: "media unavailable: provider-mismatch"},

	// flows (SPEC.md section 7)
	{name: "flow/start", text: "flow-start", want: "ok",
		calls: []string{"post c1 name? key=", "state-set botrun.flow 6:signup,"}},
	{name: "flow/first-answer", text: "flow-continue", env: func(e *scripted) { e.state["botrun.flow"] = "6:signup," },
		want: "in-flow", calls: []string{"post c1 hi flow-continue key=", "post c1 city? key=", "state-set botrun.flow 6:signup,13:flow-continue,"}},
	{name: "flow/last-answer-replays", text: "flow-continue", env: func(e *scripted) { e.state["botrun.flow"] = "6:signup,3:Ana," },
		want: "in-flow", calls: []string{"post c1 bye Ana from flow-continue key=", "state-delete botrun.flow"}},
	{name: "flow/none", text: "flow-continue", want: "not-in-flow", calls: []string{}},
	{name: "flow/bad-state", text: "flow-continue", env: func(e *scripted) { e.state["botrun.flow"] = "06:signup," },
		want: "not-in-flow", calls: []string{"state-delete botrun.flow"}, logs: []string{"level=WARN", "forgetting the chat's flow"}},
	{name: "flow/unknown-name", text: "flow-continue", env: func(e *scripted) { e.state["botrun.flow"] = "5:other," },
		want: "not-in-flow", calls: []string{"state-delete botrun.flow"}, logs: []string{"no flow of that name"}},
	{name: "flow/state-unsupported", text: "flow-continue", env: func(e *scripted) { e.getErr = wasm.ErrUnsupported }, want: "err UNSUPPORTED"},
	// The flow in progress: an error reading the state is an error, never "no flow".
	{name: "flow-name/in-flow", text: "flow-name", env: func(e *scripted) { e.state["botrun.flow"] = "6:signup,3:Ana," }, want: "flow signup", calls: []string{}},
	{name: "flow-name/none", text: "flow-name", want: "no-flow"},
	{name: "flow-name/bad-state", text: "flow-name", env: func(e *scripted) { e.state["botrun.flow"] = "06:signup," }, want: "no-flow", calls: []string{}},
	{name: "flow-name/unsupported", text: "flow-name", env: func(e *scripted) { e.getErr = wasm.ErrUnsupported }, want: "err UNSUPPORTED"},
	{name: "flow-name/host-error", text: "flow-name", env: func(e *scripted) { e.getErr = errJournalDown }, want: "err HOST_ERROR", fault: wasm.FaultHost},
	{name: "flow/save-too-large", text: "flow-start", env: func(e *scripted) { e.setErr = wasm.ErrStateTooLarge }, want: "err TOO_LARGE"},

	// broadcast: one send per chat under "<prefix>:<chat>"; the host's
	// answer is the counts of keys journaled now and already journaled.
	{name: "broadcast/journaled", text: "broadcast news:7 hello a b c", want: "journaled 3 existing 0",
		calls: []string{"broadcast news:7 hello chats=a,b,c"}},
	// The event's retry journals nothing again: every key exists.
	{name: "broadcast/existing-on-retry", text: "broadcast news:7 hello a b", again: true, want: "journaled 0 existing 2",
		calls: []string{"broadcast news:7 hello chats=a,b", "broadcast news:7 hello chats=a,b"}},
	{name: "broadcast/existing-partly", text: "broadcast news:7 hello a b", env: func(e *scripted) { e.journal["news:7:a"] = true },
		want: "journaled 1 existing 1"},
	// Chats and the prefix reach the host as the guest wrote them: the SDK's
	// JSON escapes quotes and backslashes and keeps UTF-8.
	{name: "broadcast/escaped", text: `broadcast p"1\ hi c"1 c\2 é😀`, want: "journaled 3 existing 0",
		calls: []string{`broadcast p"1\ hi chats=c"1,c\2,é😀`}},
	// A control character is escaped, so the host reads it and refuses it.
	{name: "broadcast/control-character", text: "broadcast p hi ab", want: "err BAD_PAYLOAD", calls: []string{},
		logs: []string{"guest passed a bad payload", "control character"}},
	// A broadcast counts once against bot.max_sends, however many chats.
	{name: "broadcast/counts-once", text: "broadcast p hi a b c", env: func(e *scripted) { e.maxSends = 1 }, want: "journaled 3 existing 0"},
	// Past bot.max_sends (the handler made its one send already): a fault.
	{name: "broadcast/send-cap", text: "broadcast p hi a", env: func(e *scripted) { e.maxSends, e.n = 1, 1 }, want: "err HOST_ERROR",
		fault: wasm.FaultHost, logs: []string{"more than bot.max_sends"}},
	{name: "broadcast-at/scheduled", text: "broadcast-at news:7 +5000 hello a b", want: "journaled 2 existing 0",
		calls: []string{"broadcast news:7 hello chats=a,b at=1764412805000"}},
	{name: "broadcast-at/zero-is-now", text: "broadcast-at p 0 hi a", want: "journaled 1 existing 0", calls: []string{"broadcast p hi chats=a"}},
	{name: "broadcast-at/negative", text: "broadcast-at p -1 hi a", want: "err BAD_PAYLOAD", calls: []string{}, logs: []string{"is negative"}},
	{name: "broadcast/empty-prefix", text: "broadcast - hi a", want: "err BAD_PAYLOAD", calls: []string{},
		logs: []string{"guest passed a bad payload", `\"key_prefix\" is required`}},
	{name: "broadcast/no-chats", text: "broadcast p hi", want: "err BAD_PAYLOAD", calls: []string{}, logs: []string{`\"chats\" is required`}},
	{name: "broadcast/empty-chat", text: "broadcast p hi a -", want: "err BAD_PAYLOAD", calls: []string{}, logs: []string{"chats[1] is empty"}},
	{name: "broadcast/no-text", text: "broadcast p - a", want: "err BAD_PAYLOAD", calls: []string{}},
	{name: "broadcast/payload-over-1MiB", text: "broadcast p @1048577 a", want: "err TOO_LARGE", calls: []string{}},
	// More chats than bot.max_broadcast: the Env's wasm.ErrTooLarge, not a fault.
	{name: "broadcast/over-max-broadcast", text: "broadcast p hi a b c", env: func(e *scripted) { e.maxBroadcast = 2 }, want: "err TOO_LARGE",
		logs: []string{"broadcast refused", "bot.max_broadcast"}},
	{name: "broadcast/host-error", text: "broadcast p hi a", env: func(e *scripted) { e.broadcastErr = errJournalDown }, want: "err HOST_ERROR",
		fault: wasm.FaultHost},
	// A host whose Env lacks wasm.Broadcaster answers UNSUPPORTED.
	{name: "broadcast/unsupported", text: "broadcast p hi a", env: func(e *scripted) { e.noBroadcast = true }, want: "err UNSUPPORTED",
		calls: []string{}},
}

// buttonRows: buttons and a list on send, post and enqueue reach the host
// exactly as the guest gave them (SPEC.md section 2); the ABI's rules are the
// host's (abi.ValidateChoices: BAD_PAYLOAD, logged); a press is an event of
// kind interaction, exposed to the guest, and a message has no interaction.
var buttonRows = []conformanceRow{
	{name: "buttons/post", text: "buttons post c1 Pick id:yes:Yes id:no:No url:Docs:https://example.com/docs?a=1&b=2",
		want: "queued key=ev:1 ref= error=", calls: []string{`post c1 Pick key= buttons=[{"id":"yes","title":"Yes"},{"id":"no","title":"No"},` +
			`{"title":"Docs","url":"https://example.com/docs?a=1&b=2"}]`}},
	{name: "buttons/send", text: "buttons send c1 hi id:y:Y", want: "sent key=ev:1 ref=r1 error=",
		calls: []string{`send c1 hi key= buttons=[{"id":"y","title":"Y"}]`}},
	{name: "buttons/enqueue", text: "buttons enqueue c1 hi url:Open:http://x.example", want: "deferred key=ev:1 ref= error=",
		calls: []string{`enqueue c1 hi key= buttons=[{"title":"Open","url":"http://x.example"}]`}},
	// The SDK's JSON escapes quotes, backslashes and control characters in
	// ids and titles and keeps UTF-8; a title may hold a ':'.
	{name: "buttons/escaped", text: "buttons post c1 hi id:a\"b\\c:Sí:\"é\"\t😀 url:<&>:https://example.com/?q=1",
		want: "queued key=ev:1 ref= error=", calls: []string{"post c1 hi key= buttons=[{\"id\":\"a\\\"b\\\\c\",\"title\":\"Sí:\\\"é\\\"\\t😀\"}," +
			"{\"title\":\"<&>\",\"url\":\"https://example.com/?q=1\"}]"}},
	// The dead answer of a channel that cannot show them (UnsupportedContent).
	{name: "buttons/dead", text: "buttons send c1 hi id:y:Y", env: func(e *scripted) {
		e.send = []answer{{res: abi.SendResult{Status: abi.SendDead, Key: "ev:1", Error: "unsupported content: too many buttons"}}}
	}, want: "not-sent dead key=ev:1 ref= error=unsupported content: too many buttons"},
	{name: "buttons/empty-title", text: "buttons post c1 hi id:yes:-", want: "err BAD_PAYLOAD", calls: []string{},
		logs: []string{"guest passed a bad payload", "buttons[0] has no title"}},
	{name: "buttons/url-empty-title", text: "buttons post c1 hi id:yes:Yes url:-:https://x.example", want: "err BAD_PAYLOAD", calls: []string{},
		logs: []string{"buttons[1] has no title"}},
	{name: "buttons/no-id", text: "buttons post c1 hi id:-:Yes", want: "err BAD_PAYLOAD", calls: []string{}, logs: []string{"buttons[0] has no id"}},
	{name: "buttons/id-over-256", text: "buttons post c1 hi id:@257:T", want: "err BAD_PAYLOAD", calls: []string{},
		logs: []string{"id is 257 bytes, over 256"}},
	{name: "buttons/id-256", text: "buttons post c1 hi id:@256:T", want: "queued key=ev:1 ref= error="},
	{name: "buttons/id-control-character", text: "buttons post c1 hi id:a\x01b:T", want: "err BAD_PAYLOAD", calls: []string{},
		logs: []string{"control character"}},
	{name: "buttons/url-not-http", text: "buttons post c1 hi url:Docs:ftp://x.example", want: "err BAD_PAYLOAD", calls: []string{},
		logs: []string{"is not an http(s) URL"}},
	{name: "buttons/17", text: "buttons post c1 hi" + strings.Repeat(" id:b:B", 17), want: "err BAD_PAYLOAD", calls: []string{},
		logs: []string{"17 buttons, over 16"}},
	{name: "buttons/16", text: "buttons post c1 hi" + strings.Repeat(" id:b:B", 16), want: "queued key=ev:1 ref= error="},
	{name: "buttons/with-list", text: "buttons-list c1 hi", want: "err BAD_PAYLOAD", calls: []string{},
		logs: []string{"guest passed a bad payload", `\"buttons\" and \"list\" cannot go on one message`}},

	{name: "list/post", text: "list post c1 Menu Open Drinks/tea:Tea:hot/coffee:Coffee -/water:Water", want: "queued key=ev:1 ref= error=",
		calls: []string{`post c1 Menu key= list={"button":"Open","sections":[{"title":"Drinks","rows":[{"id":"tea","title":"Tea","description":"hot"},` +
			`{"id":"coffee","title":"Coffee"}]},{"rows":[{"id":"water","title":"Water"}]}]}`}},
	{name: "list/send", text: "list send c1 m \"Pick\" -/a\\:A:é😀", want: "sent key=ev:1 ref=r1 error=",
		calls: []string{`send c1 m key= list={"button":"\"Pick\"","sections":[{"rows":[{"id":"a\\","title":"A","description":"é😀"}]}]}`}},
	{name: "list/enqueue", text: "list enqueue c1 m Open -/a:A", want: "deferred key=ev:1 ref= error=",
		calls: []string{`enqueue c1 m key= list={"button":"Open","sections":[{"rows":[{"id":"a","title":"A"}]}]}`}},
	{name: "list/empty-row-title", text: "list post c1 m Open -/a:-", want: "err BAD_PAYLOAD", calls: []string{},
		logs: []string{"list.sections[0].rows[0] has no title"}},
	{name: "list/no-button", text: "list post c1 m - -/a:A", want: "err BAD_PAYLOAD", calls: []string{}, logs: []string{"list.button"}},
	{name: "list/no-sections", text: "list post c1 m Open", want: "err BAD_PAYLOAD", calls: []string{}, logs: []string{"list has no sections"}},
	{name: "list/no-rows", text: "list post c1 m Open Drinks", want: "err BAD_PAYLOAD", calls: []string{},
		logs: []string{"list.sections[0] has no rows"}},
	{name: "list/101-rows", text: "list post c1 m Open -" + strings.Repeat("/r:R", 20) + strings.Repeat(" -"+strings.Repeat("/r:R", 20), 4) + " -/r:R",
		want: "err BAD_PAYLOAD", calls: []string{}, logs: []string{"list has 101 rows, over 100"}},

	// A press: the guest reports the event's kind and interaction instead of
	// running its text (the pressed title).
	{name: "interaction/press", text: "Yes", event: func(ev *abi.Event) {
		ev.Kind, ev.Interaction = abi.EventInteraction, &abi.Interaction{ID: "yes", Title: "Yes", Message: "m-7"}
	}, want: "interaction kind=interaction id=yes title=Yes message=m-7 text=Yes", calls: []string{}},
	// Title and message are omitted when the channel does not say.
	{name: "interaction/id-only", text: "No", event: func(ev *abi.Event) {
		ev.Kind, ev.Interaction = abi.EventInteraction, &abi.Interaction{ID: "no"}
	}, want: "interaction kind=interaction id=no title= message= text=No"},
	// The host's encoding/json escapes <, > and & (\u003c…) and quotes; the
	// SDKs decode them.
	{name: "interaction/escaped", text: "Sí é😀", event: func(ev *abi.Event) {
		ev.Kind, ev.Interaction = abi.EventInteraction, &abi.Interaction{ID: `a"b\c<&>`, Title: "Sí é😀", Message: "m:1"}
	}, want: `interaction kind=interaction id=a"b\c<&> title=Sí é😀 message=m:1 text=Sí é😀`},
	{name: "interaction/message-has-none", text: "event", want: "kind=message interaction=none"},
	// A kind a later host adds is passed on as it is.
	{name: "interaction/later-kind", text: "event", event: func(ev *abi.Event) { ev.Kind = "reaction" }, want: "kind=reaction interaction=none"},
}

// channelRows: edit and typing (SPEC.md section 4.6) reach the Env as the
// guest gave them and answer 0; a channel without the operation is
// UNSUPPORTED; a channel's failure is CHANNEL_FAILED with its message, never
// a fault; a bad request is BAD_PAYLOAD (logged); a host without them is
// UNSUPPORTED. A replayed flow step makes no typing call.
var channelRows = []conformanceRow{
	{name: "edit/ok", text: "edit c1 m-7 final", want: "ok", calls: []string{"edit c1 m-7 final"}, noLogs: []string{"level=WARN"}},
	// The SDK's JSON escapes quotes and backslashes and keeps UTF-8.
	{name: "edit/escaped", text: `edit c"1 m\7 "é😀<&>`, want: "ok", calls: []string{`edit c"1 m\7 "é😀<&>`}},
	// A channel that cannot edit (WhatsApp, Twilio): the Env's wasm.ErrUnsupported.
	{name: "edit/unsupported", text: "edit c1 m-7 final", env: func(e *scripted) {
		e.editErr = fmt.Errorf("provider \"wa\" cannot edit a message: %w", wasm.ErrUnsupported)
	}, want: "err UNSUPPORTED", calls: []string{"edit c1 m-7 final"}},
	// The channel refused: the guest reads its message, the event goes on
	// (no fault; the report is posted after it).
	{name: "edit/channel-failed", text: "edit c1 m-7 final", env: func(e *scripted) { e.editErr = errEditRefused },
		want: "channel-failed " + errEditRefused.Error(), calls: []string{"edit c1 m-7 final"}, logs: []string{"the channel failed", "func=edit"}},
	// The host cuts the channel's message to 160 bytes, so its JSON stays
	// within 1 KiB whatever it escapes ('<' is \u003c).
	{name: "edit/channel-failed-escaped", text: "edit c1 m-7 final", env: func(e *scripted) { e.editErr = errors.New(strings.Repeat("<", 200)) },
		want: "channel-failed " + strings.Repeat("<", 160)},
	{name: "edit/channel-failed-cut", text: "edit c1 m-7 final", env: func(e *scripted) { e.editErr = errors.New(strings.Repeat("y", 600)) },
		want: "channel-failed " + strings.Repeat("y", 160)},
	{name: "edit/no-message", text: "edit c1 - final", want: "err BAD_PAYLOAD", calls: []string{},
		logs: []string{"guest passed a bad payload", "func=edit"}},
	{name: "edit/empty-text", text: "edit c1 m-7 -", want: "err BAD_PAYLOAD", calls: []string{}, logs: []string{"guest passed a bad payload"}},
	{name: "edit/no-chat", text: "edit - m-7 final", want: "err BAD_PAYLOAD", calls: []string{}, logs: []string{"guest passed a bad payload"}},
	{name: "edit/message-control-character", text: "edit c1 m\x017 final", want: "err BAD_PAYLOAD", calls: []string{},
		logs: []string{"control character"}},
	{name: "edit/too-large", text: "edit c1 m-7 @1048577", want: "err TOO_LARGE", calls: []string{}},
	// A host whose Env lacks wasm.Editor answers UNSUPPORTED.
	{name: "edit/no-editor", text: "edit c1 m-7 final", env: func(e *scripted) { e.noEditor = true }, want: "err UNSUPPORTED", calls: []string{}},
	// The SDK's error returned as the handler's own: the same words in every SDK.
	{name: "handler-error/channel-failed", text: "fail-edit c1 m-7 final", env: func(e *scripted) { e.editErr = errors.New("gone") },
		want: "channel-failed gone", handlerErr: "botrun.edit: CHANNEL_FAILED: gone"},

	{name: "typing/ok", text: "typing c1", want: "ok", calls: []string{"typing c1"}},
	{name: "typing/unsupported", text: "typing c1", env: func(e *scripted) {
		e.typingErr = fmt.Errorf("provider \"sms\" has no typing indicator: %w", wasm.ErrUnsupported)
	}, want: "err UNSUPPORTED", calls: []string{"typing c1"}},
	{name: "typing/channel-failed", text: "typing c1", env: func(e *scripted) { e.typingErr = errors.New("Forbidden: bot was blocked by the user") },
		want: "channel-failed Forbidden: bot was blocked by the user", logs: []string{"the channel failed", "func=typing"}},
	{name: "typing/no-chat", text: "typing -", want: "err BAD_PAYLOAD", calls: []string{}, logs: []string{"guest passed a bad payload", "func=typing"}},
	{name: "typing/too-large", text: "typing @1048577", want: "err TOO_LARGE", calls: []string{}},
	{name: "typing/no-editor", text: "typing c1", env: func(e *scripted) { e.noEditor = true }, want: "err UNSUPPORTED", calls: []string{}},

	// The flow typist shows typing, asks q? and edits m-1 to the answer:
	// replaying its first step, it does not show typing again.
	{name: "flow/typist-start", text: "flow-start typist", want: "ok",
		calls: []string{"typing c1", "post c1 q? key=", "state-set botrun.flow 6:typist,"}},
	{name: "flow/typist-replays-no-typing", text: "flow-continue", env: func(e *scripted) { e.state["botrun.flow"] = "6:typist," },
		want: "in-flow", calls: []string{"edit c1 m-1 flow-continue", "state-delete botrun.flow"}},
}

var errEditRefused = errors.New("telegram: Bad Request: message to edit not found")

// fetchAnswer scripts every Fetch to answer res.
func fetchAnswer(res abi.FetchResponse) func(e *scripted) {
	return func(e *scripted) { e.fetch = func(abi.FetchRequest) (abi.FetchResponse, error) { return res, nil } }
}

// fetchFails scripts every Fetch to fail with err.
func fetchFails(err error) func(e *scripted) {
	return func(e *scripted) {
		e.fetch = func(abi.FetchRequest) (abi.FetchResponse, error) { return abi.FetchResponse{}, err }
	}
}

// binaryBody is a body that is not UTF-8: the host sends it in base64.
var binaryBody = []byte{0x00, 0xff, 0x80, 'a', '"'}

// escapedBody is UTF-8 that the host's JSON escapes (\u003c for '<') or
// that is not ASCII: the guest reports it in hex.
const escapedBody = "\"q\" \\ <&>\n é😀"

// fetchRows: fetch (SPEC.md section 4.8) reaches the Env as the guest gave
// it (the method, headers, body and key included) and answers the
// FetchResponse whatever its status; a call without a response is
// FETCH_FAILED with its reason and message, never a fault; an API the
// config does not name is NOT_FOUND, a call past bot.max_fetches
// TOO_LARGE, a refused request BAD_PAYLOAD (logged); a host without fetch
// is UNSUPPORTED.
var fetchRows = []conformanceRow{
	{name: "fetch/text", text: "fetch orders /orders/42", want: "fetch 200 replayed=false headers=1 type=text/plain len=5 body=hello",
		calls: []string{`fetch {"api":"orders","path":"/orders/42"}`}, noLogs: []string{"level=WARN"}},
	// A body that is not UTF-8 comes as body_base64.
	{name: "fetch/binary", text: "fetch files /f/1", env: fetchAnswer(abi.FetchResponse{Status: 200,
		Headers: map[string]string{"Content-Type": "application/octet-stream", "X-Request-Id": "r-1"}, BodyBase64: base64.StdEncoding.EncodeToString(binaryBody)}),
		want: "fetch 200 replayed=false headers=2 type=application/octet-stream len=5 body=hex:" + hex.EncodeToString(binaryBody)},
	// The host's JSON escapes quotes, backslashes, '<', '&', '>' and newlines;
	// the SDKs decode them and keep UTF-8.
	{name: "fetch/escaped", text: "fetch orders /x", env: fetchAnswer(abi.FetchResponse{Status: 200, Body: escapedBody}),
		want: fmt.Sprintf("fetch 200 replayed=false headers=0 type= len=%d body=hex:%x", len(escapedBody), escapedBody)},
	// An answer from the journal (a replayed event).
	{name: "fetch/replayed", text: "fetch orders /orders/42", env: fetchAnswer(abi.FetchResponse{Status: 200,
		Headers: map[string]string{"Content-Type": "application/json"}, Body: `{"state":"shipped"}`, Replayed: true}),
		want: `fetch 200 replayed=true headers=1 type=application/json len=19 body={"state":"shipped"}`},
	// A 404 or a 503 is a response, not an error.
	{name: "fetch/status-404", text: "fetch orders /orders/7", env: fetchAnswer(abi.FetchResponse{Status: 404,
		Headers: map[string]string{"Content-Type": "text/plain"}, Body: "no such order"}),
		want: "fetch 404 replayed=false headers=1 type=text/plain len=13 body=no such order", noLogs: []string{"level=WARN"}},
	{name: "fetch/status-503-empty", text: "fetch orders /orders/7", env: fetchAnswer(abi.FetchResponse{Status: 503}),
		want: "fetch 503 replayed=false headers=0 type= len=0 body="},
	// A body larger than any fixed buffer of an SDK.
	{name: "fetch/large", text: "fetch files /big", env: fetchAnswer(abi.FetchResponse{Status: 200, Body: strings.Repeat("x", 300_000) + "y"}),
		want: "fetch 200 replayed=false headers=0 type= len=300001 body=" + strings.Repeat("x", 64)},
	// The method, headers (sorted by name), text body and key reach the host
	// as the guest gave them; a header's value may hold ':'.
	{name: "fetch/request", text: `fetch orders /orders/42?expand=items POST {"qty":1} order:42 X-Trace:a:b Content-Type:application/json`,
		want:  "fetch 200 replayed=false headers=1 type=text/plain len=5 body=hello",
		calls: []string{`fetch {"api":"orders","method":"POST","path":"/orders/42?expand=items","headers":{"Content-Type":"application/json","X-Trace":"a:b"},"body":"{\"qty\":1}","key":"order:42"}`}},
	// A body that is not UTF-8 goes as body_base64; UTF-8 (a control
	// character included) as text.
	{name: "fetch/binary-request", text: "fetch files /up PUT hex:00ff80", want: "fetch 200 replayed=false headers=1 type=text/plain len=5 body=hello",
		calls: []string{`fetch {"api":"files","method":"PUT","path":"/up","body_base64":"AP+A"}`}},
	{name: "fetch/utf8-request", text: "fetch files /up PUT é😀\x01\\\"", want: "fetch 200 replayed=false headers=1 type=text/plain len=5 body=hello",
		calls: []string{`fetch {"api":"files","method":"PUT","path":"/up","body":"é😀\u0001\\\""}`}},
	// No response: the reason and message reach the guest, the event goes on.
	{name: "fetch/failed-timeout", text: "fetch orders /orders/42", env: fetchFails(&abi.FetchError{Reason: abi.FetchTimeout, Message: "no answer within 10s"}),
		want: "fetch-failed timeout no answer within 10s", logs: []string{"the API call failed", "reason=timeout"}},
	// The message is omitted from the JSON when empty.
	{name: "fetch/failed-refused-no-message", text: "fetch orders /orders/42", env: fetchFails(&abi.FetchError{Reason: abi.FetchRefused}),
		want: "fetch-failed refused "},
	// The host cuts the message to 160 bytes, so its JSON stays within 1 KiB
	// whatever it escapes.
	{name: "fetch/failed-cut", text: "fetch orders /orders/42", env: fetchFails(&abi.FetchError{Reason: abi.FetchConnection, Message: strings.Repeat("<", 600)}),
		want: "fetch-failed connection " + strings.Repeat("<", 160)},
	{name: "fetch/unknown-api", text: "fetch nope /x", env: fetchFails(fmt.Errorf("%q: %w", "nope", wasm.ErrNoAPI)),
		want: "err NOT_FOUND", calls: []string{`fetch {"api":"nope","path":"/x"}`}, logs: []string{"guest called an API the config does not name"}},
	{name: "fetch/past-max-fetches", text: "fetch orders /x", env: fetchFails(fmt.Errorf("the event's call 17 is over bot.max_fetches (16): %w", wasm.ErrTooLarge)),
		want: "err TOO_LARGE", logs: []string{"fetch refused"}},
	// The host refuses a path that would leave the API's url.
	{name: "fetch/bad-path", text: "fetch orders /orders/../admin", env: func(e *scripted) {
		e.fetch = func(req abi.FetchRequest) (abi.FetchResponse, error) {
			if strings.Contains(req.Path, "..") {
				return abi.FetchResponse{}, fmt.Errorf("%w: fetch request: \"path\" %q has a dot segment", abi.ErrBadPayload, req.Path)
			}
			return abi.FetchResponse{Status: 200}, nil
		}
	}, want: "err BAD_PAYLOAD", logs: []string{"guest passed a bad payload", "func=fetch"}},
	// Refused before the Env: a relative path, no API, over 1 MiB.
	{name: "fetch/relative-path", text: "fetch orders orders/42", want: "err BAD_PAYLOAD", calls: []string{}, logs: []string{"guest passed a bad payload"}},
	{name: "fetch/no-api", text: "fetch - /x", want: "err BAD_PAYLOAD", calls: []string{}},
	{name: "fetch/too-large", text: "fetch files /up PUT @1048577", want: "err TOO_LARGE", calls: []string{}},
	{name: "fetch/no-fetcher", text: "fetch orders /x", env: func(e *scripted) { e.noFetcher = true }, want: "err UNSUPPORTED", calls: []string{}},
	{name: "fetch/host-error", text: "fetch orders /x", env: fetchFails(errJournalDown), want: "err HOST_ERROR", fault: wasm.FaultHost},
	// The SDK's error returned as the handler's own: the same words in every SDK.
	{name: "handler-error/fetch-failed", text: "fail-fetch orders /x", env: fetchFails(&abi.FetchError{Reason: abi.FetchTimeout, Message: "gone"}),
		want: "fetch-failed timeout gone", handlerErr: "botrun.fetch orders: FETCH_FAILED: timeout: gone"},
	{name: "handler-error/fetch-not-found", text: "fail-fetch nope /x", env: fetchFails(wasm.ErrNoAPI),
		want: "err NOT_FOUND", handlerErr: "botrun.fetch: NOT_FOUND"},
}

// The flow fetcher (examples/CONFORMANCE.md) calls orders GET /orders/42,
// asks next?, calls orders POST /orders/42/pay and asks last?; its kept
// calls (the state key botrun.flow.calls, abi/SPEC.md section 7) as every
// SDK writes them, and what the guest makes of each answer.
const (
	flowGetCall = `fetch {"api":"orders","path":"/orders/42"}`
	flowPayCall = `fetch {"api":"orders","method":"POST","path":"/orders/42/pay"}`
	// The scripted host's answer to each, kept.
	liveGet = "21:orders GET /orders/42,1:R,3:200,1:1,12:Content-Type,10:text/plain,5:hello,"
	livePay = "26:orders POST /orders/42/pay,1:R,3:200,1:1,12:Content-Type,10:text/plain,5:hello,"
	// Answers kept by the messages that took the steps.
	keptGet       = "21:orders GET /orders/42,1:R,3:200,1:1,12:Content-Type,10:text/plain,7:shipped,"
	keptGetFailed = "21:orders GET /orders/42,1:E,7:timeout,4:gone,"
	keptPay       = "26:orders POST /orders/42/pay,1:R,3:200,1:1,12:Content-Type,10:text/plain,4:paid,"
	// Raw bytes (a NUL, ',' and ':' in the body), two headers sorted by name.
	keptGetBytes = "21:orders GET /orders/42,1:R,3:404,1:2,12:Content-Type,24:application/octet-stream,4:X-Id,2:42,5:\x00,1:x,"

	liveOutcome          = "fetch 200 replayed=false headers=1 type=text/plain len=5 body=hello"
	keptGetOutcome       = "fetch 200 replayed=true headers=1 type=text/plain len=7 body=shipped"
	keptPayOutcome       = "fetch 200 replayed=true headers=1 type=text/plain len=4 body=paid"
	keptGetBytesOutcome  = "fetch 404 replayed=true headers=2 type=application/octet-stream len=5 body=hex:002c313a78"
	keptGetFailedOutcome = "fetch-failed timeout gone"
)

// fetcherState scripts the chat's flow state and kept calls ("": none).
func fetcherState(flow, calls string) func(e *scripted) {
	return func(e *scripted) {
		e.state["botrun.flow"] = flow
		if calls != "" {
			e.state["botrun.flow.calls"] = calls
		}
	}
}

// fetcherReplay is what a message answering next? makes when the replay of
// the first step read the kept call answered by replayed: the second call
// reaches the host and is kept, after the first as the replay left it
// (kept: "" when it was not kept).
func fetcherReplay(replayed, kept string) []string {
	return []string{"post c1 had " + replayed + " key=", flowPayCall, "post c1 paid " + liveOutcome + " key=", "post c1 last? key=",
		"state-set botrun.flow.calls " + kept + livePay, "state-set botrun.flow 7:fetcher,13:flow-continue,"}
}

// fetcherCalledAgain is what a message answering next? makes when the
// replay had no kept call for the first step: the call reaches the host
// again and is not kept (it is a replayed step's); the second is.
var fetcherCalledAgain = append([]string{flowGetCall}, fetcherReplay(liveOutcome, "")...)

// flowCallRows: a flow's API calls (abi/SPEC.md section 7, "API calls of
// replayed steps"). A step's call is made once, by the message that takes
// the step, and kept in botrun.flow.calls with the exact bytes every SDK
// writes; a later message replaying the step reads the kept answer (a
// response marked replayed, or the FETCH_FAILED) without calling the host.
var flowCallRows = []conformanceRow{
	{name: "flow/fetcher-start", text: "flow-start fetcher", want: "ok", noLogs: []string{"level=WARN"},
		calls: []string{flowGetCall, "post c1 first " + liveOutcome + " key=", "post c1 next? key=",
			"state-set botrun.flow.calls " + liveGet, "state-set botrun.flow 7:fetcher,"}},
	// A call that got no response is kept too, as E.
	{name: "flow/fetcher-start-keeps-fetch-failed", text: "flow-start fetcher",
		env: fetchFails(&abi.FetchError{Reason: abi.FetchTimeout, Message: "gone"}), want: "ok",
		calls: []string{flowGetCall, "post c1 first " + keptGetFailedOutcome + " key=", "post c1 next? key=",
			"state-set botrun.flow.calls " + keptGetFailed, "state-set botrun.flow 7:fetcher,"}},
	// The state write of the calls refused (bot.max_chat_state): the key is
	// deleted, a warning logged, and the flow's own state still written.
	{name: "flow/fetcher-calls-too-large", text: "flow-start fetcher", env: func(e *scripted) {
		e.setErr, e.setErrKey = wasm.ErrStateTooLarge, "botrun.flow.calls"
	}, want: "ok", logs: []string{"level=WARN", "the answers of the flow's API calls are too large for the chat's state"},
		calls: []string{flowGetCall, "post c1 first " + liveOutcome + " key=", "post c1 next? key=",
			"state-set botrun.flow.calls " + liveGet, "state-delete botrun.flow.calls", "state-set botrun.flow 7:fetcher,"}},

	// The replayed first step's call reads the kept answer: no fetch of it
	// reaches the host.
	{name: "flow/fetcher-replays-kept-response", text: "flow-continue", env: fetcherState("7:fetcher,", keptGet),
		want: "in-flow", calls: fetcherReplay(keptGetOutcome, keptGet)},
	{name: "flow/fetcher-replays-kept-fetch-failed", text: "flow-continue", env: fetcherState("7:fetcher,", keptGetFailed),
		want: "in-flow", calls: fetcherReplay(keptGetFailedOutcome, keptGetFailed)},
	// A call the host refused got no answer: it is not kept, and the kept
	// calls, unchanged in this run, are not written.
	{name: "flow/fetcher-refused-not-kept", text: "flow-continue", env: func(e *scripted) {
		fetcherState("7:fetcher,", keptGet)(e)
		fetchFails(fmt.Errorf("%q: %w", "orders", wasm.ErrNoAPI))(e)
	}, want: "in-flow", calls: []string{"post c1 had " + keptGetOutcome + " key=", flowPayCall, "post c1 paid err NOT_FOUND key=",
		"post c1 last? key=", "state-set botrun.flow 7:fetcher,13:flow-continue,"}},
	{name: "flow/fetcher-replays-kept-bytes", text: "flow-continue", env: fetcherState("7:fetcher,", keptGetBytes),
		want: "in-flow", calls: fetcherReplay(keptGetBytesOutcome, keptGetBytes)},
	// Kept calls the replay did not read are dropped when the flow reaches
	// this message's question: the live call is made and appended, never
	// answered from the kept one of the same id.
	{name: "flow/fetcher-drops-unread", text: "flow-continue", env: fetcherState("7:fetcher,", keptGet+keptPay),
		want: "in-flow", calls: fetcherReplay(keptGetOutcome, keptGet)},
	// The flow finishing: both replayed calls read, none made; its kept
	// calls go with it.
	{name: "flow/fetcher-finishes", text: "flow-continue", env: fetcherState("7:fetcher,13:flow-continue,", keptGet+keptPay),
		want: "in-flow", calls: []string{"post c1 end " + keptPayOutcome + " key=", "state-delete botrun.flow.calls", "state-delete botrun.flow"}},
	// A flow that had no kept calls deletes none.
	{name: "flow/fetcher-finishes-nothing-kept", text: "flow-continue", env: fetcherState("7:fetcher,13:flow-continue,", ""),
		want: "in-flow", calls: []string{flowGetCall, flowPayCall, "post c1 end " + liveOutcome + " key=", "state-delete botrun.flow"}},
	{name: "flow/fetcher-no-kept-calls", text: "flow-continue", env: fetcherState("7:fetcher,", ""), want: "in-flow", calls: fetcherCalledAgain},
}

func init() {
	conformanceRows = append(conformanceRows, buttonRows...)
	conformanceRows = append(conformanceRows, channelRows...)
	conformanceRows = append(conformanceRows, fetchRows...)
	conformanceRows = append(conformanceRows, flowCallRows...)
	// A kept call whose api, method or path differs (the module changed):
	// the call is made through the host and not kept, and the kept one,
	// unread, is dropped.
	for _, c := range []struct{ name, kept string }{
		{"path", "21:orders GET /orders/41,1:R,3:200,1:1,12:Content-Type,10:text/plain,7:shipped,"},
		{"method", "22:orders HEAD /orders/42,1:R,3:200,1:1,12:Content-Type,10:text/plain,7:shipped,"},
		{"api", "21:stocks GET /orders/42,1:E,7:timeout,4:gone,"},
	} {
		conformanceRows = append(conformanceRows, conformanceRow{name: "flow/fetcher-module-changed-" + c.name, text: "flow-continue",
			env: fetcherState("7:fetcher,", c.kept), want: "in-flow", calls: fetcherCalledAgain})
	}
	// A value of botrun.flow.calls that does not parse is no kept calls,
	// not even a prefix of it: the call is made again, and no SDK traps.
	for _, c := range []struct{ name, calls string }{
		{"empty", ""},
		{"junk", "junk"},
		{"trailing-junk", keptGet + "junk"},
		{"call-cut-short", keptGet + "3:abc,"},
		{"body-cut-short", keptGet[:len(keptGet)-1]},
		{"fetch-failed-cut-short", "21:orders GET /orders/42,1:E,7:timeout,"},
		{"no-such-kind", "21:orders GET /orders/42,1:X,7:shipped,"},
		{"status-leading-zero", "21:orders GET /orders/42,1:R,4:0200,1:0,7:shipped,"},
		{"status-signed", "21:orders GET /orders/42,1:R,4:+200,1:0,7:shipped,"},
		{"status-over-9-digits", "21:orders GET /orders/42,1:R,10:2000000000,1:0,7:shipped,"},
		{"headers-past-the-value", "21:orders GET /orders/42,1:R,3:200,9:999999999,7:shipped,"},
		{"headers-not-sorted", "21:orders GET /orders/42,1:R,3:200,1:2,4:X-Id,2:42,12:Content-Type,10:text/plain,7:shipped,"},
		{"header-twice", "21:orders GET /orders/42,1:R,3:200,1:2,4:X-Id,2:42,4:X-Id,2:43,7:shipped,"},
		{"length-past-any-int", "99999999999999999999:x,"},
		{"length-wraps-32-bits", "4294967297:x,"},
		{"length-leading-zero", "021:orders GET /orders/42,1:E,7:timeout,4:gone,"},
	} {
		conformanceRows = append(conformanceRows, conformanceRow{name: "flow/fetcher-bad-calls-" + c.name, text: "flow-continue",
			env: func(e *scripted) {
				e.state["botrun.flow"] = "7:fetcher,"
				e.state["botrun.flow.calls"] = c.calls
			}, want: "in-flow", calls: fetcherCalledAgain})
	}
}

// confLog is a log sink the test reads back.
type confLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *confLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *confLog) take() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.b.String()
	l.b.Reset()
	return s
}

// loadLogged loads the module at path on an engine of one instance whose
// log, at debug level, the test reads back; both close when the test ends.
func loadLogged(t *testing.T, path string) (*wasm.Module, *confLog) {
	t.Helper()
	logs := &confLog{}
	ctx := context.Background()
	e, err := wasm.NewEngine(ctx, wasm.Config{Workers: 1, CacheDir: wasm.TestCacheDir,
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close(ctx) })
	m, err := e.Load(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(ctx) })
	return m, logs
}

// TestConformance drives every SDK's conformance guest through the same
// table, the way a backend conformance suite drives backends: each row is
// an event, a scripted host, and the outcome every SDK must report.
func TestConformance(t *testing.T) {
	for _, g := range conformanceGuests {
		t.Run(g.lang, func(t *testing.T) {
			m, logs := loadLogged(t, g.build(t))
			ctx := context.Background()
			for _, row := range conformanceRows {
				t.Run(row.name, func(t *testing.T) {
					env := &scripted{event: "ev", now: 1764412800000, state: map[string]string{}, journal: map[string]bool{}}
					if row.env != nil {
						row.env(env)
					}
					var host wasm.Env = env
					switch {
					case env.noBroadcast:
						host = noBroadcaster{env}
					case env.noEditor:
						host = noEditor{env, env}
					case env.noFetcher:
						host = noFetcher{env, env, env}
					}
					logs.take()
					ev := abi.Event{ID: "ev", Provider: "web", Chat: "c1", From: "u1", Text: row.text, Attempt: 1, ReceivedAt: 1764412800000,
						Media: []abi.Media{{Type: "image", Ref: "r0"}}}
					if row.event != nil {
						row.event(&ev)
					}
					handles := 1
					if row.again {
						if err := m.Handle(ctx, ev, host); err != nil {
							t.Errorf("Handle: %v", err)
						}
						ev.Attempt, handles = 2, 2
					}
					err := m.Handle(ctx, ev, host)
					var fault *wasm.FaultError
					var herr *wasm.HandlerError
					switch {
					case row.fault != "":
						if !errors.As(err, &fault) || fault.Kind != row.fault {
							t.Errorf("Handle: %v, want a %s fault", err, row.fault)
						}
					case row.handlerErr != "":
						if !errors.As(err, &herr) || herr.Message != row.handlerErr {
							t.Errorf("Handle: %v, want the handler error %q", err, row.handlerErr)
						}
					case err != nil:
						t.Errorf("Handle: %v", err)
					}
					if len(env.reports) != handles || env.reports[handles-1] != row.want {
						t.Errorf("%s: %q reported %q, want %q", g.lang, row.text, env.reports, row.want)
					}
					if row.calls != nil && strings.Join(env.calls, "\n") != strings.Join(row.calls, "\n") {
						t.Errorf("%s: %q made the calls\n\t%s\nwant\n\t%s", g.lang, row.text, strings.Join(env.calls, "\n\t"), strings.Join(row.calls, "\n\t"))
					}
					got := logs.take()
					for _, l := range row.logs {
						if !strings.Contains(got, l) {
							t.Errorf("%s: %q: the log lacks %.80q:\n%.2000s", g.lang, row.text, l, got)
						}
					}
					for _, l := range row.noLogs {
						if strings.Contains(got, l) {
							t.Errorf("%s: %q: the log has %.80q", g.lang, row.text, l)
						}
					}
				})
			}
		})
	}
}

// TestConformanceImports: edit, typing (SPEC.md section 4.6) and fetch
// (section 4.8) are additive imports. Every SDK's conformance guest, which
// calls them, imports them; its echo example, which does not, imports none
// of them, so it loads on a host older than them.
func TestConformanceImports(t *testing.T) {
	echoes := map[string]func(t *testing.T) string{
		"go": func(t *testing.T) string { return wasmbuild.Go(t, "../../examples/echo") },
		"c": func(t *testing.T) string {
			return wasmbuild.C(t, "../../examples/c-echo", "echo.c", "../../guest-sdk/c/botrun.c")
		},
		"rust":           func(t *testing.T) string { return wasmbuild.Rust(t, "../../examples/rust-echo") },
		"assemblyscript": func(t *testing.T) string { return wasmbuild.AssemblyScript(t, "../../examples/as-echo") },
	}
	ctx := context.Background()
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter())
	defer rt.Close(ctx)
	imports := func(t *testing.T, path string) map[string]bool {
		t.Helper()
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		cm, err := rt.CompileModule(ctx, b)
		if err != nil {
			t.Fatal(err)
		}
		defer cm.Close(ctx)
		got := map[string]bool{}
		for _, f := range cm.ImportedFunctions() {
			if mod, name, ok := f.Import(); ok && mod == abi.HostModule {
				got[name] = true
			}
		}
		return got
	}
	for _, g := range conformanceGuests {
		t.Run(g.lang, func(t *testing.T) {
			conf, echo := imports(t, g.build(t)), imports(t, echoes[g.lang](t))
			for _, fn := range []string{abi.FuncEdit, abi.FuncTyping, abi.FuncFetch} {
				if !conf[fn] {
					t.Errorf("the %s conformance guest does not import %q", g.lang, fn)
				}
				if echo[fn] {
					t.Errorf("the %s echo example imports %q, which it never calls", g.lang, fn)
				}
			}
		})
	}
}

// TestReminderExample runs examples/reminder against the scripted host: a
// reminder is an enqueue at the event's time plus n seconds, answered
// scheduled, then the reply "ok"; anything else gets the usage line.
func TestReminderExample(t *testing.T) {
	path := wasmbuild.Go(t, "../../examples/reminder")
	ctx := context.Background()
	e, err := wasm.NewEngine(ctx, wasm.Config{Workers: 1, CacheDir: wasm.TestCacheDir, Logger: slog.New(slog.NewTextHandler(&confLog{}, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	m, err := e.Load(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(ctx)
	const usage = "post c1 usage: remind <seconds> <text> key="
	for _, c := range []struct {
		text  string
		calls []string
	}{
		{"remind 90 take the cake out", []string{"enqueue c1 take the cake out key= at=1764412890000", "post c1 ok key="}},
		{"remind 2592000 renew", []string{"enqueue c1 renew key= at=1767004800000", "post c1 ok key="}},
		{"remind 0 now", []string{usage}},
		{"remind 2592001 too late", []string{usage}},
		{"remind x y", []string{usage}},
		{"remind 5", []string{usage}},
		{"hello", []string{usage}},
	} {
		env := &scripted{event: "ev", now: 1764412800000, state: map[string]string{}}
		ev := abi.Event{ID: "ev", Provider: "web", Chat: "c1", From: "u1", Text: c.text, Attempt: 1, ReceivedAt: 1764412800000}
		if err := m.Handle(ctx, ev, env); err != nil {
			t.Errorf("%q: Handle: %v", c.text, err)
		}
		if strings.Join(env.calls, "\n") != strings.Join(c.calls, "\n") {
			t.Errorf("%q made the calls\n\t%s\nwant\n\t%s", c.text, strings.Join(env.calls, "\n\t"), strings.Join(c.calls, "\n\t"))
		}
	}
}
