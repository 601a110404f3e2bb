package ops

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"slices"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/host/internal/rules"
)

// LogEntry is one delivered message of a chat, inbound or outbound.
type LogEntry struct {
	// At is when it was delivered, in Unix milliseconds: received for an
	// inbound message, sent for an outbound one.
	At int64 `json:"at"`
	// Direction is "in" or "out".
	Direction string `json:"direction"`
	Provider  string `json:"provider"`
	Chat      string `json:"chat"`
	// From is the sender of an inbound message.
	From string `json:"from,omitempty"`
	Text string `json:"text,omitempty"`
	// Media are the message's media references (journaled, never bytes).
	Media []abi.Media `json:"media,omitempty"`
	// ID is the channel's message id: the inbound message's, or the one the
	// channel gave the send.
	ID string `json:"id,omitempty"`
	// Key is an outbound message's idempotency key.
	Key string `json:"key,omitempty"`
}

// MessageLog returns the message log of a chat: the messages the inbox
// admitted and the sends the outbox recorded sent, oldest first, at most
// limit (0: no cap; the latest ones when capped). It is a view over the
// journals, so it is as durable as they are and purged with them
// (durability.retention); a send over outbox.max_payload_bytes, which
// bypasses the outbox, is not in it.
func (op *Operator) MessageLog(ctx context.Context, chat string, limit int) ([]LogEntry, error) {
	if chat == "" {
		return nil, errors.New("message log: a chat is required")
	}
	in, err := op.in.List(ctx, durability.ListFilter{Chat: chat})
	if err != nil {
		return nil, err
	}
	out, err := op.out.List(ctx, durability.ListFilter{Chat: chat, State: string(durability.OutboxSent)})
	if err != nil {
		return nil, err
	}
	log := make([]LogEntry, 0, len(in)+len(out))
	for _, r := range in {
		ev, _, err := rules.ParseJournaled(r.Payload)
		if err != nil {
			continue
		}
		id := ev.ID
		if p := r.Provider + ":"; len(id) > len(p) && id[:len(p)] == p {
			id = id[len(p):]
		}
		log = append(log, LogEntry{At: ev.ReceivedAt, Direction: "in", Provider: r.Provider, Chat: r.Chat, From: ev.From,
			Text: ev.Text, Media: ev.Media, ID: id})
	}
	for _, r := range out {
		if rules.Internal(r.Provider) {
			continue // an alert's or an after_send hook's record, not a message
		}
		var m rules.OutboxMessage
		if err := json.Unmarshal(r.Payload, &m); err != nil {
			continue
		}
		e := LogEntry{At: r.CompletedAt, Direction: "out", Provider: r.Provider, Chat: r.Chat, Text: m.Text, ID: r.Ref, Key: r.Key}
		if m.Media != nil {
			e.Media = []abi.Media{*m.Media}
		}
		log = append(log, e)
	}
	slices.SortStableFunc(log, func(a, b LogEntry) int { return cmp.Compare(a.At, b.At) })
	if limit > 0 && len(log) > limit {
		log = log[len(log)-limit:]
	}
	return log, nil
}
