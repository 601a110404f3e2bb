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

// ErrInvalidSend is wrapped by Enqueue's errors for a request that can
// never be journaled (a bad name, a missing field); its other errors are
// the journal's. host/ops names it too (ops.ErrInvalidSend).
var ErrInvalidSend = errors.New("invalid send")

// Enqueue journals a send made outside any handler (an operator's, a
// script's, an alert's), for a running bot's sweeper to deliver: now, or
// held until at (Unix ms) when at is later. Without a key, a random one
// ("rnd:<RandomID>"). It works on a running bot's backend from another
// process (SQLite, PostgreSQL, Redis). A key already journaled answers
// from its record. now is the journal's time (Unix ms).
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
