// Package rules is the turn's rule book, one copy shared by the live turn
// (host) and the dry run (host/dryrun): the idempotency keys of a handler's
// sends ("<inbound id>:<n>"), the caps on an event's sends, the outcome of a
// botrun_before_send hook, the retry schedules, and the formats journaled for an event and a
// send, including the kinds of outbox record the host keeps for itself.
//
// rules imports abi, host/channel, host/config and host/wasm; it never imports host, and
// holds no state: every function answers from its arguments.
package rules

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/config"
	"github.com/botrun/botrun/host/wasm"
)

// ErrSendCap fails an event whose handler sends more than bot.max_sends.
var ErrSendCap = errors.New("the handler sent more than bot.max_sends")

// CheckSendCap refuses the n-th send (or broadcast) of event eventID, counted
// from 1, past maxSends (ErrSendCap).
func CheckSendCap(eventID string, n, maxSends int) error {
	if n > maxSends {
		return fmt.Errorf("event %s: %w (%d): raise it in [bot] if the bot means it", eventID, ErrSendCap, maxSends)
	}
	return nil
}

// CheckBroadcast refuses a broadcast, the event's n-th send, past maxSends
// or to more than maxBroadcast chats (wasm.ErrTooLarge).
func CheckBroadcast(eventID string, n, maxSends, chats, maxBroadcast int) error {
	if err := CheckSendCap(eventID, n, maxSends); err != nil {
		return err
	}
	if chats > maxBroadcast {
		return fmt.Errorf("event %s: a broadcast to %d chats is over bot.max_broadcast (%d): %w", eventID, chats, maxBroadcast, wasm.ErrTooLarge)
	}
	return nil
}

// SendKey is the idempotency key of event eventID's n-th send (counted from
// 1): explicit when the guest named one, else derived, "<event id>:<n>".
func SendKey(eventID string, n int, explicit string) (key string, derived bool) {
	if explicit != "" {
		return explicit, false
	}
	return fmt.Sprintf("%s:%d", eventID, n), true
}

// BeforeSendOutcome settles a botrun_before_send call (out, err) on the send
// keyed key: done, with the result the guest gets, when the hook cancelled
// the send or failed with its own error (the send is dead, never
// journaled); an error is a fault, which fails the event's attempt. Neither:
// the send goes on, rewritten when out.Rewrite is set.
func BeforeSendOutcome(key string, out wasm.BeforeSend, err error) (res abi.SendResult, done bool, fault error) {
	var he *wasm.HandlerError
	switch {
	case errors.As(err, &he):
		return abi.SendResult{Status: abi.SendDead, Key: key, Error: "botrun_before_send: " + he.Error()}, true, nil
	case errors.Is(err, wasm.ErrHookBudget):
		// Fail closed: a send whose hook could not run is not made.
		return abi.SendResult{Status: abi.SendDead, Key: key, Error: "botrun_before_send: " + err.Error()}, true, nil
	case err != nil:
		return res, false, fmt.Errorf("botrun_before_send of %s: %w", key, err)
	case out.Cancel:
		return abi.SendResult{Status: abi.SendCancelled, Key: key}, true, nil
	}
	return res, false, nil
}

// OutboxMessage is the journaled content of a send: the JSON of an outbox
// record's Payload.
type OutboxMessage struct {
	Text    string       `json:"text,omitempty"`
	Media   *abi.Media   `json:"media,omitempty"`
	Buttons []abi.Button `json:"buttons,omitempty"`
	List    *abi.List    `json:"list,omitempty"`
}

// ContentSize is the size of m as journaled.
func ContentSize(m OutboxMessage) int64 {
	b, _ := json.Marshal(m)
	return int64(len(b))
}

// Fingerprint identifies a send's chat and content (payload, as journaled
// before any hook rewrote it): a replay under a derived key compares it.
func Fingerprint(chat string, payload []byte) string {
	h := sha256.New()
	h.Write([]byte(chat))
	h.Write([]byte{0})
	h.Write(payload)
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// Journaled is the inbox payload: the event as the guest will see it, plus
// the durable media references the channel serialized
// (durability.inbox.media_refs).
type Journaled struct {
	abi.Event
	DurableMedia []*DurableMedia `json:"durable_media,omitempty"`
}

// DurableMedia is one serialized media reference, or why there is none.
type DurableMedia struct {
	Provider string             `json:"provider"`
	Stored   *channel.StoredRef `json:"stored,omitempty"`
	// Reason is set when the media has no durable reference: "not-durable".
	Reason string `json:"reason,omitempty"`
}

// ParseJournaled reads an inbox record's payload: the event as the guest saw
// it, and whether its media were journaled as the channel's durable
// references (their live references blanked; a channel's codec rebuilds them).
func ParseJournaled(payload []byte) (ev abi.Event, durableMedia bool, err error) {
	var jr Journaled
	if err := json.Unmarshal(payload, &jr); err != nil {
		return abi.Event{}, false, fmt.Errorf("journaled event is unreadable: %w", err)
	}
	return jr.Event, len(jr.DurableMedia) > 0, nil
}

// RandomSecretKey is where the bot's random secret lives in its scope's
// state store: host keys start with "botrun/", which no guest key can
// reach (guest keys start with "chat/" or "user/").
const RandomSecretKey = "botrun/secret/random"

// UsageKey is where the state quota usage record of an owner (a chat or a
// sender) lives.
func UsageKey(owner string) string { return "botrun/usage/" + owner }

// Backoff is a retry schedule: base * 2^(n-1), capped, then moved by up to
// ±Jitter of itself.
type Backoff struct {
	Base, Cap time.Duration
	Jitter    float64
}

// NewBackoff is the schedule b configures.
func NewBackoff(b config.Backoff) Backoff {
	return Backoff{Base: b.Base.D(), Cap: b.Cap.D(), Jitter: *b.Jitter}
}

// Wait is the delay after the n-th failed attempt (n >= 1).
func (b Backoff) Wait(n int) time.Duration {
	d := b.Base
	for i := 1; i < n && d < b.Cap; i++ {
		d *= 2
	}
	d = min(d, b.Cap)
	if b.Jitter > 0 {
		d = time.Duration(float64(d) * (1 + b.Jitter*(2*rand.Float64()-1)))
	}
	return max(d, 0)
}
