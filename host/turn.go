package host

import (
	"context"
	"fmt"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/host/provider"
	"github.com/botrun/botrun/host/wasm"
)

// turn answers the host calls of one event's handler (wasm.Env). It numbers the
// event's sends, so the n-th send without an explicit key gets "<event id>:<n>".
type turn struct {
	bot      *Bot
	provider provider.Provider
	event    abi.Event
	n        int
}

// key picks a send's idempotency key: explicit, else derived from the event.
func (t *turn) key(req abi.SendRequest) string {
	t.n++
	if req.IdempotencyKey != "" {
		return req.IdempotencyKey
	}
	return fmt.Sprintf("%s:%d", t.event.ID, t.n)
}

// Send implements wasm.Env.
func (t *turn) Send(ctx context.Context, req abi.SendRequest) (abi.SendResult, error) {
	return t.bot.send(ctx, t.provider, t.key(req), req), nil
}

// Enqueue implements wasm.Env. Until the outbox journal lands, an enqueued send
// is delivered at once and reported as deferred.
func (t *turn) Enqueue(ctx context.Context, req abi.SendRequest) (abi.SendResult, error) {
	res := t.bot.send(ctx, t.provider, t.key(req), req)
	if res.Status == abi.SendSent {
		res.Status = abi.SendDeferred
	}
	return res, nil
}

// StateGet implements wasm.Env; conversation state is not offered yet.
func (t *turn) StateGet(context.Context, string) ([]byte, bool, error) {
	return nil, false, wasm.ErrUnsupported
}

// StateSet implements wasm.Env; conversation state is not offered yet.
func (t *turn) StateSet(context.Context, string, []byte) error { return wasm.ErrUnsupported }

// StateDelete implements wasm.Env; conversation state is not offered yet.
func (t *turn) StateDelete(context.Context, string) error { return wasm.ErrUnsupported }
