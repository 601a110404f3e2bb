package send

import (
	"context"
	"encoding/json"
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
	payload, _ := json.Marshal(outMsg{Text: req.Text, Media: req.Media})
	seen := make(map[string]bool, len(req.Chats))
	for _, chat := range req.Chats {
		if seen[chat] {
			continue
		}
		seen[chat] = true
		s := Spec{Provider: providerID, Chat: chat, Msg: outMsg{Text: req.Text, Media: req.Media},
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
