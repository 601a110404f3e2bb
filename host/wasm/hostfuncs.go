package wasm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/botrun/botrun/abi"
)

// Env answers the host calls a guest makes while it handles one event. The
// host's send path implements it; errors returned by Env are host failures
// (HOST_ERROR to the guest, and the event's attempt fails).
type Env interface {
	// Send delivers req through the outbox and reports the outcome.
	Send(ctx context.Context, req abi.SendRequest) (abi.SendResult, error)
	// Enqueue journals req for the sweeper and returns at once.
	Enqueue(ctx context.Context, req abi.SendRequest) (abi.SendResult, error)
	// Post numbers and keys req and returns at once (status queued); the
	// host makes the send when the handler returns, so the wait for the
	// journal and the channel holds no instance.
	Post(ctx context.Context, req abi.SendRequest) (abi.SendResult, error)
	// StateGet reads a conversation state value; ok is false when absent.
	StateGet(ctx context.Context, key string) (value []byte, ok bool, err error)
	// StateSet buffers a state write; ErrStateTooLarge refuses it (the
	// guest sees TOO_LARGE).
	StateSet(ctx context.Context, key string, value []byte) error
	// StateDelete buffers a state delete; ErrStateTooLarge refuses it.
	StateDelete(ctx context.Context, key string) error
	// LoadMedia downloads the bytes of the event's media[index]. An
	// *abi.MediaUnavailableError reaches the guest with its reason; ErrNoMedia
	// is NOT_FOUND, ErrMediaTooLarge TOO_LARGE, ErrUnsupported UNSUPPORTED,
	// any other error a host failure.
	LoadMedia(ctx context.Context, index int) ([]byte, error)
}

// Broadcaster is implemented by an Env that can broadcast (the ABI's
// broadcast host function; without it the guest gets UNSUPPORTED).
// ErrTooLarge refuses a broadcast over the host's limit (TOO_LARGE).
type Broadcaster interface {
	Broadcast(ctx context.Context, req abi.BroadcastRequest) (abi.BroadcastResult, error)
}

// Editor is implemented by an Env that can edit a sent message and show
// "typing…" (the ABI's edit and typing; without it the guest gets
// UNSUPPORTED). ErrUnsupported says the channel cannot; any other error is
// the channel's failure: the guest gets CHANNEL_FAILED and the event goes
// on.
type Editor interface {
	Edit(ctx context.Context, req abi.EditRequest) error
	Typing(ctx context.Context, req abi.TypingRequest) error
}

// ErrTooLarge is returned by Env calls for a request over a host limit (a
// broadcast to more chats than bot.max_broadcast, a send or broadcast past
// bot.max_event_bytes); the guest sees TOO_LARGE.
var ErrTooLarge = errors.New("the request is over the host's limit")

// ErrNoMedia is returned by Env.LoadMedia for an index the event does not have.
var ErrNoMedia = errors.New("the event has no media at that index")

// ErrMediaTooLarge is returned by Env.LoadMedia for a file over abi.MaxMedia;
// the guest sees TOO_LARGE.
var ErrMediaTooLarge = errors.New("the media file is larger than the ABI's limit")

// ErrStateTooLarge is returned by Env.StateSet and Env.StateDelete for a
// write over the host's state limits (per event, or the chat's quota); the
// guest sees TOO_LARGE and nothing is buffered.
var ErrStateTooLarge = errors.New("the state write is over the host's state limits")

// ErrUnsupported is returned by an Env that does not offer a function yet; the
// guest sees UNSUPPORTED.
var ErrUnsupported = errors.New("unsupported by this host")

// call is the state of one botrun_on_event call, reached by host functions
// through the call's context.
type call struct {
	// base is the module's logger; log() adds the event id on first use.
	base       *slog.Logger
	eventID    string
	lg         *slog.Logger
	event      []byte
	receivedAt int64
	env        Env
	result     []byte
	hasResult  bool
	lastError  string
	// out is the instance's output budget: guest log lines and the host's
	// warnings about the guest spend it.
	out *outputBudget
	// hostErr is the first host failure; it turns the call into a fault.
	hostErr error
	// deadline is the guest's clock, paused while a host call waits.
	deadline *guestDeadline
	// hook is the send hook export this call runs ("" for an event): a
	// hook reads its SendHook with event_read and may log, but the event's
	// functions answer it as outside an event.
	hook string
	// rewrite is the send as botrun_before_send rewrote it.
	rewrite *abi.SendRequest
}

// wait runs a host call that waits on a channel (a send retried inline, a
// media download) with the guest's deadline paused. The host bounds those
// waits itself: outbox.inline_max, bot.max_sends, one download per media.
func (c *call) wait(f func()) {
	c.deadline.pause()
	defer c.deadline.resume()
	f()
}

type callKey struct{}

// log is the call's logger, tagged with the event.
func (c *call) log() *slog.Logger {
	if c.lg == nil {
		c.lg = c.base.With(slog.String("event", c.eventID))
	}
	return c.lg
}

// warn logs a warning about the guest's doing, if the event's output budget
// has a line left: a guest cannot flood the log through the host either.
func (c *call) warn(msg string, args ...any) {
	if c.out == nil || c.out.line(0) {
		c.log().Warn(msg, args...)
	}
}

func withCall(ctx context.Context, c *call) context.Context {
	return context.WithValue(ctx, callKey{}, c)
}

func callOf(ctx context.Context) *call {
	c, _ := ctx.Value(callKey{}).(*call)
	return c
}

// eventOf is the call of the event running, nil outside one: during a send
// hook too, so a hook neither sends nor touches state.
func eventOf(ctx context.Context) *call {
	if c := callOf(ctx); c != nil && c.hook == "" {
		return c
	}
	return nil
}

const (
	i32 = api.ValueTypeI32
	i64 = api.ValueTypeI64
)

// hostModule builds the botrun host module of SPEC.md section 4.
func hostModule(rt wazero.Runtime) wazero.HostModuleBuilder {
	b := rt.NewHostModuleBuilder(abi.HostModule)
	fn := func(name string, params, results []api.ValueType, f api.GoModuleFunc) {
		b.NewFunctionBuilder().WithGoModuleFunction(f, params, results).Export(name)
	}
	fn(abi.FuncEventRead, []api.ValueType{i32, i32}, []api.ValueType{i32}, eventRead)
	fn(abi.FuncSend, []api.ValueType{i32, i32}, []api.ValueType{i32}, sendFunc(abi.FuncSend))
	fn(abi.FuncEnqueue, []api.ValueType{i32, i32}, []api.ValueType{i32}, sendFunc(abi.FuncEnqueue))
	fn(abi.FuncPost, []api.ValueType{i32, i32}, []api.ValueType{i32}, sendFunc(abi.FuncPost))
	fn(abi.FuncResultRead, []api.ValueType{i32, i32}, []api.ValueType{i32}, resultRead)
	fn(abi.FuncStateGet, []api.ValueType{i32, i32}, []api.ValueType{i32}, stateGet)
	fn(abi.FuncStateSet, []api.ValueType{i32, i32, i32, i32}, []api.ValueType{i32}, stateSet)
	fn(abi.FuncStateDelete, []api.ValueType{i32, i32}, []api.ValueType{i32}, stateDelete)
	fn(abi.FuncLog, []api.ValueType{i32, i32, i32}, nil, logFunc)
	fn(abi.FuncNowMs, nil, []api.ValueType{i64}, nowMs)
	fn(abi.FuncMediaLoad, []api.ValueType{i32}, []api.ValueType{i32}, mediaLoad)
	fn(abi.FuncBroadcast, []api.ValueType{i32, i32}, []api.ValueType{i32}, broadcast)
	fn(abi.FuncEdit, []api.ValueType{i32, i32}, []api.ValueType{i32}, channelOp(abi.FuncEdit))
	fn(abi.FuncTyping, []api.ValueType{i32, i32}, []api.ValueType{i32}, channelOp(abi.FuncTyping))
	fn(abi.FuncRewrite, []api.ValueType{i32, i32}, []api.ValueType{i32}, rewrite)
	return b
}

// envModule provides env.abort for AssemblyScript; calling it traps.
func envModule(rt wazero.Runtime) wazero.HostModuleBuilder {
	b := rt.NewHostModuleBuilder(abi.EnvModule)
	b.NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(func(ctx context.Context, mod api.Module, stack []uint64) {
		panic("guest called env.abort")
	}), []api.ValueType{i32, i32, i32, i32}, nil).Export("abort")
	return b
}

func code(c abi.Code) uint64 { return uint64(uint32(int32(c))) }

// read copies guest memory [ptr, ptr+n); ok is false when it is out of bounds.
func read(mod api.Module, ptr, n uint32) ([]byte, bool) {
	b, ok := mod.Memory().Read(ptr, n)
	if !ok {
		return nil, false
	}
	return append([]byte(nil), b...), true
}

// write copies as much of src as fits into guest memory at [ptr, ptr+n).
func write(mod api.Module, ptr, n uint32, src []byte) (uint32, bool) {
	if uint32(len(src)) < n {
		n = uint32(len(src))
	}
	if !mod.Memory().Write(ptr, src[:n]) {
		return 0, false
	}
	return n, true
}

var eventRead = api.GoModuleFunc(func(ctx context.Context, mod api.Module, stack []uint64) {
	c := callOf(ctx)
	if c == nil {
		stack[0] = code(abi.CodeNoResult)
		return
	}
	n, ok := write(mod, api.DecodeU32(stack[0]), api.DecodeU32(stack[1]), c.event)
	if !ok {
		stack[0] = code(abi.CodeBadPointer)
		return
	}
	stack[0] = uint64(n)
})

var resultRead = api.GoModuleFunc(func(ctx context.Context, mod api.Module, stack []uint64) {
	c := callOf(ctx)
	if c == nil || !c.hasResult {
		stack[0] = code(abi.CodeNoResult)
		return
	}
	n, ok := write(mod, api.DecodeU32(stack[0]), api.DecodeU32(stack[1]), c.result)
	if !ok {
		stack[0] = code(abi.CodeBadPointer)
		return
	}
	stack[0] = uint64(n)
})

func (c *call) setResult(b []byte) uint64 {
	c.result, c.hasResult = b, true
	return uint64(len(b))
}

// fail records a host failure: the guest sees HOST_ERROR and the event's
// attempt fails once the call returns.
func (c *call) fail(err error) uint64 {
	// The first failure is always logged (it fails the event); a guest that
	// keeps calling gets the rest logged within its output budget.
	if c.hostErr == nil {
		c.hostErr = err
		c.log().Error("host function failed", "err", err)
	} else if c.out == nil || c.out.line(0) {
		c.log().Error("host function failed", "err", err)
	}
	return code(abi.CodeHostError)
}

// sendFunc is send, enqueue or post (name): they take the same SendRequest
// and answer a SendResult.
func sendFunc(name string) api.GoModuleFunc {
	return func(ctx context.Context, mod api.Module, stack []uint64) {
		c, b, ok := payloadArg(ctx, mod, stack)
		if !ok {
			return
		}
		req, err := abi.DecodeSendRequest(b)
		if err == nil && req.At != 0 && name != abi.FuncEnqueue {
			err = fmt.Errorf("%w: \"at\" schedules an enqueue; %s sends now", abi.ErrBadPayload, name)
		}
		if err != nil {
			c.warn("guest passed a bad payload", "func", name, "err", err)
			stack[0] = code(abi.CodeBadPayload)
			return
		}
		var res abi.SendResult
		c.wait(func() {
			switch name {
			case abi.FuncEnqueue:
				res, err = c.env.Enqueue(ctx, req)
			case abi.FuncPost:
				res, err = c.env.Post(ctx, req)
			default:
				res, err = c.env.Send(ctx, req)
			}
		})
		switch {
		case errors.Is(err, ErrTooLarge):
			c.warn("send refused", "func", name, "err", err)
			stack[0] = code(abi.CodeTooLarge)
			return
		case err != nil:
			stack[0] = c.fail(err)
			return
		}
		out, err := json.Marshal(res)
		if err != nil {
			stack[0] = c.fail(err)
			return
		}
		stack[0] = c.setResult(out)
	}
}

// payloadArg reads the (ptr, len) JSON argument of a host function called
// within an event. ok is false when the call is answered already (stack[0]
// holds UNSUPPORTED outside an event, TOO_LARGE or BAD_POINTER).
func payloadArg(ctx context.Context, mod api.Module, stack []uint64) (c *call, b []byte, ok bool) {
	c = eventOf(ctx)
	if c == nil {
		stack[0] = code(abi.CodeUnsupported)
		return nil, nil, false
	}
	b, ok = jsonArg(mod, stack)
	return c, b, ok
}

// jsonArg reads the (ptr, len) JSON argument in stack[0:2], at most
// abi.MaxPayload bytes; ok is false when stack[0] holds the answer
// (TOO_LARGE or BAD_POINTER).
func jsonArg(mod api.Module, stack []uint64) ([]byte, bool) {
	n := api.DecodeU32(stack[1])
	if n > abi.MaxPayload {
		stack[0] = code(abi.CodeTooLarge)
		return nil, false
	}
	b, ok := read(mod, api.DecodeU32(stack[0]), n)
	if !ok {
		stack[0] = code(abi.CodeBadPointer)
	}
	return b, ok
}

// broadcast journals one send per chat (abi.BroadcastRequest) and answers an
// abi.BroadcastResult.
func broadcast(ctx context.Context, mod api.Module, stack []uint64) {
	if c := eventOf(ctx); c != nil {
		if _, ok := c.env.(Broadcaster); !ok {
			stack[0] = code(abi.CodeUnsupported)
			return
		}
	}
	c, b, ok := payloadArg(ctx, mod, stack)
	if !ok {
		return
	}
	bc := c.env.(Broadcaster)
	req, err := abi.DecodeBroadcastRequest(b)
	if err != nil {
		c.warn("guest passed a bad payload", "func", abi.FuncBroadcast, "err", err)
		stack[0] = code(abi.CodeBadPayload)
		return
	}
	var res abi.BroadcastResult
	c.wait(func() { res, err = bc.Broadcast(ctx, req) })
	switch {
	case errors.Is(err, ErrTooLarge):
		c.warn("broadcast refused", "err", err)
		stack[0] = code(abi.CodeTooLarge)
		return
	case err != nil:
		stack[0] = c.fail(err)
		return
	}
	out, err := json.Marshal(res)
	if err != nil {
		stack[0] = c.fail(err)
		return
	}
	stack[0] = c.setResult(out)
}

// channelOp is edit or typing (name): a channel call that is not journaled
// and never fails the event. It answers 0, or CHANNEL_FAILED with the
// channel's error as the pending result.
func channelOp(name string) api.GoModuleFunc {
	return func(ctx context.Context, mod api.Module, stack []uint64) {
		if c := eventOf(ctx); c != nil {
			if _, ok := c.env.(Editor); !ok {
				stack[0] = code(abi.CodeUnsupported)
				return
			}
		}
		c, b, ok := payloadArg(ctx, mod, stack)
		if !ok {
			return
		}
		ed := c.env.(Editor)
		var err error
		if name == abi.FuncEdit {
			var req abi.EditRequest
			if req, err = abi.DecodeEditRequest(b); err == nil {
				c.wait(func() { err = ed.Edit(ctx, req) })
			}
		} else {
			var req abi.TypingRequest
			if req, err = abi.DecodeTypingRequest(b); err == nil {
				c.wait(func() { err = ed.Typing(ctx, req) })
			}
		}
		switch {
		case err == nil:
			stack[0] = 0
		case errors.Is(err, abi.ErrBadPayload):
			c.warn("guest passed a bad payload", "func", name, "err", err)
			stack[0] = code(abi.CodeBadPayload)
		case errors.Is(err, ErrUnsupported):
			stack[0] = code(abi.CodeUnsupported)
		default:
			c.warn("the channel failed", "func", name, "err", err)
			// At most 160 bytes keep the JSON under the 1 KiB the guest
			// reads, whatever it escapes.
			msg := err.Error()
			if len(msg) > 160 {
				msg = strings.ToValidUTF8(msg[:160], "")
			}
			out, _ := json.Marshal(abi.ChannelError{Error: msg})
			c.setResult(out)
			stack[0] = code(abi.CodeChannelFailed)
		}
	}
}

// stateKey reads a state key argument, or returns the error code to answer.
func stateKey(mod api.Module, ptr, n uint32) (string, abi.Code) {
	if n > abi.MaxStateKey {
		return "", abi.CodeTooLarge
	}
	b, ok := read(mod, ptr, n)
	if !ok {
		return "", abi.CodeBadPointer
	}
	if len(b) == 0 || abi.CheckName("state key", string(b)) != nil {
		return "", abi.CodeBadPayload
	}
	return string(b), 0
}

func (c *call) stateErr(err error) uint64 {
	switch {
	case errors.Is(err, ErrUnsupported):
		return code(abi.CodeUnsupported)
	case errors.Is(err, ErrStateTooLarge):
		c.warn("guest state write refused", "err", err)
		return code(abi.CodeTooLarge)
	}
	return c.fail(err)
}

var stateGet = api.GoModuleFunc(func(ctx context.Context, mod api.Module, stack []uint64) {
	c := eventOf(ctx)
	key, bad := stateKey(mod, api.DecodeU32(stack[0]), api.DecodeU32(stack[1]))
	switch {
	case c == nil:
		stack[0] = code(abi.CodeUnsupported)
		return
	case bad != 0:
		stack[0] = code(bad)
		return
	}
	var v []byte
	var ok bool
	var err error
	// A journal read is the guest's own time: a guest must not outlive its
	// deadline by reading state in a loop.
	v, ok, err = c.env.StateGet(ctx, key)
	switch {
	case err != nil:
		stack[0] = c.stateErr(err)
	case !ok:
		stack[0] = code(abi.CodeNotFound)
	default:
		stack[0] = c.setResult(v)
	}
})

var stateSet = api.GoModuleFunc(func(ctx context.Context, mod api.Module, stack []uint64) {
	c := eventOf(ctx)
	key, bad := stateKey(mod, api.DecodeU32(stack[0]), api.DecodeU32(stack[1]))
	switch {
	case c == nil:
		stack[0] = code(abi.CodeUnsupported)
		return
	case bad != 0:
		stack[0] = code(bad)
		return
	}
	n := api.DecodeU32(stack[3])
	if n > abi.MaxPayload {
		stack[0] = code(abi.CodeTooLarge)
		return
	}
	v, ok := read(mod, api.DecodeU32(stack[2]), n)
	if !ok {
		stack[0] = code(abi.CodeBadPointer)
		return
	}
	if err := c.env.StateSet(ctx, key, v); err != nil {
		stack[0] = c.stateErr(err)
		return
	}
	stack[0] = 0
})

var stateDelete = api.GoModuleFunc(func(ctx context.Context, mod api.Module, stack []uint64) {
	c := eventOf(ctx)
	key, bad := stateKey(mod, api.DecodeU32(stack[0]), api.DecodeU32(stack[1]))
	switch {
	case c == nil:
		stack[0] = code(abi.CodeUnsupported)
		return
	case bad != 0:
		stack[0] = code(bad)
		return
	}
	if err := c.env.StateDelete(ctx, key); err != nil {
		stack[0] = c.stateErr(err)
		return
	}
	stack[0] = 0
})

// logFunc logs one guest line (cut at maxOutputLine) within the event's
// output budget; past it the line is counted, not copied. The last line at
// error level is kept for the HandlerError whatever the budget says.
var logFunc = api.GoModuleFunc(func(ctx context.Context, mod api.Module, stack []uint64) {
	c := callOf(ctx)
	if c == nil {
		return
	}
	level := int32(api.DecodeI32(stack[0]))
	ptr, n := api.DecodeU32(stack[1]), int(api.DecodeU32(stack[2]))
	line := min(n, maxOutputLine)
	c.out.drop(n - line)
	admitted := c.out.take(line)
	read := admitted
	if level >= abi.LogError {
		read = line
	} else if admitted == 0 && line > 0 {
		return
	}
	b, ok := mod.Memory().Read(ptr, uint32(read))
	if !ok {
		return
	}
	msg := string(b)
	l := slog.LevelInfo
	switch {
	case level <= abi.LogDebug:
		l = slog.LevelDebug
	case level == abi.LogWarn:
		l = slog.LevelWarn
	case level >= abi.LogError:
		l = slog.LevelError
		c.lastError = msg
	}
	if (admitted > 0 || line == 0) && c.out.line(admitted) {
		c.log().Log(ctx, l, msg[:admitted], slog.String("source", "guest"))
	}
})

var nowMs = api.GoModuleFunc(func(ctx context.Context, mod api.Module, stack []uint64) {
	c := callOf(ctx)
	if c == nil {
		stack[0] = 0
		return
	}
	stack[0] = uint64(c.receivedAt)
})

var mediaLoad = api.GoModuleFunc(func(ctx context.Context, mod api.Module, stack []uint64) {
	c := eventOf(ctx)
	if c == nil {
		stack[0] = code(abi.CodeUnsupported)
		return
	}
	index := int32(api.DecodeI32(stack[0]))
	if index < 0 {
		stack[0] = code(abi.CodeNotFound)
		return
	}
	var b []byte
	var err error
	c.wait(func() { b, err = c.env.LoadMedia(ctx, int(index)) })
	var unavailable *abi.MediaUnavailableError
	switch {
	case errors.Is(err, ErrMediaTooLarge), err == nil && len(b) > abi.MaxMedia:
		stack[0] = code(abi.CodeTooLarge)
	case err == nil:
		stack[0] = c.setResult(b)
	case errors.As(err, &unavailable):
		e := *unavailable
		// At most 160 bytes of message keep the JSON under the 1 KiB the
		// guest reads, whatever it escapes.
		if len(e.Message) > 160 {
			e.Message = strings.ToValidUTF8(e.Message[:160], "")
		}
		out, _ := json.Marshal(e)
		c.setResult(out)
		stack[0] = code(abi.CodeMediaUnavailable)
	case errors.Is(err, ErrNoMedia):
		stack[0] = code(abi.CodeNotFound)
	case errors.Is(err, ErrUnsupported):
		stack[0] = code(abi.CodeUnsupported)
	default:
		stack[0] = c.fail(err)
	}
})

// rewrite replaces the send botrun_before_send is looking at with the
// SendRequest at (ptr, len): a hook's answer (the last call wins). Anywhere
// else it is UNSUPPORTED.
var rewrite = api.GoModuleFunc(func(ctx context.Context, mod api.Module, stack []uint64) {
	c := callOf(ctx)
	if c == nil || c.hook != abi.ExportBeforeSend {
		stack[0] = code(abi.CodeUnsupported)
		return
	}
	b, ok := jsonArg(mod, stack)
	if !ok {
		return
	}
	req, err := abi.DecodeRewrite(b)
	if err != nil {
		c.warn("guest passed a bad payload", "func", abi.FuncRewrite, "err", err)
		stack[0] = code(abi.CodeBadPayload)
		return
	}
	c.rewrite = &req
	stack[0] = 0
})
