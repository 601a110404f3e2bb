package host

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/channel/httpkit"
	"github.com/botrun/botrun/host/internal/observe"
)

// sender owns the send path: it journals each send under its idempotency key
// before the channel is called, splits it into parts at the channel's text
// limit, delivers it inline (a handler's send) or as a worker job (a send the
// sweeper claimed), and settles retries, ambiguity and dead letters. The
// inline path and the sweeper share every rule here.
type sender struct {
	outbox    durability.OutboxJournal
	providers map[string]channel.Channel
	policy    *policy
	metrics   *observe.Counters
	tr        observe.Tracer
	// sendTime observes each channel send's latency, by channel.
	sendTime map[string]prometheus.Observer
	log      *slog.Logger
	// leases take and extend the sends' leases.
	leases *leases
	// alerts tell the operator of a dead or ambiguous send.
	alerts *observe.Alerts
	// wake asks the sweeper for a sweep now.
	wake signal
	// hooks run the module's botrun_after_send (nil: a guest without hooks).
	hooks SendHooks
	// afterBudgets hold the budget the after_send hooks of each recent
	// event share, and the budgets of operators' sends (operatorBudgetKey).
	afterBudgets *eventBudgets
	// settleInFlight makes a turn that meets its send in flight elsewhere
	// settle it before going on (coordination: the chat's next turn must
	// not overtake it).
	settleInFlight bool
	// runQueued delivers the send key now if this process's sweeper
	// claimed it and it waits in its chat's queue; false when it is not
	// there.
	runQueued func(provider, chat, key string) bool
	// boot is when this process started (Unix milliseconds).
	boot int64
	// leaders refuse the sends of a channel whose session another replica
	// leads: this replica never calls its transport.
	leaders leaders
	// channel recovers a provider's panics (Bot.channelEnv).
	channel func(id string) channel.Env
}

// OutboxMessage is the journaled content of a send: the JSON of an outbox
// record's Payload (a dry run reads it back).
type OutboxMessage struct {
	Text    string       `json:"text,omitempty"`
	Media   *abi.Media   `json:"media,omitempty"`
	Buttons []abi.Button `json:"buttons,omitempty"`
	List    *abi.List    `json:"list,omitempty"`
}

// outMsg is OutboxMessage, as the host's code names it.
type outMsg = OutboxMessage

// sendSpec is one send as the handler asked for it.
type sendSpec struct {
	provider string
	chat     string
	msg      outMsg
	key      string
	// derived is true for keys of rule 2 (<inbound id>:<n>): only those are
	// compared by fingerprint.
	derived bool
	inbound string
	// at holds an enqueued send until this time (Unix ms; 0: now).
	at int64
	// prehook holds the fingerprints of the parts of the send as the
	// handler asked for it, before botrun_before_send rewrote it (nil when
	// it did not): the journal keeps those, so a replay compares what the
	// handler asked for, as the seed does, whatever the hook made of it.
	prehook []string
	// keys, when set, collects the key of each part journaled.
	keys *[]string
}

// part is one journal record of a send: the whole send, or one piece of a text
// over the channel's limit.
type part struct {
	key, prev string
	// n numbers the part from 1.
	n       int
	msg     outMsg
	payload []byte
}

// fingerprint identifies chat + content (before any hooks).
func fingerprint(chat string, payload []byte) string {
	h := sha256.New()
	h.Write([]byte(chat))
	h.Write([]byte{0})
	h.Write(payload)
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// collect notes a journaled part's key (see sendSpec.keys).
func (s sendSpec) collect(key string) {
	if s.keys != nil {
		*s.keys = append(*s.keys, key)
	}
}

func (o *sender) textLimit(providerID string) int {
	if tl, ok := o.providers[providerID].(channel.TextLimiter); ok {
		return tl.TextLimit()
	}
	return 0
}

// byteLimit is the channel's limit on a text in bytes of UTF-8, or 0.
func (o *sender) byteLimit(providerID string) int {
	if bl, ok := o.providers[providerID].(channel.ByteLimiter); ok {
		return bl.TextByteLimit()
	}
	return 0
}

// parts splits a send by the provider's text limit into records key, key#2, …
// each linked to the one before.
func (o *sender) parts(s sendSpec) []part {
	limit := o.textLimit(s.provider)
	if cl, ok := o.providers[s.provider].(channel.ChoiceLimiter); ok && (len(s.msg.Buttons) > 0 || s.msg.List != nil) {
		if c := cl.ChoiceTextLimit(s.msg.Buttons, s.msg.List); c > 0 && (limit == 0 || c < limit) {
			limit = c
		}
	}
	texts := httpkit.Split(s.msg.Text, limit, o.byteLimit(s.provider))
	ps := make([]part, len(texts))
	for i, text := range texts {
		m := outMsg{Text: text}
		if i == 0 {
			m.Media = s.msg.Media
		}
		if i == len(texts)-1 {
			// The choices go under the last part, which the user reads last.
			m.Buttons, m.List = s.msg.Buttons, s.msg.List
		}
		ps[i].msg, ps[i].n = m, i+1
		ps[i].payload, _ = json.Marshal(m)
		ps[i].key = s.key
		if i > 0 {
			ps[i].key = fmt.Sprintf("%s#%d", s.key, i+1)
			ps[i].prev = ps[i-1].key
		}
	}
	return ps
}

func (o *sender) outboxLease() durability.Lease { return o.leases.lease(o.policy.outboxLease) }

// sendNow journals the send and delivers it inline, retrying until
// outbox.inline_max; past that it answers deferred and the sweeper goes on.
// An error means the journal failed (the caller's attempt fails). With hold,
// the last delivered part's MarkSent is not written but returned, for the
// caller to land with the inbound completion (an earlier part's lands before
// the next part is sent).
func (o *sender) sendNow(ctx context.Context, s sendSpec, hold bool) (abi.SendResult, *pendingMark, error) {
	prov, ok := o.providers[s.provider]
	if !ok {
		return abi.SendResult{Status: abi.SendDead, Key: s.key, Error: fmt.Sprintf("provider %q is not configured", s.provider)}, nil, nil
	}
	whole, _ := json.Marshal(s.msg)
	if len(whole) > o.policy.maxPayload {
		return o.bypass(ctx, prov, s, len(whole)), nil, nil
	}
	if refused := o.leaders.refuse(s.provider); refused != nil {
		// Journaled for the leader's sweeper; this replica never calls
		// the channel.
		res, err := o.enqueue(ctx, s)
		if err == nil && res.Status == abi.SendDeferred {
			o.metrics.OutboxDeferred.Add(1)
			o.metrics.ProviderNotLeader.Add(1)
			res.Error = refused.Error()
		}
		return res, nil, err
	}
	var res abi.SendResult
	var held *pendingMark
	blocked := false
	for i, p := range o.parts(s) {
		var r abi.SendResult
		var err error
		if blocked {
			// An earlier part is not sent yet: journal this one behind it.
			r, err = o.journal(ctx, s, p)
		} else {
			o.land(ctx, held)
			held = nil
			r, held, err = o.sendPart(ctx, prov, s, p, hold)
		}
		if err != nil {
			o.land(ctx, held)
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
func (o *sender) bypass(ctx context.Context, prov channel.Channel, s sendSpec, size int) abi.SendResult {
	if refused := o.leaders.refuse(s.provider); refused != nil {
		// Nothing journals it for the leader: it cannot go from here.
		o.metrics.ProviderNotLeader.Add(1)
		return abi.SendResult{Status: abi.SendDead, Key: s.key, Error: fmt.Sprintf("payload over durability.outbox.max_payload_bytes (%d bytes), which is sent without the outbox: %v", size, refused)}
	}
	o.metrics.OutboxBypassed.Add(1)
	o.log.WarnContext(ctx, "payload over durability.outbox.max_payload_bytes: sent without the outbox (no dedupe, no retry)", "key", s.key, "bytes", size, "limit", o.policy.maxPayload)
	// Split at the channel's text limit as a journaled send is: the parts
	// go in order, and the first one the channel refuses ends the send.
	res := abi.SendResult{Status: abi.SendBypassed, Key: s.key}
	for _, p := range o.parts(s) {
		start := time.Now()
		ref, err := o.send(ctx, prov, toOutbound(s.chat, p.msg, p.key))
		o.observeSend(s.provider, start)
		if err != nil {
			return abi.SendResult{Status: abi.SendDead, Key: s.key, Ref: res.Ref, Error: fmt.Sprintf("part %d (%s): %v", p.n, p.key, err)}
		}
		if p.n == 1 {
			res.Ref = ref
		}
	}
	return res
}

// settleElsewhere waits for a send another owner has in flight to settle:
// a live owner's until its lease ends; one whose lease expired (it died or
// froze mid-send) is claimed ambiguous here and settled as a sweep would
// (the channel closes the window, or on_ambiguous decides). A send this
// process's sweeper claimed waits behind this turn in the chat's queue: it
// is delivered now. It returns the record as it stands then.
func (o *sender) settleElsewhere(ctx context.Context, rec durability.OutboxRecord) (durability.OutboxRecord, error) {
	claimer, ok := o.outbox.(durability.ExpiredClaimer)
	wait := 5 * time.Millisecond
	// A sweep queues what it claimed at once: a claim of this process's
	// not queued within queuedBy is not a sweep's.
	queuedBy := time.Now().Add(2 * time.Second)
	for rec.State == durability.OutboxSending && ok {
		switch {
		case rec.Owner == o.leases.owner && rec.LeasedAt < o.boot:
			// This instance's earlier boot: the sweeper's reclaim takes it.
			return rec, nil
		case rec.Owner == o.leases.owner:
			// This process's sweeper claimed it: deliver it now, ahead of
			// the turn that waits for it in the queue (or, if the sweeper
			// has not queued it yet, wait for that).
			if o.runQueued == nil || time.Now().After(queuedBy) {
				return rec, nil // not the sweeper's (this turn's own key, sent twice)
			}
			if !o.runQueued(rec.Provider, rec.Chat, rec.Key) {
				if !sleepCtx(ctx, wait) {
					return rec, ctx.Err()
				}
				wait = min(2*wait, 100*time.Millisecond)
			}
		case rec.LeaseUntil <= nowMs():
			c, err := claimer.ClaimExpired(ctx, rec.Key, o.outboxLease())
			if err == nil {
				o.deliverClaimed(ctx, c)
			} else if !errors.Is(err, durability.ErrNotClaimable) {
				return rec, err
			}
		default:
			if !sleepCtx(ctx, wait) {
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

// sleepCtx waits d; false when ctx ended first.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// existing answers a send whose key is already journaled. It returns ok=false
// when the record still needs delivering (pending or failed).
func (o *sender) existing(rec durability.OutboxRecord) (abi.SendResult, bool) {
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
func (o *sender) diverged(s sendSpec, p part, rec durability.OutboxRecord, fp string) (string, bool) {
	if !s.derived || rec.Fingerprint == "" || rec.Fingerprint == fp {
		return p.key, false
	}
	o.metrics.Diverged.Add(1)
	o.log.Warn("replay produced other content under a derived key", "key", p.key, "on_diverged", map[bool]string{true: "send", false: "skip"}[o.policy.divergedSend])
	if !o.policy.divergedSend {
		return p.key, false
	}
	return p.key + "~" + fp[:12], true
}

func (o *sender) put(s sendSpec, p part, key, prev string) durability.OutboxPut {
	fp := fingerprint(s.chat, p.payload)
	if n := len(s.prehook); n > 0 {
		// A rewrite may make more parts than the handler's send had.
		fp = s.prehook[min(p.n, n)-1]
		if p.n > n {
			fp = fingerprint(fp, []byte(strconv.Itoa(p.n)))
		}
	}
	return durability.OutboxPut{Key: key, Provider: s.provider, Chat: s.chat, Payload: p.payload,
		Fingerprint: fp, PreviousPart: prev, Inbound: s.inbound, NotBefore: s.at}
}

// sendPart journals one part and delivers it inline (see sendNow for hold).
func (o *sender) sendPart(ctx context.Context, prov channel.Channel, s sendSpec, p part, hold bool) (abi.SendResult, *pendingMark, error) {
	put := o.put(s, p, p.key, p.prev)
	l := o.outboxLease()
	st, rec, err := o.outbox.Put(ctx, put, l.Now, &l)
	if err != nil {
		return abi.SendResult{}, nil, fmt.Errorf("outbox journal: %w", err)
	}
	if st == durability.Exists {
		if key, renamed := o.diverged(s, p, rec, put.Fingerprint); renamed {
			s.derived = false
			p.key = key
			return o.sendPart(ctx, prov, s, p, hold)
		}
		for tries := 1; ; tries++ {
			if rec.State == durability.OutboxSending && o.settleInFlight {
				if rec, err = o.settleElsewhere(ctx, rec); err != nil {
					return abi.SendResult{}, nil, fmt.Errorf("outbox journal: %w", err)
				}
			}
			if res, done := o.existing(rec); done {
				return res, nil, nil
			}
			if rec.Shown(nowMs()) == durability.OutboxScheduled {
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
func (o *sender) journal(ctx context.Context, s sendSpec, p part) (abi.SendResult, error) {
	put := o.put(s, p, p.key, p.prev)
	st, rec, err := o.outbox.Put(ctx, put, nowMs(), nil)
	if err != nil {
		return abi.SendResult{}, fmt.Errorf("outbox journal: %w", err)
	}
	if st == durability.Exists {
		if key, renamed := o.diverged(s, p, rec, put.Fingerprint); renamed {
			s.derived = false
			p.key = key
			return o.journal(ctx, s, p)
		}
		if res, done := o.existing(rec); done {
			return res, nil
		}
		if rec.Shown(nowMs()) == durability.OutboxScheduled {
			return abi.SendResult{Status: abi.SendScheduled, Key: rec.Key}, nil
		}
		return abi.SendResult{Status: abi.SendDeferred, Key: rec.Key}, nil
	}
	o.metrics.OutboxJournaled.Add(1)
	if rec.RetryAt > rec.CreatedAt {
		return abi.SendResult{Status: abi.SendScheduled, Key: rec.Key}, nil
	}
	if o.leaders.refuse(s.provider) == nil {
		// (A standby leaves it to the leader's next sweep.)
		o.wake.notify()
	}
	return abi.SendResult{Status: abi.SendDeferred, Key: rec.Key}, nil
}

// enqueue journals every part and returns at once; the sweeper claims them
// and the workers deliver them.
func (o *sender) enqueue(ctx context.Context, s sendSpec) (abi.SendResult, error) {
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
func (o *sender) deliverInline(ctx context.Context, prov channel.Channel, rec durability.OutboxRecord, hold bool) (abi.SendResult, *pendingMark, error) {
	_, span := o.tr.Start(ctx, observe.SpanSend)
	defer span.End()
	observe.IDAttr(span, rec.Key, rec.Provider)
	inlineUntil := time.Now().Add(o.policy.inlineMax)
	deferred := func(sendErr error) (abi.SendResult, *pendingMark, error) {
		o.metrics.OutboxDeferred.Add(1)
		return abi.SendResult{Status: abi.SendDeferred, Key: rec.Key, Error: sendErr.Error()}, nil, nil
	}
	for {
		ref, hb, marked, sendErr := o.call(prov, rec)
		if sendErr == nil {
			if marked {
				hb.release()
				return abi.SendResult{Status: abi.SendSent, Key: rec.Key, Ref: ref}, nil, nil
			}
			m := &pendingMark{rec: rec, ref: ref, at: nowMs(), hb: hb}
			if !hold {
				o.land(ctx, m)
				m = nil
			}
			return abi.SendResult{Status: abi.SendSent, Key: rec.Key, Ref: ref}, m, nil
		}
		hb.release()
		wait, dead, inline := o.settleFailure(ctx, rec, sendErr, inlineUntil)
		if dead {
			return abi.SendResult{Status: abi.SendDead, Key: rec.Key, Error: sendErr.Error()}, nil, nil
		}
		if !inline {
			return deferred(sendErr)
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
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

func toOutbound(chat string, m outMsg, key string) channel.Outbound {
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
func (o *sender) call(prov channel.Channel, rec durability.OutboxRecord) (ref string, hb *heartbeat, marked bool, err error) {
	hb = o.leases.heartbeat(o.policy.outboxLease, func(ctx context.Context, until int64) error {
		return o.outbox.Extend(ctx, rec.Key, rec.Token, until)
	})
	if err := o.leaders.refuse(rec.Provider); err != nil {
		return "", hb, false, err
	}
	var m outMsg
	if err := json.Unmarshal(rec.Payload, &m); err != nil {
		return "", hb, false, &permanentError{fmt.Errorf("journaled content is unreadable: %w", err)}
	}
	if rec.Attempts > 1 {
		o.metrics.OutboxRetried.Add(1)
	}
	msg := toOutbound(rec.Chat, m, rec.Key)
	if tp, ok := prov.(channel.Transactional); ok {
		if sw, ok := o.outbox.(durability.SentWriter); ok {
			// The heartbeat's extensions would conflict with the commit
			// that marks the record; the lease was taken just now.
			hb.stop()
			ch := o.channel(prov.ID())
			ref, err := sw.MarkSentWith(hb.ctx, rec.Key, rec.Token, nowMs(), func(ctx context.Context, retry bool) (ref string, writes []durability.Write, err error) {
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
	start := time.Now()
	ref, err = o.send(hb.ctx, prov, msg)
	o.observeSend(rec.Provider, start)
	return ref, hb, false, err
}

// send calls prov's Send, a panic in it an error worth a retry (as a
// connection lost before the answer is: delivered or not, unknown), logged
// and counted; the send goes dead when its attempts run out.
func (o *sender) send(ctx context.Context, prov channel.Channel, msg channel.Outbound) (ref string, err error) {
	err = o.channel(prov.ID()).Guard("sending", func() (err error) {
		ref, err = prov.Send(ctx, msg)
		return err
	})
	return ref, err
}

// observeSend records a send to providerID that started at start.
func (o *sender) observeSend(providerID string, start time.Time) {
	if h := o.sendTime[providerID]; h != nil {
		h.Observe(time.Since(start).Seconds())
	}
}

type permanentError struct{ error }

func (permanentError) Retryable() bool { return false }

// pendingMark is a delivered send's MarkSent held back to land with the
// inbound completion; its heartbeat keeps the send's lease until then.
type pendingMark struct {
	rec durability.OutboxRecord
	ref string
	at  int64
	hb  *heartbeat
}

// land writes a held MarkSent on its own (m may be nil).
func (o *sender) land(ctx context.Context, m *pendingMark) {
	if m != nil {
		m.hb.stop()
		o.markSentAt(ctx, m.rec, m.ref, m.at)
		m.hb.release()
	}
}

func (o *sender) markSent(ctx context.Context, rec durability.OutboxRecord, ref string) {
	o.markSentAt(ctx, rec, ref, nowMs())
}

func (o *sender) markSentAt(ctx context.Context, rec durability.OutboxRecord, ref string, at int64) {
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
func (o *sender) settleFailure(ctx context.Context, rec durability.OutboxRecord, sendErr error, inlineUntil time.Time) (wait time.Duration, dead, inline bool) {
	if errors.Is(sendErr, channel.ErrNotLeader) {
		o.handBack(ctx, rec, sendErr)
		return 0, false, false
	}
	now := time.Now()
	if channel.Permanent(sendErr) || rec.Attempts >= 1+o.policy.retries {
		err := o.outbox.MarkFailed(ctx, rec.Key, rec.Token, sendErr.Error(), durability.FailOptions{Now: now.UnixMilli(), Dead: true})
		if o.noteFailWrite(rec.Key, err) {
			o.metrics.OutboxDead.Add(1)
			o.alerts.Emit(Alert{Name: AlertDead, Kind: "outbox", ID: rec.Key, Key: rec.Key, Provider: rec.Provider, Chat: rec.Chat, Error: sendErr.Error()})
		}
		return 0, true, false
	}
	wait = max(o.policy.outboxBackoff.wait(rec.Attempts), channel.RetryAfter(sendErr))
	retryAt := now.Add(wait)
	inline = !retryAt.After(inlineUntil)
	if inline {
		retryAt = retryAt.Add(max(2*o.policy.poll, time.Second))
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
func (o *sender) handBack(ctx context.Context, rec durability.OutboxRecord, refused error) {
	o.metrics.ProviderNotLeader.Add(1)
	now := time.Now()
	err := o.outbox.MarkFailed(ctx, rec.Key, rec.Token, refused.Error(),
		durability.FailOptions{Now: now.UnixMilli(), RetryAt: now.Add(o.policy.notLeaderWait()).UnixMilli(), Refund: true})
	o.noteFailWrite(rec.Key, err)
	o.log.DebugContext(ctx, "send handed back to the session's leader", "key", rec.Key, "err", refused)
}

func (o *sender) noteFailWrite(key string, err error) bool {
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

// deliverClaimed delivers one send the sweeper claimed (a worker runs it,
// in its chat's order).
func (o *sender) deliverClaimed(ctx context.Context, c durability.ClaimedSend) {
	rec := c.Record
	if !o.stillHeld(ctx, &rec) {
		return
	}
	if rec.Provider == afterSendProvider {
		// A claim a crash left in flight runs the hook again: at least once.
		o.runAfterSend(ctx, rec)
		return
	}
	now := time.Now().UnixMilli()
	prov, configured := o.providers[rec.Provider]
	if c.Ambiguous && configured && o.settleAmbiguous(ctx, prov, rec) {
		return
	}
	if c.Ambiguous {
		o.metrics.OutboxAmbiguous.Add(1)
		o.alerts.Emit(Alert{Name: AlertAmbiguous, Key: rec.Key, Provider: rec.Provider, Chat: rec.Chat})
		to := durability.OutboxUnknown
		if o.policy.resend {
			to = durability.OutboxPending
		}
		if err := o.outbox.ResolveAmbiguous(ctx, rec.Key, rec.Token, to, now); !o.noteFailWrite(rec.Key, err) {
			return
		}
		if to == durability.OutboxPending {
			o.wake.notify()
		}
		return
	}
	if refused := o.leaders.refuse(rec.Provider); refused != nil {
		o.handBack(ctx, rec, refused)
		return
	}
	if rec.PreviousPart != "" {
		prev, err := o.outbox.Get(ctx, rec.PreviousPart)
		switch {
		case errors.Is(err, durability.ErrNotFound), err == nil && (prev.State == durability.OutboxSent || prev.State == durability.OutboxUnknown):
		case err == nil && prev.State == durability.OutboxDead:
			o.settleFailure(ctx, rec, &permanentError{fmt.Errorf("previous part %s is dead", prev.Key)}, time.Time{})
			return
		default:
			// Waiting behind an earlier part is not an attempt.
			err := o.outbox.MarkFailed(ctx, rec.Key, rec.Token, "waiting for "+rec.PreviousPart,
				durability.FailOptions{Now: now, RetryAt: now + o.policy.poll.Milliseconds(), Refund: true})
			o.noteFailWrite(rec.Key, err)
			return
		}
	}
	if !configured {
		o.settleFailure(ctx, rec, &permanentError{fmt.Errorf("provider %q is not configured", rec.Provider)}, time.Time{})
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
	hb.stop()
	defer hb.release()
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
func (o *sender) settleAmbiguous(ctx context.Context, prov channel.Channel, rec durability.OutboxRecord) bool {
	var delivered bool
	switch p := prov.(type) {
	case channel.Transactional:
	case channel.Reconciler:
		if o.leaders.refuse(rec.Provider) != nil {
			// Only the leader may ask the channel: the send stays in
			// flight until its lease expires and a claim asks again.
			return true
		}
		var m outMsg
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
	now := nowMs()
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
		o.wake.notify()
	}
	return true
}

// stillHeld checks, as a claimed send's job starts, that its claim still
// holds: a send waits in its chat's queue under the lease its claim gave it,
// not extended; if a third of the lease is gone the job first extends it, and
// if the journal refuses, the lease expired while queued and another owner
// claimed it (the fencing token decides): this job is skipped.
func (o *sender) stillHeld(ctx context.Context, rec *durability.OutboxRecord) bool {
	lease := o.policy.outboxLease
	if time.Until(time.UnixMilli(rec.LeaseUntil)) > 2*lease/3 {
		return true
	}
	until := time.Now().Add(lease).UnixMilli()
	err := o.outbox.Extend(ctx, rec.Key, rec.Token, until)
	switch {
	case errors.Is(err, durability.ErrStaleLease):
		o.metrics.StaleLeases.Add(1)
		o.log.WarnContext(ctx, "send's lease lost while queued: another owner claimed it; skipping it here", "key", rec.Key)
		return false
	case err != nil:
		o.log.ErrorContext(ctx, "extending a queued send's lease failed; it is reclaimed when its lease expires", "key", rec.Key, "err", err)
		return false
	}
	rec.LeaseUntil = until
	return true
}

// splitJournaled splits a record whose text is over the channel's limit (it
// was journaled by an older version, or with a larger limit): the parts after
// the first are journaled as key#2, key#3, … before the first is sent under the
// record's own key, so a retry journals and sends nothing twice.
func (o *sender) splitJournaled(ctx context.Context, rec durability.OutboxRecord) (durability.OutboxRecord, bool) {
	var m outMsg
	if json.Unmarshal(rec.Payload, &m) != nil {
		return rec, true // call reports it
	}
	texts := httpkit.Split(m.Text, o.textLimit(rec.Provider), o.byteLimit(rec.Provider))
	if len(texts) == 1 {
		return rec, true
	}
	s := sendSpec{provider: rec.Provider, chat: rec.Chat, msg: m, key: rec.Key, inbound: rec.Inbound}
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
