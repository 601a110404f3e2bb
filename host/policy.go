package host

import (
	"time"

	"github.com/botrun/botrun/host/config"
	"github.com/botrun/botrun/host/internal/rules"
	"github.com/botrun/botrun/host/internal/send"
)

// policy is the durability configuration the send and receive paths use.
type policy struct {
	instanceID    string
	failOpen      bool
	poll          time.Duration
	retention     time.Duration
	inboxLease    time.Duration
	maxAttempts   int
	inboxBackoff  rules.Backoff
	retries       int
	outboxBackoff rules.Backoff
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
		inboxBackoff:  rules.NewBackoff(d.Inbox.Backoff),
		retries:       *d.Outbox.Retries,
		outboxBackoff: rules.NewBackoff(d.Outbox.Backoff),
		inlineMax:     d.Outbox.InlineMax.D(),
		resend:        d.Outbox.OnAmbiguous == "resend",
		divergedSend:  d.Outbox.OnDiverged == "send",
		maxPayload:    int(*d.Outbox.MaxPayloadBytes),
		outboxLease:   d.Outbox.Lease.D(),
	}
}

// send is the outbox policy the sender follows.
func (p policy) send() send.Policy {
	return send.Policy{Poll: p.poll, Retries: p.retries, Backoff: p.outboxBackoff, InlineMax: p.inlineMax,
		Resend: p.resend, DivergedSend: p.divergedSend, MaxPayload: p.maxPayload, Lease: p.outboxLease}
}
