package host

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/host/provider"
)

// outMsg is the journaled content of a send.
type outMsg struct {
	Text  string     `json:"text,omitempty"`
	Media *abi.Media `json:"media,omitempty"`
}

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
	// turn is the handler's turn, whose completion may carry the MarkSent.
	turn *turn
}

// part is one journal record of a send: the whole send, or one piece of a text
// over the channel's limit.
type part struct {
	key, prev string
	msg       outMsg
	payload   []byte
}

// fingerprint identifies chat + content (before any hooks).
func fingerprint(chat string, payload []byte) string {
	h := sha256.New()
	h.Write([]byte(chat))
	h.Write([]byte{0})
	h.Write(payload)
	return hex.EncodeToString(h.Sum(nil)[:16])
}

func (b *Bot) textLimit(providerID string) int {
	if tl, ok := b.providers[providerID].(provider.TextLimiter); ok {
		return tl.TextLimit()
	}
	return 0
}

// parts splits a send by the provider's text limit into records key, key#2, …
// each linked to the one before.
func (b *Bot) parts(s sendSpec) []part {
	texts := provider.SplitText(s.msg.Text, b.textLimit(s.provider))
	ps := make([]part, len(texts))
	for i, text := range texts {
		m := outMsg{Text: text}
		if i == 0 {
			m.Media = s.msg.Media
		}
		ps[i].msg = m
		ps[i].payload, _ = json.Marshal(m)
		ps[i].key = s.key
		if i > 0 {
			ps[i].key = fmt.Sprintf("%s#%d", s.key, i+1)
			ps[i].prev = ps[i-1].key
		}
	}
	return ps
}

func (b *Bot) outboxLease() durability.Lease {
	now := time.Now()
	return durability.Lease{Owner: b.policy.instanceID, Now: now.UnixMilli(), Until: now.Add(b.policy.outboxLease).UnixMilli()}
}

// sendNow journals the send and delivers it inline, retrying until
// outbox.inline_max; past that it answers deferred and the sweeper goes on.
// An error means the journal failed (the caller's attempt fails).
func (b *Bot) sendNow(ctx context.Context, s sendSpec) (abi.SendResult, error) {
	prov, ok := b.providers[s.provider]
	if !ok {
		return abi.SendResult{Status: abi.SendDead, Key: s.key, Error: fmt.Sprintf("provider %q is not configured", s.provider)}, nil
	}
	whole, _ := json.Marshal(s.msg)
	if len(whole) > b.policy.maxPayload {
		return b.bypass(ctx, prov, s, len(whole)), nil
	}
	var res abi.SendResult
	blocked := false
	for i, p := range b.parts(s) {
		var r abi.SendResult
		var err error
		if blocked {
			// An earlier part is not sent yet: journal this one behind it.
			r, err = b.journal(ctx, s, p)
		} else {
			r, err = b.sendPart(ctx, prov, s, p)
		}
		if err != nil {
			return abi.SendResult{}, err
		}
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
	return res, nil
}

// bypass sends a payload over max_payload_bytes without the outbox.
func (b *Bot) bypass(ctx context.Context, prov provider.Provider, s sendSpec, size int) abi.SendResult {
	b.metrics.outboxBypassed.Add(1)
	b.log.Warn("payload over durability.outbox.max_payload_bytes: sent without the outbox (no dedupe, no retry)", "key", s.key, "bytes", size, "limit", b.policy.maxPayload)
	ref, err := prov.Send(ctx, toOutbound(s.chat, s.msg))
	if err != nil {
		return abi.SendResult{Status: abi.SendDead, Key: s.key, Error: err.Error()}
	}
	return abi.SendResult{Status: abi.SendBypassed, Key: s.key, Ref: ref}
}

// existing answers a send whose key is already journaled. It returns ok=false
// when the record still needs delivering (pending or failed).
func (b *Bot) existing(rec durability.OutboxRecord) (abi.SendResult, bool) {
	switch rec.State {
	case durability.OutboxSent:
		b.metrics.outboxDeduped.Add(1)
		return abi.SendResult{Status: abi.SendDeduped, Key: rec.Key, Ref: rec.Ref}, true
	case durability.OutboxUnknown:
		b.metrics.outboxDeduped.Add(1)
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
func (b *Bot) diverged(s sendSpec, p part, rec durability.OutboxRecord, fp string) (string, bool) {
	if !s.derived || rec.Fingerprint == "" || rec.Fingerprint == fp {
		return p.key, false
	}
	b.metrics.diverged.Add(1)
	b.log.Warn("replay produced other content under a derived key", "key", p.key, "on_diverged", map[bool]string{true: "send", false: "skip"}[b.policy.divergedSend])
	if !b.policy.divergedSend {
		return p.key, false
	}
	return p.key + "~" + fp[:12], true
}

func (b *Bot) put(s sendSpec, p part, key, prev string) durability.OutboxPut {
	return durability.OutboxPut{Key: key, Provider: s.provider, Chat: s.chat, Payload: p.payload,
		Fingerprint: fingerprint(s.chat, p.payload), PreviousPart: prev, Inbound: s.inbound}
}

func (b *Bot) sendPart(ctx context.Context, prov provider.Provider, s sendSpec, p part) (abi.SendResult, error) {
	put := b.put(s, p, p.key, p.prev)
	l := b.outboxLease()
	st, rec, err := b.outbox.Put(ctx, put, l.Now, &l)
	if err != nil {
		return abi.SendResult{}, fmt.Errorf("outbox journal: %w", err)
	}
	if st == durability.Exists {
		if key, renamed := b.diverged(s, p, rec, put.Fingerprint); renamed {
			s.derived = false
			p.key = key
			return b.sendPart(ctx, prov, s, p)
		}
		if res, done := b.existing(rec); done {
			return res, nil
		}
		rec, err = b.outbox.Begin(ctx, rec.Key, b.outboxLease())
		if errors.Is(err, durability.ErrNotClaimable) {
			return abi.SendResult{Status: abi.SendDeferred, Key: p.key}, nil
		}
		if err != nil {
			return abi.SendResult{}, fmt.Errorf("outbox journal: %w", err)
		}
	} else {
		b.metrics.outboxJournaled.Add(1)
	}
	return b.deliverInline(ctx, prov, rec, s.turn)
}

// journal records a part for the sweeper without sending it.
func (b *Bot) journal(ctx context.Context, s sendSpec, p part) (abi.SendResult, error) {
	put := b.put(s, p, p.key, p.prev)
	st, rec, err := b.outbox.Put(ctx, put, nowMs(), nil)
	if err != nil {
		return abi.SendResult{}, fmt.Errorf("outbox journal: %w", err)
	}
	if st == durability.Exists {
		if key, renamed := b.diverged(s, p, rec, put.Fingerprint); renamed {
			s.derived = false
			p.key = key
			return b.journal(ctx, s, p)
		}
		if res, done := b.existing(rec); done {
			return res, nil
		}
		return abi.SendResult{Status: abi.SendDeferred, Key: rec.Key}, nil
	}
	b.metrics.outboxJournaled.Add(1)
	b.wakeSweeper()
	return abi.SendResult{Status: abi.SendDeferred, Key: rec.Key}, nil
}

// enqueue journals every part and returns at once; the sweeper delivers them.
func (b *Bot) enqueue(ctx context.Context, s sendSpec) (abi.SendResult, error) {
	var first abi.SendResult
	for i, p := range b.parts(s) {
		res, err := b.journal(ctx, s, p)
		if err != nil {
			return abi.SendResult{}, err
		}
		if i == 0 {
			first = res
		}
	}
	return first, nil
}

// deliverInline calls the provider for a begun record and retries inline with
// backoff until outbox.inline_max, then leaves it failed for the sweeper.
func (b *Bot) deliverInline(ctx context.Context, prov provider.Provider, rec durability.OutboxRecord, t *turn) (abi.SendResult, error) {
	inlineUntil := time.Now().Add(b.policy.inlineMax)
	deferred := func(sendErr error) (abi.SendResult, error) {
		b.metrics.outboxDeferred.Add(1)
		return abi.SendResult{Status: abi.SendDeferred, Key: rec.Key, Error: sendErr.Error()}, nil
	}
	for {
		ref, hb, sendErr := b.call(prov, rec)
		if sendErr == nil {
			if t != nil {
				// Land the MarkSent with the completion (or the next send);
				// an earlier part's deferred mark lands now.
				t.flushMark(ctx)
				t.mark = &pendingMark{rec: rec, ref: ref, at: nowMs(), hb: hb}
			} else {
				hb.stop()
				b.markSent(ctx, rec, ref)
				hb.release()
			}
			return abi.SendResult{Status: abi.SendSent, Key: rec.Key, Ref: ref}, nil
		}
		hb.release()
		wait, dead, inline := b.settleFailure(ctx, rec, sendErr, inlineUntil)
		if dead {
			return abi.SendResult{Status: abi.SendDead, Key: rec.Key, Error: sendErr.Error()}, nil
		}
		if !inline {
			return deferred(sendErr)
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return deferred(sendErr)
		}
		next, err := b.outbox.Begin(ctx, rec.Key, b.outboxLease())
		if errors.Is(err, durability.ErrNotClaimable) {
			return deferred(sendErr) // another replica took it: it delivers from here
		}
		if err != nil {
			return abi.SendResult{}, fmt.Errorf("outbox journal: %w", err)
		}
		rec = next
	}
}

func toOutbound(chat string, m outMsg) provider.Outbound {
	out := provider.Outbound{Chat: chat, Text: m.Text}
	if m.Media != nil {
		out.Media = &provider.Media{Type: m.Media.Type, Ref: m.Media.Ref, URL: m.Media.URL, MIME: m.Media.MIME, Caption: m.Media.Caption}
	}
	return out
}

// call makes one provider call for a sending record, extending its lease from
// now until the caller releases the returned heartbeat. The idempotency key
// never reaches the provider.
func (b *Bot) call(prov provider.Provider, rec durability.OutboxRecord) (string, *heartbeat, error) {
	hb := b.startHeartbeat(b.policy.outboxLease, func(ctx context.Context, until int64) error {
		return b.outbox.Extend(ctx, rec.Key, rec.Token, until)
	})
	var m outMsg
	if err := json.Unmarshal(rec.Payload, &m); err != nil {
		return "", hb, &permanentError{fmt.Errorf("journaled content is unreadable: %w", err)}
	}
	if rec.Attempts > 1 {
		b.metrics.outboxRetried.Add(1)
	}
	ref, err := prov.Send(hb.ctx, toOutbound(rec.Chat, m))
	return ref, hb, err
}

type permanentError struct{ error }

func (permanentError) Retryable() bool { return false }

func (b *Bot) markSent(ctx context.Context, rec durability.OutboxRecord, ref string) {
	b.markSentAt(ctx, rec, ref, nowMs())
}

func (b *Bot) markSentAt(ctx context.Context, rec durability.OutboxRecord, ref string, at int64) {
	err := b.outbox.MarkSent(ctx, rec.Key, rec.Token, ref, at)
	switch {
	case errors.Is(err, durability.ErrStaleLease):
		b.metrics.staleLeases.Add(1)
		b.log.Warn("sent, but the lease was lost to another owner", "key", rec.Key)
	case err != nil:
		b.log.Error("sent, but recording it failed: the send is ambiguous until its lease expires", "key", rec.Key, "err", err)
	}
}

// settleFailure records a failed provider call: dead when the error is
// permanent or the retries are spent, else failed with a retry time. When the
// retry fits before inlineUntil the caller retries inline (inline is true), and
// the journaled retry time is pushed past it by a margin so this process's
// sweeper does not take the send over and reorder the chat; the margin only
// delays the retry if the process dies meanwhile.
func (b *Bot) settleFailure(ctx context.Context, rec durability.OutboxRecord, sendErr error, inlineUntil time.Time) (wait time.Duration, dead, inline bool) {
	now := time.Now()
	if provider.Permanent(sendErr) || rec.Attempts >= 1+b.policy.retries {
		err := b.outbox.MarkFailed(ctx, rec.Key, rec.Token, sendErr.Error(), durability.FailOptions{Now: now.UnixMilli(), Dead: true})
		if b.noteFailWrite(rec.Key, err) {
			b.metrics.outboxDead.Add(1)
			b.emit(Event{Name: EventDead, Kind: "outbox", ID: rec.Key, Key: rec.Key, Chat: rec.Chat, Error: sendErr.Error()})
		}
		return 0, true, false
	}
	wait = max(b.policy.outboxBackoff.wait(rec.Attempts), provider.RetryAfter(sendErr))
	retryAt := now.Add(wait)
	inline = !retryAt.After(inlineUntil)
	if inline {
		retryAt = retryAt.Add(max(2*b.policy.poll, time.Second))
	}
	err := b.outbox.MarkFailed(ctx, rec.Key, rec.Token, sendErr.Error(), durability.FailOptions{Now: now.UnixMilli(), RetryAt: retryAt.UnixMilli()})
	b.noteFailWrite(rec.Key, err)
	b.log.Warn("send failed; will retry", "key", rec.Key, "attempt", rec.Attempts, "wait", wait, "inline", inline, "err", sendErr)
	return wait, false, inline
}

func (b *Bot) noteFailWrite(key string, err error) bool {
	switch {
	case errors.Is(err, durability.ErrStaleLease):
		b.metrics.staleLeases.Add(1)
		return false
	case err != nil:
		b.log.Error("recording a failed send failed", "key", key, "err", err)
		return false
	}
	return true
}

// Send sends text to chat on a provider outside any handler (rule 3: without
// a key, a random one). It retries inline like a handler's send.
func (b *Bot) Send(ctx context.Context, providerID, chat, text, key string) (abi.SendResult, error) {
	if key == "" {
		key = "rnd:" + randomID()
	}
	if err := errors.Join(abi.CheckName("chat", chat), abi.CheckName("idempotency key", key)); err != nil {
		return abi.SendResult{}, fmt.Errorf("send: %w", err)
	}
	return b.sendNow(ctx, sendSpec{provider: providerID, chat: chat, msg: outMsg{Text: text}, key: key})
}
