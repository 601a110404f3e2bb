package hostfuncs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"github.com/botrun/botrun/abi"
)

const (
	i32 = api.ValueTypeI32
	i64 = api.ValueTypeI64
)

// Builder compiles a host module.
type Builder interface {
	Compile(context.Context) (wazero.CompiledModule, error)
}

// Modules are the host modules a guest may import, by import name, built
// for rt: botrun (SPEC.md section 4), wasi_snapshot_preview1, and env
// (AssemblyScript's abort).
func Modules(rt wazero.Runtime) map[string]Builder {
	return map[string]Builder{
		abi.HostModule: hostModule(rt),
		abi.WASIModule: wasi_snapshot_preview1.NewBuilder(rt),
		abi.EnvModule:  envModule(rt),
	}
}

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
	fn(abi.FuncFetch, []api.ValueType{i32, i32}, []api.ValueType{i32}, fetch)
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
	n, ok := write(mod, api.DecodeU32(stack[0]), api.DecodeU32(stack[1]), c.Payload)
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

func (c *Call) setResult(b []byte) uint64 {
	c.result, c.hasResult = b, true
	return uint64(len(b))
}

// fail records a host failure: the guest sees HOST_ERROR and the event's
// attempt fails once the call returns.
func (c *Call) fail(err error) uint64 {
	// The first failure is always logged (it fails the event); a guest that
	// keeps calling gets the rest logged within its output budget.
	if c.hostErr == nil {
		c.hostErr = err
		c.Log().Error("host function failed", "err", err)
	} else if c.Output == nil || c.Output.budget.line(0) {
		c.Log().Error("host function failed", "err", err)
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
				res, err = c.Env.Enqueue(ctx, req)
			case abi.FuncPost:
				res, err = c.Env.Post(ctx, req)
			default:
				res, err = c.Env.Send(ctx, req)
			}
		})
		stack[0] = c.answer(res, err, "send refused", "func", name)
	}
}

// answer is the code a journaling host function returns for its result res
// or error err: TOO_LARGE for a refused size (warned as refused, with
// attrs), the event's failure for another error, else 0 with res as the
// pending JSON result.
func (c *Call) answer(res any, err error, refused string, attrs ...any) uint64 {
	switch {
	case errors.Is(err, ErrTooLarge):
		c.warn(refused, append(attrs, "err", err)...)
		return code(abi.CodeTooLarge)
	case err != nil:
		return c.fail(err)
	}
	out, err := json.Marshal(res)
	if err != nil {
		return c.fail(err)
	}
	return c.setResult(out)
}

// payloadArg reads the (ptr, len) JSON argument of a host function called
// within an event. ok is false when the call is answered already (stack[0]
// holds UNSUPPORTED outside an event, TOO_LARGE or BAD_POINTER).
func payloadArg(ctx context.Context, mod api.Module, stack []uint64) (c *Call, b []byte, ok bool) {
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
		if _, ok := c.Env.(Broadcaster); !ok {
			stack[0] = code(abi.CodeUnsupported)
			return
		}
	}
	c, b, ok := payloadArg(ctx, mod, stack)
	if !ok {
		return
	}
	bc := c.Env.(Broadcaster)
	req, err := abi.DecodeBroadcastRequest(b)
	if err != nil {
		c.warn("guest passed a bad payload", "func", abi.FuncBroadcast, "err", err)
		stack[0] = code(abi.CodeBadPayload)
		return
	}
	var res abi.BroadcastResult
	c.wait(func() { res, err = bc.Broadcast(ctx, req) })
	stack[0] = c.answer(res, err, "broadcast refused")
}

// channelOp is edit or typing (name): a channel call that is not journaled
// and never fails the event. It answers 0, or CHANNEL_FAILED with the
// channel's error as the pending result.
func channelOp(name string) api.GoModuleFunc {
	return func(ctx context.Context, mod api.Module, stack []uint64) {
		if c := eventOf(ctx); c != nil {
			if _, ok := c.Env.(Editor); !ok {
				stack[0] = code(abi.CodeUnsupported)
				return
			}
		}
		c, b, ok := payloadArg(ctx, mod, stack)
		if !ok {
			return
		}
		ed := c.Env.(Editor)
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

// fetch calls a configured API through the Env (a Fetcher). It answers
// the FetchResponse's length; NOT_FOUND for an API the config does not
// name; TOO_LARGE past bot.max_fetches; FETCH_FAILED with a FetchError
// pending when the call got no response; HOST_ERROR when its answer could
// not be journaled. The guest waits without its deadline running and
// without holding a compute slot.
var fetch = api.GoModuleFunc(func(ctx context.Context, mod api.Module, stack []uint64) {
	if c := eventOf(ctx); c != nil {
		if _, ok := c.Env.(Fetcher); !ok {
			stack[0] = code(abi.CodeUnsupported)
			return
		}
	}
	c, b, ok := payloadArg(ctx, mod, stack)
	if !ok {
		return
	}
	req, err := abi.DecodeFetchRequest(b)
	var res abi.FetchResponse
	if err == nil {
		c.waitIdle(func() { res, err = c.Env.(Fetcher).Fetch(ctx, req) })
	}
	var failed *abi.FetchError
	switch {
	case errors.Is(err, abi.ErrBadPayload):
		c.warn("guest passed a bad payload", "func", abi.FuncFetch, "err", err)
		stack[0] = code(abi.CodeBadPayload)
	case errors.Is(err, ErrNoAPI):
		c.warn("guest called an API the config does not name", "api", req.API) // at most 64 bytes (abi.DecodeFetchRequest)
		stack[0] = code(abi.CodeNotFound)
	case errors.As(err, &failed):
		c.warn("the API call failed", "api", req.API, "reason", failed.Reason, "err", failed.Message)
		e := *failed
		if len(e.Message) > 160 { // the JSON stays under the 1 KiB SPEC.md promises
			e.Message = strings.ToValidUTF8(e.Message[:160], "")
		}
		out, _ := json.Marshal(e)
		c.setResult(out)
		stack[0] = code(abi.CodeFetchFailed)
	default:
		stack[0] = c.answer(res, err, "fetch refused", "api", req.API)
	}
})

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

func (c *Call) stateErr(err error) uint64 {
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
	v, ok, err = c.Env.StateGet(ctx, key)
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
	if err := c.Env.StateSet(ctx, key, v); err != nil {
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
	if err := c.Env.StateDelete(ctx, key); err != nil {
		stack[0] = c.stateErr(err)
		return
	}
	stack[0] = 0
})

// logFunc logs one guest line (cut at MaxOutputLine) within the event's
// output budget; past it the line is counted, not copied. The last line at
// error level is kept for the HandlerError whatever the budget says.
var logFunc = api.GoModuleFunc(func(ctx context.Context, mod api.Module, stack []uint64) {
	c := callOf(ctx)
	if c == nil {
		return
	}
	level := int32(api.DecodeI32(stack[0]))
	ptr, n := api.DecodeU32(stack[1]), int(api.DecodeU32(stack[2]))
	line := min(n, MaxOutputLine)
	c.Output.budget.drop(n - line)
	admitted := c.Output.budget.take(line)
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
	if (admitted > 0 || line == 0) && c.Output.budget.line(admitted) {
		c.Log().Log(ctx, l, msg[:admitted], slog.String("source", "guest"))
	}
})

var nowMs = api.GoModuleFunc(func(ctx context.Context, mod api.Module, stack []uint64) {
	c := callOf(ctx)
	if c == nil {
		stack[0] = 0
		return
	}
	stack[0] = uint64(c.ReceivedAt)
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
	c.wait(func() { b, err = c.Env.LoadMedia(ctx, int(index)) })
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
	if c == nil || c.Hook != abi.ExportBeforeSend {
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
