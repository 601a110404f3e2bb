package host

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/botrun/botrun/host/config"
)

// policy is the durability configuration the send and receive paths use.
type policy struct {
	instanceID    string
	failOpen      bool
	poll          time.Duration
	retention     time.Duration
	inboxLease    time.Duration
	maxAttempts   int
	inboxBackoff  backoff
	retries       int
	outboxBackoff backoff
	inlineMax     time.Duration
	resend        bool // on_ambiguous = resend
	divergedSend  bool // on_diverged = send
	maxPayload    int
	outboxLease   time.Duration
}

func newPolicy(cfg *config.Config) policy {
	d := cfg.Durability
	return policy{
		instanceID:    d.InstanceID,
		failOpen:      d.FailOpen,
		poll:          d.Poll.D(),
		retention:     d.Retention.D(),
		inboxLease:    d.Inbox.Lease.D(),
		maxAttempts:   d.Inbox.MaxAttempts,
		inboxBackoff:  newBackoff(d.Inbox.Backoff),
		retries:       *d.Outbox.Retries,
		outboxBackoff: newBackoff(d.Outbox.Backoff),
		inlineMax:     d.Outbox.InlineMax.D(),
		resend:        d.Outbox.OnAmbiguous == "resend",
		divergedSend:  d.Outbox.OnDiverged == "send",
		maxPayload:    int(*d.Outbox.MaxPayloadBytes),
		outboxLease:   d.Outbox.Lease.D(),
	}
}

// inlineCall bounds a channel call made inline outside the outbox (an
// edit, a typing indicator) by outbox.inline_max; with inline_max = 0 (no
// inline retry) by ctx's own deadline only, so the call is still made.
func (p policy) inlineCall(ctx context.Context) (context.Context, context.CancelFunc) {
	if p.inlineMax <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, p.inlineMax)
}

// backoff is base * 2^(n-1), capped, then moved by up to ±jitter of itself.
type backoff struct {
	base, cap time.Duration
	jitter    float64
}

func newBackoff(b config.Backoff) backoff {
	return backoff{base: b.Base.D(), cap: b.Cap.D(), jitter: *b.Jitter}
}

// wait is the delay after the n-th failed attempt (n >= 1).
func (b backoff) wait(n int) time.Duration {
	d := b.base
	for i := 1; i < n && d < b.cap; i++ {
		d *= 2
	}
	d = min(d, b.cap)
	if b.jitter > 0 {
		d = time.Duration(float64(d) * (1 + b.jitter*(2*rand.Float64()-1)))
	}
	return max(d, 0)
}
