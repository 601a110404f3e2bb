// Package send is the sender: it journals each send of a turn, an
// operator or a broadcast in the outbox under its idempotency key before
// the channel is called, splits it into parts at the channel's text limit,
// delivers it inline (a handler's send) or as a worker job (a send the
// sweeper claimed), and settles retries, ambiguity and dead letters; it
// runs the module's send hooks on operators' sends and botrun_after_send
// once a send is delivered. The inline path and the sweeper share every
// rule here.
//
// send imports abi, durability, host/channel, host/wasm and
// host/internal/{clock,dispatch,lease,observe,rules,sweep}; it never imports host.
// What it tells the host (alerts, counters) goes through the values its
// Config hands it.
package send

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/channel/httpkit"
	"github.com/botrun/botrun/host/internal/clock"
	"github.com/botrun/botrun/host/internal/dispatch"
	"github.com/botrun/botrun/host/internal/lease"
	"github.com/botrun/botrun/host/internal/observe"
	"github.com/botrun/botrun/host/internal/rules"
	"github.com/botrun/botrun/host/internal/sweep"
)

// Policy is the outbox configuration ([durability.outbox]) the sender
// follows.
type Policy struct {
	// Poll is durability.poll.
	Poll time.Duration
	// Retries is outbox.retries; Backoff the wait after each failed try.
	Retries int
	Backoff rules.Backoff
	// InlineMax is outbox.inline_max.
	InlineMax time.Duration
	// Resend is on_ambiguous = resend; DivergedSend on_diverged = send.
	Resend, DivergedSend bool
	// MaxPayload is outbox.max_payload_bytes.
	MaxPayload int
	// Lease is outbox.lease.
	Lease time.Duration
}

// InlineCall bounds a channel call made inline outside the outbox (an
// edit, a typing indicator) by outbox.inline_max; with inline_max = 0 (no
// inline retry) by ctx's own deadline only, so the call is still made.
func (p Policy) InlineCall(ctx context.Context) (context.Context, context.CancelFunc) {
	if p.InlineMax <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, p.InlineMax)
}

// NotLeaderWait is how long a send a standby handed back waits before it is
// due again: long enough that the leader's sweeper, which polls as often,
// usually claims it first, short enough that the leader delivers it
// promptly; a random part keeps replicas from claiming in step.
func (p Policy) NotLeaderWait() time.Duration {
	base := max(2*p.Poll, 200*time.Millisecond)
	return base + rand.N(max(p.Poll, time.Millisecond))
}

// Alerts tell the operator of a send gone wrong.
type Alerts interface {
	// Dead tells of a send gone to the dead-letter queue, and why.
	Dead(rec durability.OutboxRecord, why string)
	// Ambiguous tells of a send a crash left in flight that its channel
	// could not settle (on_ambiguous decides).
	Ambiguous(rec durability.OutboxRecord)
}

// Leaders refuse the sends of a channel whose session another replica
// leads (lease.ErrNotLeader): this replica never calls its transport.
type Leaders interface {
	Refuse(channelID string) error
}

// Config is what a Sender sends through and tells.
type Config struct {
	Outbox   durability.OutboxJournal
	Channels map[string]channel.Channel
	Policy   Policy
	// Counters are the bot's counters (the outbox's, stale leases,
	// diverged replays, not-leader refusals) the sender moves.
	Counters *observe.Counters
	// Tracer traces each delivery (nil: tracing off).
	Tracer trace.Tracer
	// SendTime observes each channel send's latency, by channel.
	SendTime map[string]prometheus.Observer
	Log      *slog.Logger
	Leases   *lease.Leases
	Alerts   Alerts
	// Wake asks the sweeper for a sweep now; Sweeper counts the claimed
	// sends delivered.
	Wake    sweep.Wake
	Sweeper *sweep.Sweeper
	// Hooks run the module's send hooks (nil: a guest without them);
	// HookTimeout is bot.handler_timeout, the budget of an event's
	// botrun_after_send hooks.
	Hooks       Hooks
	HookTimeout time.Duration
	// Queued hands over a send this process's sweeper claimed that waits
	// in its chat's queue (the dispatcher), for the turn that meets it to
	// deliver it first: a replay after a restart meets its own sends so
	// (the restart's sweep settled them ambiguous and claimed them again).
	Queued interface {
		TakeSend(chatKey, key string) (dispatch.Job, bool)
	}
	// Draining is closed when the bot begins to stop: a send retried inline
	// stops waiting for its next try and is left to the sweeper (after the
	// restart), so a retry does not hold the stop up.
	Draining <-chan struct{}
	// SettleInFlight, with coordination on, makes a turn that meets its
	// send in flight elsewhere (another replica's) settle it before going
	// on: the chat's next turn must not overtake it. Off, the turn answers
	// such a send deferred.
	SettleInFlight bool
	// Boot is when this process started.
	Boot    time.Time
	Leaders Leaders
	// Guard recovers a channel's panics (channel.Env.Guard).
	Guard func(channelID string) channel.Env
	Clock clock.Clock
}

// Sender is the send path (see the package doc).
type Sender struct {
	outbox    durability.OutboxJournal
	providers map[string]channel.Channel
	policy    Policy
	metrics   *observe.Counters
	tracer    trace.Tracer
	sendTime  map[string]prometheus.Observer
	log       *slog.Logger
	leases    *lease.Leases
	alerts    Alerts
	wake      sweep.Wake
	hooks     Hooks
	// afterBudgets hold the budget the after_send hooks of each recent
	// event share, and the budgets of operators' sends (operatorBudgetKey).
	afterBudgets *eventBudgets
	// settleInFlight makes a turn that meets its send in flight elsewhere
	// settle it before going on (coordination: the chat's next turn must
	// not overtake it).
	settleInFlight bool
	draining       <-chan struct{}
	queued         interface {
		TakeSend(chatKey, key string) (dispatch.Job, bool)
	}
	sweeper *sweep.Sweeper
	// boot is when this process started (Unix milliseconds).
	boot    int64
	leaders Leaders
	channel func(id string) channel.Env
	clock   clock.Clock
}

// New returns the sender c describes.
func New(c Config) *Sender {
	return &Sender{outbox: c.Outbox, providers: c.Channels, policy: c.Policy, metrics: c.Counters,
		tracer: c.Tracer, sendTime: c.SendTime, log: c.Log, leases: c.Leases, alerts: c.Alerts,
		wake: c.Wake, hooks: c.Hooks, afterBudgets: newEventBudgets(c.HookTimeout),
		settleInFlight: c.SettleInFlight, draining: c.Draining, queued: c.Queued, sweeper: c.Sweeper, boot: c.Boot.UnixMilli(),
		leaders: c.Leaders, channel: c.Guard, clock: clock.Or(c.Clock)}
}

// Hooks are the module's send hooks (nil: a guest without them).
func (o *Sender) Hooks() Hooks { return o.hooks }

// Policy is the outbox configuration the sender follows.
func (o *Sender) Policy() Policy { return o.policy }

// Now is the sender's time (Unix ms), as the journal keeps it.
func (o *Sender) Now() int64 { return o.clock.Now().UnixMilli() }

// span starts the span of a delivery; off, it returns ctx and a no-op span
// without allocating.
func (o *Sender) span(ctx context.Context) (context.Context, trace.Span) {
	if o.tracer == nil {
		return ctx, trace.SpanFromContext(ctx)
	}
	return o.tracer.Start(ctx, "botrun.send")
}

// idAttr names the record a span is about.
func idAttr(span trace.Span, id, channelID string) {
	if span.IsRecording() {
		span.SetAttributes(attribute.String("botrun.id", id), attribute.String("botrun.provider", channelID))
	}
}

// Spec is one send as the handler (or the operator) asked for it.
type Spec struct {
	Provider string
	Chat     string
	Msg      rules.OutboxMessage
	Key      string
	// Derived is true for keys of rule 2 (<inbound id>:<n>): only those are
	// compared by fingerprint.
	Derived bool
	Inbound string
	// At holds an enqueued send until this time (Unix ms; 0: now).
	At int64
	// Prehook holds the fingerprints of the parts of the send as the
	// handler asked for it, before botrun_before_send rewrote it (nil when
	// it did not): the journal keeps those, so a replay compares what the
	// handler asked for, as the seed does, whatever the hook made of it.
	Prehook []string
	// Keys, when set, collects the key of each part journaled.
	Keys *[]string
}

// PartKeys are the keys the parts of s are journaled under.
func (o *Sender) PartKeys(s Spec) []string {
	var keys []string
	for _, p := range o.parts(s) {
		keys = append(keys, p.key)
	}
	return keys
}

// Fingerprints are the fingerprints of the parts of s, as a hook's rewrite
// keeps them (Spec.Prehook).
func (o *Sender) Fingerprints(s Spec) []string {
	var fps []string
	for _, p := range o.parts(s) {
		fps = append(fps, rules.Fingerprint(s.Chat, p.payload))
	}
	return fps
}

// AfterSize is the size of the after_send record of s, in parts.
func AfterSize(s Spec, parts []string) int64 {
	put, _ := AfterPut(s, parts)
	return int64(len(put.Payload))
}

// part is one journal record of a send: the whole send, or one piece of a text
// over the channel's limit.
type part struct {
	key, prev string
	// n numbers the part from 1.
	n       int
	msg     rules.OutboxMessage
	payload []byte
}

// collect notes a journaled part's key (see Spec.keys).
func (s Spec) collect(key string) {
	if s.Keys != nil {
		*s.Keys = append(*s.Keys, key)
	}
}

// textLimits are the channel's limits on the text of a message with the
// choices buttons and list, in characters and in bytes of UTF-8 (0: none).
func (o *Sender) textLimits(providerID string, buttons []abi.Button, list *abi.List) (chars, bytes int) {
	if l, ok := o.providers[providerID].(channel.Limiter); ok {
		return l.TextLimits(channel.Outbound{Buttons: buttons, List: list})
	}
	return 0, 0
}

// parts splits a send by the provider's text limit into records key, key#2, …
// each linked to the one before.
func (o *Sender) parts(s Spec) []part {
	chars, bytes := o.textLimits(s.Provider, s.Msg.Buttons, s.Msg.List)
	texts := httpkit.Split(s.Msg.Text, chars, bytes)
	ps := make([]part, len(texts))
	for i, text := range texts {
		m := rules.OutboxMessage{Text: text}
		if i == 0 {
			m.Media = s.Msg.Media
		}
		if i == len(texts)-1 {
			// The choices go under the last part, which the user reads last.
			m.Buttons, m.List = s.Msg.Buttons, s.Msg.List
		}
		ps[i].msg, ps[i].n = m, i+1
		ps[i].payload, _ = json.Marshal(m)
		ps[i].key = s.Key
		if i > 0 {
			ps[i].key = fmt.Sprintf("%s#%d", s.Key, i+1)
			ps[i].prev = ps[i-1].key
		}
	}
	return ps
}

func (o *Sender) outboxLease() durability.Lease { return o.leases.Lease(o.policy.Lease) }

// SendNow journals the send and delivers it inline, retrying until
// outbox.inline_max; past that it answers deferred and the sweeper goes on.
// An error means the journal failed (the caller's attempt fails). With hold,
// the last delivered part's MarkSent is not written but returned, for the
// caller to land with the inbound completion (Land, or the completion's
// SentMark).
func (o *Sender) SendNow(ctx context.Context, s Spec, hold bool) (abi.SendResult, *PendingMark, error) {
	prov, ok := o.providers[s.Provider]
	if !ok {
		return abi.SendResult{Status: abi.SendDead, Key: s.Key, Error: fmt.Sprintf("provider %q is not configured", s.Provider)}, nil, nil
	}
	whole, _ := json.Marshal(s.Msg)
	if len(whole) > o.policy.MaxPayload {
		return o.bypass(ctx, prov, s, len(whole)), nil, nil
	}
	if refused := o.leaders.Refuse(s.Provider); refused != nil {
		// Journaled for the leader's sweeper; this replica never calls
		// the channel.
		res, err := o.Enqueue(ctx, s)
		if err == nil && res.Status == abi.SendDeferred {
			o.metrics.OutboxDeferred.Add(1)
			o.metrics.ProviderNotLeader.Add(1)
			res.Error = refused.Error()
		}
		return res, nil, err
	}
	var res abi.SendResult
	var held *PendingMark
	blocked := false
	for i, p := range o.parts(s) {
		var r abi.SendResult
		var err error
		if blocked {
			// An earlier part is not sent yet: journal this one behind it.
			r, err = o.journal(ctx, s, p)
		} else {
			o.Land(ctx, held)
			held = nil
			r, held, err = o.sendPart(ctx, prov, s, p, hold)
		}
		if err != nil {
			o.Land(ctx, held)
			return abi.SendResult{}, nil, err
		}
		s.collect(r.Key)
		delivered := r.Status == abi.SendSent || r.Status == abi.SendDeduped
		switch {
		case i == 0:
			res = r
		case !blocked && !delivered:
			// The send as a whole is as far as its first undelivered part.
			res.Status, res.Error = r.Status, r.Error
		}
		blocked = blocked || !delivered
	}
	return res, held, nil
}

// bypass sends a payload over max_payload_bytes without the outbox.
func (o *Sender) bypass(ctx context.Context, prov channel.Channel, s Spec, size int) abi.SendResult {
	if refused := o.leaders.Refuse(s.Provider); refused != nil {
		// Nothing journals it for the leader: it cannot go from here.
		o.metrics.ProviderNotLeader.Add(1)
		return abi.SendResult{Status: abi.SendDead, Key: s.Key, Error: fmt.Sprintf("payload over durability.outbox.max_payload_bytes (%d bytes), which is sent without the outbox: %v", size, refused)}
	}
	o.metrics.OutboxBypassed.Add(1)
	o.log.WarnContext(ctx, "payload over durability.outbox.max_payload_bytes: sent without the outbox (no dedupe, no retry)", "key", s.Key, "bytes", size, "limit", o.policy.MaxPayload)
	// Split at the channel's text limit as a journaled send is: the parts
	// go in order, and the first one the channel refuses ends the send.
	res := abi.SendResult{Status: abi.SendBypassed, Key: s.Key}
	for _, p := range o.parts(s) {
		start := o.clock.Now()
		ref, err := o.send(ctx, prov, toOutbound(s.Chat, p.msg, p.key))
		o.observeSend(s.Provider, start)
		if err != nil {
			return abi.SendResult{Status: abi.SendDead, Key: s.Key, Ref: res.Ref, Error: fmt.Sprintf("part %d (%s): %v", p.n, p.key, err)}
		}
		if p.n == 1 {
			res.Ref = ref
		}
	}
	return res
}

// claimedHere reports whether rec is in flight under a claim of this
// process (not of this instance's earlier boot).
func (o *Sender) claimedHere(rec durability.OutboxRecord) bool {
	return rec.Owner == o.leases.Owner && rec.LeasedAt >= o.boot
}

// settleElsewhere waits for a send another owner has in flight to settle:
// a live owner's until its lease ends; one whose lease expired (it died or
// froze mid-send) is claimed ambiguous here and settled as a sweep would
// (the channel closes the window, or on_ambiguous decides). A send this
// process's sweeper claimed waits behind this turn in the chat's queue: it
// is delivered now. It returns the record as it stands then.
func (o *Sender) settleElsewhere(ctx context.Context, rec durability.OutboxRecord) (durability.OutboxRecord, error) {
	claimer, ok := o.outbox.(durability.ExpiredClaimer)
	wait := 5 * time.Millisecond
	// A sweep queues what it claimed at once: a claim of this process's
	// not queued within queuedBy is not a sweep's.
	queuedBy := time.Now().Add(2 * time.Second)
	for rec.State == durability.OutboxSending && ok {
		switch {
		case rec.Owner == o.leases.Owner && rec.LeasedAt < o.boot:
			// This instance's earlier boot: the sweeper's reclaim takes it.
			return rec, nil
		case rec.Owner == o.leases.Owner:
			// This process's sweeper claimed it: deliver it now, ahead of
			// the turn that waits for it in the queue (or, if the sweeper
			// has not queued it yet, wait for that).
			if o.queued == nil || time.Now().After(queuedBy) {
				return rec, nil // not the sweeper's (this turn's own key, sent twice)
			}
			if !o.runQueued(rec.Provider, rec.Chat, rec.Key) {
				// Real time: the sweep queues it within moments, on any
				// clock (a test's stands still).
				if !pause(ctx, wait) {
					return rec, ctx.Err()
				}
				wait = min(2*wait, 100*time.Millisecond)
			}
		case rec.LeaseUntil <= o.Now():
			c, err := claimer.ClaimExpired(ctx, rec.Key, o.outboxLease())
			if err == nil {
				o.deliverClaimed(ctx, c)
			} else if !errors.Is(err, durability.ErrNotClaimable) {
				return rec, err
			}
		default:
			if !o.sleep(ctx, wait) {
				return rec, ctx.Err()
			}
			wait = min(2*wait, 100*time.Millisecond)
		}
		r, err := o.outbox.Get(ctx, rec.Key)
		if err != nil {
			return rec, err
		}
		rec = r
	}
	return rec, nil
}

// runQueued delivers the send key now if this process's sweeper claimed it
// and it waits in its chat's queue; false when it is not there.
func (o *Sender) runQueued(channelID, chat, key string) bool {
	j, ok := o.queued.TakeSend(dispatch.ChatKey(channelID, chat), key)
	if ok {
		o.DeliverQueued(*j.Send)
	}
	return ok
}

// DeliverQueued delivers a send the sweeper claimed and queued (a worker
// runs it, in its chat's order), and counts it delivered for the sweeper.
func (o *Sender) DeliverQueued(c durability.ClaimedSend) {
	o.deliverClaimed(o.leases.Base, c)
	o.sweeper.SendDelivered()
}

// pause waits d of real time; false when ctx ended first.
func pause(ctx context.Context, d time.Duration) bool { return wait(ctx, clock.Real, nil, d) }

// sleep waits d by the sender's clock; false when ctx ended, or the bot
// began to stop, first.
func (o *Sender) sleep(ctx context.Context, d time.Duration) bool {
	return wait(ctx, o.clock, o.draining, d)
}

// wait waits d on c; false when ctx ended, or stop closed, first.
func wait(ctx context.Context, c clock.Clock, stop <-chan struct{}, d time.Duration) bool {
	t := c.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-stop:
		return false
	case <-t.C():
		return true
	}
}

// existing answers a send whose key is already journaled. It returns ok=false
// when the record still needs delivering (pending or failed).
func (o *Sender) existing(rec durability.OutboxRecord) (abi.SendResult, bool) {
	switch rec.State {
	case durability.OutboxSent:
		o.metrics.OutboxDeduped.Add(1)
		return abi.SendResult{Status: abi.SendDeduped, Key: rec.Key, Ref: rec.Ref}, true
	case durability.OutboxUnknown:
		o.metrics.OutboxDeduped.Add(1)
		return abi.SendResult{Status: abi.SendDeduped, Key: rec.Key, Error: "outcome unknown after a crash (on_ambiguous = skip)"}, true
	case durability.OutboxDead:
		return abi.SendResult{Status: abi.SendDead, Key: rec.Key, Error: rec.Error}, true
	case durability.OutboxSending:
		return abi.SendResult{Status: abi.SendDeferred, Key: rec.Key, Error: "in flight elsewhere"}, true
	}
	return abi.SendResult{}, false
}

// diverged checks a derived key's fingerprint. It returns the key to use: the
// same key (answer from the journal), or with on_diverged = send a new key
// derived from the new content.
func (o *Sender) diverged(s Spec, p part, rec durability.OutboxRecord, fp string) (string, bool) {
	if !s.Derived || rec.Fingerprint == "" || rec.Fingerprint == fp {
		return p.key, false
	}
	o.metrics.Diverged.Add(1)
	o.log.Warn("replay produced other content under a derived key", "key", p.key, "on_diverged", map[bool]string{true: "send", false: "skip"}[o.policy.DivergedSend])
	if !o.policy.DivergedSend {
		return p.key, false
	}
	return p.key + "~" + fp[:12], true
}

func (o *Sender) put(s Spec, p part, key, prev string) durability.OutboxPut {
	fp := rules.Fingerprint(s.Chat, p.payload)
	if n := len(s.Prehook); n > 0 {
		// A rewrite may make more parts than the handler's send had.
		fp = s.Prehook[min(p.n, n)-1]
		if p.n > n {
			fp = rules.Fingerprint(fp, []byte(strconv.Itoa(p.n)))
		}
	}
	return durability.OutboxPut{Key: key, Provider: s.Provider, Chat: s.Chat, Payload: p.payload,
		Fingerprint: fp, PreviousPart: prev, Inbound: s.Inbound, NotBefore: s.At}
}

// sendPart journals one part and delivers it inline (see SendNow for hold).
func (o *Sender) sendPart(ctx context.Context, prov channel.Channel, s Spec, p part, hold bool) (abi.SendResult, *PendingMark, error) {
	put := o.put(s, p, p.key, p.prev)
	l := o.outboxLease()
	st, rec, err := o.outbox.Put(ctx, put, l.Now, &l)
	if err != nil {
		return abi.SendResult{}, nil, fmt.Errorf("outbox journal: %w", err)
	}
	if st == durability.Exists {
		if key, renamed := o.diverged(s, p, rec, put.Fingerprint); renamed {
			s.Derived = false
			p.key = key
			return o.sendPart(ctx, prov, s, p, hold)
		}
		for tries := 1; ; tries++ {
			if rec.State == durability.OutboxSending && (o.settleInFlight || o.claimedHere(rec)) {
				if rec, err = o.settleElsewhere(ctx, rec); err != nil {
					return abi.SendResult{}, nil, fmt.Errorf("outbox journal: %w", err)
				}
			}
			if res, done := o.existing(rec); done {
				return res, nil, nil
			}
			if rec.Shown(o.Now()) == durability.OutboxScheduled {
				// Held until its time: the sweeper sends it then, not this send.
				return abi.SendResult{Status: abi.SendScheduled, Key: rec.Key}, nil, nil
			}
			began, err := o.outbox.Begin(ctx, rec.Key, o.outboxLease())
			if errors.Is(err, durability.ErrNotClaimable) && o.settleInFlight && tries < 5 {
				// A sweep claimed it just now (settling it woke one):
				// settle that claim in turn.
				if rec, err = o.outbox.Get(ctx, rec.Key); err != nil {
					return abi.SendResult{}, nil, fmt.Errorf("outbox journal: %w", err)
				}
				continue
			}
			if errors.Is(err, durability.ErrNotClaimable) {
				return abi.SendResult{Status: abi.SendDeferred, Key: p.key}, nil, nil
			}
			if err != nil {
				return abi.SendResult{}, nil, fmt.Errorf("outbox journal: %w", err)
			}
			rec = began
			break
		}
	} else {
		o.metrics.OutboxJournaled.Add(1)
	}
	return o.deliverInline(ctx, prov, rec, hold)
}

// journal records a part for the sweeper without sending it.
func (o *Sender) journal(ctx context.Context, s Spec, p part) (abi.SendResult, error) {
	put := o.put(s, p, p.key, p.prev)
	st, rec, err := o.outbox.Put(ctx, put, o.Now(), nil)
	if err != nil {
		return abi.SendResult{}, fmt.Errorf("outbox journal: %w", err)
	}
	if st == durability.Exists {
		if key, renamed := o.diverged(s, p, rec, put.Fingerprint); renamed {
			s.Derived = false
			p.key = key
			return o.journal(ctx, s, p)
		}
		if res, done := o.existing(rec); done {
			return res, nil
		}
		if rec.Shown(o.Now()) == durability.OutboxScheduled {
			return abi.SendResult{Status: abi.SendScheduled, Key: rec.Key}, nil
		}
		return abi.SendResult{Status: abi.SendDeferred, Key: rec.Key}, nil
	}
	o.metrics.OutboxJournaled.Add(1)
	if rec.RetryAt > rec.CreatedAt {
		return abi.SendResult{Status: abi.SendScheduled, Key: rec.Key}, nil
	}
	if o.leaders.Refuse(s.Provider) == nil {
		// (A standby leaves it to the leader's next sweep.)
		o.wake.Notify()
	}
	return abi.SendResult{Status: abi.SendDeferred, Key: rec.Key}, nil
}

// Enqueue journals every part of s and returns at once; the sweeper claims
// them and the workers deliver them.
func (o *Sender) Enqueue(ctx context.Context, s Spec) (abi.SendResult, error) {
	var first abi.SendResult
	for i, p := range o.parts(s) {
		res, err := o.journal(ctx, s, p)
		if err != nil {
			return abi.SendResult{}, err
		}
		s.collect(res.Key)
		if i == 0 {
			first = res
		}
	}
	return first, nil
}

// deliverInline calls the provider for a begun record and retries inline with
// backoff until outbox.inline_max, then leaves it failed for the sweeper.
func (o *Sender) deliverInline(ctx context.Context, prov channel.Channel, rec durability.OutboxRecord, hold bool) (abi.SendResult, *PendingMark, error) {
	_, span := o.span(ctx)
	defer span.End()
	idAttr(span, rec.Key, rec.Provider)
	inlineUntil := o.clock.Now().Add(o.policy.InlineMax)
	deferred := func(sendErr error) (abi.SendResult, *PendingMark, error) {
		o.metrics.OutboxDeferred.Add(1)
		return abi.SendResult{Status: abi.SendDeferred, Key: rec.Key, Error: sendErr.Error()}, nil, nil
	}
	for {
		ref, hb, marked, sendErr := o.call(prov, rec)
		if sendErr == nil {
			if marked {
				hb.Release()
				return abi.SendResult{Status: abi.SendSent, Key: rec.Key, Ref: ref}, nil, nil
			}
			m := &PendingMark{rec: rec, ref: ref, at: o.Now(), hb: hb}
			if !hold {
				o.Land(ctx, m)
				m = nil
			}
			return abi.SendResult{Status: abi.SendSent, Key: rec.Key, Ref: ref}, m, nil
		}
		hb.Release()
		wait, dead, inline := o.settleFailure(ctx, rec, sendErr, inlineUntil)
		if dead {
			return abi.SendResult{Status: abi.SendDead, Key: rec.Key, Error: sendErr.Error()}, nil, nil
		}
		if !inline {
			return deferred(sendErr)
		}
		if !o.sleep(ctx, wait) {
			return deferred(sendErr)
		}
		next, err := o.outbox.Begin(ctx, rec.Key, o.outboxLease())
		if errors.Is(err, durability.ErrNotClaimable) {
			return deferred(sendErr) // another replica took it: it delivers from here
		}
		if err != nil {
			return abi.SendResult{}, nil, fmt.Errorf("outbox journal: %w", err)
		}
		rec = next
	}
}

func toOutbound(chat string, m rules.OutboxMessage, key string) channel.Outbound {
	out := channel.Outbound{Chat: chat, Text: m.Text, Key: key, Buttons: m.Buttons, List: m.List}
	if m.Media != nil {
		out.Media = &channel.Media{Type: m.Media.Type, Ref: m.Media.Ref, URL: m.Media.URL, MIME: m.Media.MIME, Caption: m.Media.Caption}
	}
	return out
}

// call makes one delivery attempt of a sending record, extending its lease
// from now until the caller releases the returned heartbeat. The channel gets
// the record's key (Outbound.Key). A transactional channel's delivery commits
// with the record marked sent: marked is then true, and the caller writes no
// MarkSent.
func (o *Sender) call(prov channel.Channel, rec durability.OutboxRecord) (ref string, hb *lease.Heartbeat, marked bool, err error) {
	hb = o.leases.Heartbeat(o.policy.Lease, rec.LeaseUntil, func(ctx context.Context, until int64) error {
		return o.outbox.Extend(ctx, rec.Key, rec.Token, until)
	})
	if err := o.leaders.Refuse(rec.Provider); err != nil {
		return "", hb, false, err
	}
	var m rules.OutboxMessage
	if err := json.Unmarshal(rec.Payload, &m); err != nil {
		return "", hb, false, &channel.PermanentError{Err: fmt.Errorf("journaled content is unreadable: %w", err)}
	}
	if rec.Attempts > 1 {
		o.metrics.OutboxRetried.Add(1)
	}
	msg := toOutbound(rec.Chat, m, rec.Key)
	if tp, ok := prov.(channel.Transactional); ok {
		if sw, ok := o.outbox.(durability.SentWriter); ok {
			// The heartbeat's extensions would conflict with the commit
			// that marks the record; the lease was taken just now.
			hb.Stop()
			ch := o.channel(prov.ID())
			ref, err := sw.MarkSentWith(hb.Context(), rec.Key, rec.Token, o.Now(), func(ctx context.Context, retry bool) (ref string, writes []durability.Write, err error) {
				// A panic is an error worth a retry, as in Send.
				err = ch.Guard("preparing a send", func() (err error) {
					ref, writes, err = tp.PrepareSend(ctx, msg, retry)
					return err
				})
				return ref, writes, err
			})
			if err == nil {
				// Committed: a panic here is logged and counted, the send
				// stays sent.
				ch.Guard("noting a delivered send", func() error { tp.Delivered(msg, ref); return nil })
				return ref, hb, true, nil
			}
			if !errors.Is(err, channel.ErrNotTransactional) {
				return "", hb, false, err
			}
		}
	}
	start := o.clock.Now()
	ref, err = o.send(hb.Context(), prov, msg)
	o.observeSend(rec.Provider, start)
	return ref, hb, false, err
}

// send calls prov's Send, a panic in it an error worth a retry (as a
// connection lost before the answer is: delivered or not, unknown), logged
// and counted; the send goes dead when its attempts run out.
func (o *Sender) send(ctx context.Context, prov channel.Channel, msg channel.Outbound) (ref string, err error) {
	err = o.channel(prov.ID()).Guard("sending", func() (err error) {
		ref, err = prov.Send(ctx, msg)
		return err
	})
	return ref, err
}

// observeSend records a send to providerID that started at start.
func (o *Sender) observeSend(providerID string, start time.Time) {
	if h := o.sendTime[providerID]; h != nil {
		h.Observe(o.clock.Now().Sub(start).Seconds())
	}
}

// PendingMark is a delivered send's MarkSent held back to land with the
// inbound completion; its heartbeat keeps the send's lease until then.
type PendingMark struct {
	rec durability.OutboxRecord
	ref string
	at  int64
	hb  *lease.Heartbeat
}

// Land writes a held MarkSent on its own (m may be nil).
func (o *Sender) Land(ctx context.Context, m *PendingMark) {
	if m != nil {
		m.hb.Stop()
		o.markSentAt(ctx, m.rec, m.ref, m.at)
		m.hb.Release()
	}
}

func (o *Sender) markSent(ctx context.Context, rec durability.OutboxRecord, ref string) {
	o.markSentAt(ctx, rec, ref, o.Now())
}

func (o *Sender) markSentAt(ctx context.Context, rec durability.OutboxRecord, ref string, at int64) {
	err := o.outbox.MarkSent(ctx, rec.Key, rec.Token, ref, at)
	switch {
	case errors.Is(err, durability.ErrStaleLease):
		o.metrics.StaleLeases.Add(1)
		o.log.WarnContext(ctx, "sent, but the lease was lost to another owner", "key", rec.Key)
	case err != nil:
		o.log.ErrorContext(ctx, "sent, but recording it failed: the send is ambiguous until its lease expires", "key", rec.Key, "err", err)
	}
}

// settleFailure records a failed provider call: dead when the error is
// permanent or the retries are spent, else failed with a retry time. When the
// retry fits before inlineUntil the caller retries inline (inline is true), and
// the journaled retry time is pushed past it by a margin so this process's
// sweeper does not take the send over and reorder the chat; the margin only
// delays the retry if the process dies meanwhile.
func (o *Sender) settleFailure(ctx context.Context, rec durability.OutboxRecord, sendErr error, inlineUntil time.Time) (wait time.Duration, dead, inline bool) {
	if errors.Is(sendErr, lease.ErrNotLeader) {
		o.handBack(ctx, rec, sendErr)
		return 0, false, false
	}
	now := o.clock.Now()
	if httpkit.Permanent(sendErr) || rec.Attempts >= 1+o.policy.Retries {
		err := o.outbox.MarkFailed(ctx, rec.Key, rec.Token, sendErr.Error(), durability.FailOptions{Now: now.UnixMilli(), Dead: true})
		if o.noteFailWrite(rec.Key, err) {
			o.metrics.OutboxDead.Add(1)
			o.alerts.Dead(rec, sendErr.Error())
		}
		return 0, true, false
	}
	wait = max(o.policy.Backoff.Wait(rec.Attempts), httpkit.RetryAfter(sendErr))
	retryAt := now.Add(wait)
	inline = !retryAt.After(inlineUntil)
	if inline {
		retryAt = retryAt.Add(max(2*o.policy.Poll, time.Second))
	}
	err := o.outbox.MarkFailed(ctx, rec.Key, rec.Token, sendErr.Error(), durability.FailOptions{Now: now.UnixMilli(), RetryAt: retryAt.UnixMilli()})
	o.noteFailWrite(rec.Key, err)
	o.log.WarnContext(ctx, "send failed; will retry", "key", rec.Key, "attempt", rec.Attempts, "wait", wait, "inline", inline, "err", sendErr)
	return wait, false, inline
}

// handBack returns a send this replica claimed but may not deliver (the
// channel's session is another replica's: ProviderNotLeader) to the outbox:
// due again shortly, for the leader's sweeper, and not charged as an
// attempt, so it never goes to the dead-letter queue for it.
func (o *Sender) handBack(ctx context.Context, rec durability.OutboxRecord, refused error) {
	o.metrics.ProviderNotLeader.Add(1)
	now := o.clock.Now()
	err := o.outbox.MarkFailed(ctx, rec.Key, rec.Token, refused.Error(),
		durability.FailOptions{Now: now.UnixMilli(), RetryAt: now.Add(o.policy.NotLeaderWait()).UnixMilli(), Refund: true})
	o.noteFailWrite(rec.Key, err)
	o.log.DebugContext(ctx, "send handed back to the session's leader", "key", rec.Key, "err", refused)
}

func (o *Sender) noteFailWrite(key string, err error) bool {
	switch {
	case errors.Is(err, durability.ErrStaleLease):
		o.metrics.StaleLeases.Add(1)
		return false
	case err != nil:
		o.log.Error("recording a failed send failed", "key", key, "err", err)
		return false
	}
	return true
}

// ownRecords deliver the host's own outbox records, by kind, in place of a
// channel. An alert (rules.KindAlert) is not here: the alert sink is a
// channel of its own. A claim a crash left in flight runs its record
// again: at least once.
var ownRecords = map[rules.Kind]func(o *Sender, ctx context.Context, rec durability.OutboxRecord){
	rules.KindAfterSend: (*Sender).runAfterSend,
}

// deliverClaimed delivers one send the sweeper claimed (a worker runs it,
// in its chat's order).
func (o *Sender) deliverClaimed(ctx context.Context, c durability.ClaimedSend) {
	rec := c.Record
	if !o.stillHeld(ctx, &rec) {
		return
	}
	if deliver, own := ownRecords[rules.KindOf(rec.Provider)]; own {
		deliver(o, ctx, rec)
		return
	}
	now := o.clock.Now().UnixMilli()
	prov, configured := o.providers[rec.Provider]
	if c.Ambiguous && configured && o.settleAmbiguous(ctx, prov, rec) {
		return
	}
	if c.Ambiguous {
		o.metrics.OutboxAmbiguous.Add(1)
		o.alerts.Ambiguous(rec)
		to := durability.OutboxUnknown
		if o.policy.Resend {
			to = durability.OutboxPending
		}
		if err := o.outbox.ResolveAmbiguous(ctx, rec.Key, rec.Token, to, now); !o.noteFailWrite(rec.Key, err) {
			return
		}
		if to == durability.OutboxPending {
			o.wake.Notify()
		}
		return
	}
	if refused := o.leaders.Refuse(rec.Provider); refused != nil {
		o.handBack(ctx, rec, refused)
		return
	}
	if rec.PreviousPart != "" {
		prev, err := o.outbox.Get(ctx, rec.PreviousPart)
		switch {
		case errors.Is(err, durability.ErrNotFound), err == nil && (prev.State == durability.OutboxSent || prev.State == durability.OutboxUnknown):
		case err == nil && prev.State == durability.OutboxDead:
			o.settleFailure(ctx, rec, &channel.PermanentError{Err: fmt.Errorf("previous part %s is dead", prev.Key)}, time.Time{})
			return
		default:
			// Waiting behind an earlier part is not an attempt.
			err := o.outbox.MarkFailed(ctx, rec.Key, rec.Token, "waiting for "+rec.PreviousPart,
				durability.FailOptions{Now: now, RetryAt: now + o.policy.Poll.Milliseconds(), Refund: true})
			o.noteFailWrite(rec.Key, err)
			return
		}
	}
	if !configured {
		o.settleFailure(ctx, rec, &channel.PermanentError{Err: fmt.Errorf("provider %q is not configured", rec.Provider)}, time.Time{})
		return
	}
	rec, ok := o.hookOperatorSend(ctx, rec)
	if !ok {
		return
	}
	if rec, ok = o.splitJournaled(ctx, rec); !ok {
		return
	}
	ref, hb, marked, err := o.call(prov, rec)
	hb.Stop()
	defer hb.Release()
	if err != nil {
		o.settleFailure(ctx, rec, err, time.Time{})
		return
	}
	if !marked {
		o.markSent(ctx, rec, ref)
	}
}

// settleAmbiguous settles a send a crash left in flight when its channel
// closes the ambiguous window, before any on_ambiguous policy: a
// transactional channel never delivered it (its delivery commits with the
// mark); a reconciling channel says whether it did; an idempotent channel
// takes it again under the same key. It reports false when the channel
// cannot settle it (the policy applies), and true when the send is settled,
// or left in flight to be asked again after a reconciling error.
func (o *Sender) settleAmbiguous(ctx context.Context, prov channel.Channel, rec durability.OutboxRecord) bool {
	var delivered bool
	switch p := prov.(type) {
	case channel.Transactional:
	case channel.Reconciler:
		if o.leaders.Refuse(rec.Provider) != nil {
			// Only the leader may ask the channel: the send stays in
			// flight until its lease expires and a claim asks again.
			return true
		}
		var m rules.OutboxMessage
		if json.Unmarshal(rec.Payload, &m) != nil {
			return false
		}
		msg := toOutbound(rec.Chat, m, rec.Key)
		err := o.channel(prov.ID()).Guard("reconciling an ambiguous send", func() (err error) {
			delivered, err = p.Reconcile(ctx, msg)
			return err
		})
		if err != nil {
			o.log.WarnContext(ctx, "reconciling an ambiguous send failed; it is asked again when its lease expires", "key", rec.Key, "err", err)
			return true
		}
	case channel.Idempotent:
		if !p.IdempotentSends() {
			return false
		}
	default:
		return false
	}
	now := o.Now()
	if delivered {
		err := o.outbox.MarkSent(ctx, rec.Key, rec.Token, "", now)
		if o.noteFailWrite(rec.Key, err) {
			o.metrics.OutboxAmbiguousResolved.Add(1)
			o.log.InfoContext(ctx, "ambiguous send settled: the channel has it", "key", rec.Key)
		}
		return true
	}
	err := o.outbox.ResolveAmbiguous(ctx, rec.Key, rec.Token, durability.OutboxPending, now)
	if o.noteFailWrite(rec.Key, err) {
		o.metrics.OutboxAmbiguousResolved.Add(1)
		o.log.InfoContext(ctx, "ambiguous send settled: sent again, the channel takes it once", "key", rec.Key)
		o.wake.Notify()
	}
	return true
}

// stillHeld checks, as a claimed send's job starts, that its claim still
// holds: a send waits in its chat's queue under the lease its claim gave it,
// not extended; if a third of the lease is gone the job first extends it, and
// if the journal refuses, the lease expired while queued and another owner
// claimed it (the fencing token decides): this job is skipped.
func (o *Sender) stillHeld(ctx context.Context, rec *durability.OutboxRecord) bool {
	length := o.policy.Lease
	if time.UnixMilli(rec.LeaseUntil).Sub(o.clock.Now()) > 2*length/3 {
		return true
	}
	until := o.clock.Now().Add(length).UnixMilli()
	err := o.outbox.Extend(ctx, rec.Key, rec.Token, until)
	switch {
	case errors.Is(err, durability.ErrStaleLease):
		o.metrics.StaleLeases.Add(1)
		o.log.WarnContext(ctx, "send's lease lost while queued: another owner claimed it; skipping it here", "key", rec.Key)
		return false
	case err != nil:
		o.log.ErrorContext(ctx, "extending a queued send's length failed; it is reclaimed when its length expires", "key", rec.Key, "err", err)
		return false
	}
	rec.LeaseUntil = until
	return true
}

// splitJournaled splits a record whose text is over the channel's limit (it
// was journaled by an older version, or with a larger limit): the parts after
// the first are journaled as key#2, key#3, … before the first is sent under the
// record's own key, so a retry journals and sends nothing twice.
func (o *Sender) splitJournaled(ctx context.Context, rec durability.OutboxRecord) (durability.OutboxRecord, bool) {
	var m rules.OutboxMessage
	if json.Unmarshal(rec.Payload, &m) != nil {
		return rec, true // call reports it
	}
	chars, bytes := o.textLimits(rec.Provider, nil, nil)
	texts := httpkit.Split(m.Text, chars, bytes)
	if len(texts) == 1 {
		return rec, true
	}
	s := Spec{Provider: rec.Provider, Chat: rec.Chat, Msg: m, Key: rec.Key, Inbound: rec.Inbound}
	ps := o.parts(s)
	for _, p := range ps[1:] {
		if _, err := o.journal(ctx, s, p); err != nil {
			o.log.ErrorContext(ctx, "splitting a journaled send failed", "key", rec.Key, "err", err)
			return rec, false
		}
	}
	rec.Payload = ps[0].payload
	return rec, true
}

// Pause stops the held mark's heartbeat, so the write that lands it (with
// the inbound completion) comes after the lease's last extension.
func (m *PendingMark) Pause() { m.hb.Stop() }

// SentMark is the MarkSent the inbound completion lands.
func (m *PendingMark) SentMark() durability.SentMark {
	return durability.SentMark{Key: m.rec.Key, Token: m.rec.Token, Ref: m.ref, Now: m.at}
}

// Landed releases the lease of a mark the completion landed.
func (m *PendingMark) Landed() { m.hb.Release() }
