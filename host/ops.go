package host

import (
	"context"
	"time"

	"github.com/botrun/botrun/durability"
)

// ListInbox lists inbound records (state "dead" is the inbound DLQ).
func (b *Bot) ListInbox(ctx context.Context, f durability.ListFilter) ([]durability.InboxRecord, error) {
	return b.inbox.List(ctx, f)
}

// ListOutbox lists sends (state "dead" is the outbound DLQ; a pending send
// held until later shows as "scheduled").
func (b *Bot) ListOutbox(ctx context.Context, f durability.ListFilter) ([]durability.OutboxRecord, error) {
	return durability.ListShown(ctx, b.outbox, f, time.Now().UnixMilli())
}

// ReplayInbound processes a done, failed or dead inbound record again, with a
// fresh attempt budget. Its sends are answered from the outbox where their keys
// are journaled.
func (b *Bot) ReplayInbound(ctx context.Context, id string) error {
	if err := b.inbox.Replay(ctx, id, nowMs()); err != nil {
		return err
	}
	b.metrics.inboundReplayed.Add(1)
	rec, err := b.inbox.Get(ctx, id)
	if err != nil {
		return err
	}
	b.dispatch.submit(job{chatKey: chatKey(rec.Provider, rec.Chat), id: id})
	return nil
}

// RetrySend sends a dead, failed or unknown send again.
func (b *Bot) RetrySend(ctx context.Context, key string) error {
	if err := b.outbox.Retry(ctx, key, nowMs()); err != nil {
		return err
	}
	b.wakeSweeper()
	return nil
}

// Discard forgets a send: a later send with its key goes out again.
func (b *Bot) Discard(ctx context.Context, key string) error {
	return b.outbox.Discard(ctx, key)
}
