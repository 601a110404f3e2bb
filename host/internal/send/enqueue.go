package send

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/host/internal/rules"
)

// ChatHook runs a module's send hooks on one chat's send of a broadcast:
// before it is journaled (it may rewrite it, or cancel it: keep is false),
// and after (journal the after_send record).
type ChatHook struct {
	Before func(s *Spec) (keep bool, err error)
	After  func(s Spec) error
	// charge takes a chat's copy s (its journaled bytes) of the event's
	// bot.max_event_bytes; its error refuses the rest of the broadcast.
	Charge func(s Spec, bytes int) error
}

// Broadcast journals one send per chat of req, keyed
// "<key_prefix>:<chat>", for the sweeper to deliver (held until req.At),
// running hook (nil: none) on each chat's send. A key journaled before is
// not sent again (it counts in Existing). now is the journal's time (Unix ms).
func Broadcast(ctx context.Context, outbox durability.OutboxJournal, providerID, inbound string, req abi.BroadcastRequest, hook *ChatHook, now int64) (abi.BroadcastResult, error) {
	var res abi.BroadcastResult
	payload, _ := json.Marshal(rules.OutboxMessage{Text: req.Text, Media: req.Media})
	seen := make(map[string]bool, len(req.Chats))
	for _, chat := range req.Chats {
		if seen[chat] {
			continue
		}
		seen[chat] = true
		s := Spec{Provider: providerID, Chat: chat, Msg: rules.OutboxMessage{Text: req.Text, Media: req.Media},
			Key: req.KeyPrefix + ":" + chat, Inbound: inbound, At: req.At}
		p := payload
		if hook != nil && hook.Before != nil {
			keep, err := hook.Before(&s)
			if err != nil {
				return res, fmt.Errorf("broadcast: %w", err)
			}
			if !keep {
				res.Cancelled++
				continue
			}
			p, _ = json.Marshal(s.Msg)
		}
		if hook != nil && hook.Charge != nil {
			if err := hook.Charge(s, len(p)); err != nil {
				return res, fmt.Errorf("broadcast: %w", err)
			}
		}
		put := durability.OutboxPut{Key: s.Key, Provider: providerID, Chat: s.Chat, Payload: p,
			Fingerprint: rules.Fingerprint(chat, payload), Inbound: inbound, NotBefore: req.At}
		st, _, err := outbox.Put(ctx, put, now, nil)
		if err != nil {
			return res, fmt.Errorf("broadcast: outbox journal: %w", err)
		}
		if st == durability.Exists {
			res.Existing++
		} else {
			res.Journaled++
		}
		if hook != nil && hook.After != nil {
			if err := hook.After(s); err != nil {
				return res, fmt.Errorf("broadcast: %w", err)
			}
		}
	}
	return res, nil
}

// ErrInvalidSend is wrapped by Enqueue's errors for a request that can
// never be journaled (a bad name, a missing field); its other errors are
// the journal's. host/ops names it too (ops.ErrInvalidSend).
var ErrInvalidSend = errors.New("invalid send")

// Enqueue journals a send made outside any handler (an operator's, a
// script's, an alert's), for a running bot's sweeper to deliver: now, or
// held until at (Unix ms) when at is later. Without a key, a random one
// ("rnd:<RandomID>"). It works on a running bot's backend from another
// process (SQLite, PostgreSQL, Redis). A key already journaled answers
// from its record. now is the journal's time (Unix ms). A handler's send
// goes through Sender.Enqueue or Sender.SendNow instead.
func Enqueue(ctx context.Context, outbox durability.OutboxJournal, providerID, chat, text, key string, at, now int64) (abi.SendResult, error) {
	if key == "" {
		key = "rnd:" + RandomID()
	}
	if err := errors.Join(abi.CheckName("chat", chat), abi.CheckKey("idempotency key", key)); err != nil {
		return abi.SendResult{}, fmt.Errorf("send: %w: %w", ErrInvalidSend, err)
	}
	if text == "" || chat == "" || providerID == "" {
		return abi.SendResult{}, fmt.Errorf("send: %w: a provider, a chat and a text are required", ErrInvalidSend)
	}
	if at < 0 {
		return abi.SendResult{}, fmt.Errorf("send: %w: at %d is negative (Unix milliseconds)", ErrInvalidSend, at)
	}
	payload, _ := json.Marshal(rules.OutboxMessage{Text: text})
	st, rec, err := outbox.Put(ctx, durability.OutboxPut{Key: key, Provider: providerID, Chat: chat, Payload: payload,
		Fingerprint: rules.Fingerprint(chat, payload), NotBefore: at}, now, nil)
	if err != nil {
		return abi.SendResult{}, fmt.Errorf("send: outbox journal: %w", err)
	}
	res := abi.SendResult{Status: abi.SendDeferred, Key: key}
	switch {
	case st == durability.Exists && rec.State == durability.OutboxSent:
		res = abi.SendResult{Status: abi.SendDeduped, Key: key, Ref: rec.Ref}
	case st == durability.Exists && rec.State == durability.OutboxDead:
		res = abi.SendResult{Status: abi.SendDead, Key: key, Error: rec.Error}
	case rec.Shown(now) == durability.OutboxScheduled:
		res.Status = abi.SendScheduled
	}
	return res, nil
}

// RandomID is a fresh random identifier (24 hex digits): the random part
// of a key or an id made without one.
func RandomID() string {
	var b [12]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
