package durability

import (
	"context"
	"errors"
	"math"
	"net/url"
	"time"
)

// ChatOrder is implemented by an InboxJournal opened for coordination
// (Coordinator): it keeps each chat's unfinished records (pending,
// processing, failed) in admission order, so replicas that share the
// backend can run a chat's messages one at a time and oldest first,
// whichever replica admitted them.
type ChatOrder interface {
	// OldestUnfinished returns the oldest unfinished record of provider's
	// chat, read from the store (never a cache); ok is false when the chat
	// has none.
	OldestUnfinished(ctx context.Context, provider, chat string) (rec InboxRecord, ok bool, err error)
}

// Coordinator is implemented by a Backend that several replicas can share
// without sticky routing: OpenCoordinated opens a scope's journals with an
// inbox that implements ChatOrder. The per-chat order costs one more key
// write in the admission commit and one more delete in the completion
// commit.
type Coordinator interface {
	OpenCoordinated(ctx context.Context, scope Scope) (Journals, error)
}

// OpenCoordinated implements Coordinator.
func (d *KvDurability) OpenCoordinated(ctx context.Context, scope Scope) (Journals, error) {
	j, err := d.Open(ctx, scope)
	if err != nil {
		return j, err
	}
	j.Inbox.(*kvInbox).chats = &chatIndex{kv: d.kv, prefix: scope.ID() + "/q/"}
	return j, nil
}

// chatIndex keeps a marker key per unfinished inbox record in a group of its
// chat ("<scope>/q/<provider>/<chat>/<id>"), ordered by admission time in
// nanoseconds. The markers are written in the same commits as the records
// they follow.
type chatIndex struct {
	kv     Kv
	prefix string
}

func (c *chatIndex) group(provider, chat string) string {
	return c.prefix + url.PathEscape(provider) + "/" + url.PathEscape(chat) + "/"
}

// add is the write that puts rec in its chat's order at score at.
func (c *chatIndex) add(rec *InboxRecord, at int64) Write {
	g := c.group(rec.Provider, rec.Chat)
	return Write{Key: g + rec.ID, Version: AnyVersion, Value: []byte(rec.ID), Group: g, Order: &at}
}

// remove is the write that takes rec out of its chat's order.
func (c *chatIndex) remove(rec *InboxRecord) Write {
	g := c.group(rec.Provider, rec.Chat)
	return Write{Key: g + rec.ID, Version: AnyVersion, Delete: true, Group: g}
}

// chatAdd returns the marker write of a record entering its chat's order
// (none without coordination).
func (j *kvInbox) chatAdd(rec *InboxRecord) []Write {
	if j.chats == nil {
		return nil
	}
	return []Write{j.chats.add(rec, time.Now().UnixNano())}
}

// chatRemove returns the marker write of a record leaving its chat's order.
func (j *kvInbox) chatRemove(rec *InboxRecord) []Write {
	if j.chats == nil {
		return nil
	}
	return []Write{j.chats.remove(rec)}
}

// OldestUnfinished implements ChatOrder. A marker whose record is gone or
// finished (a marker left behind by a write that predates coordination) is
// deleted on the way.
func (j *kvInbox) OldestUnfinished(ctx context.Context, provider, chat string) (InboxRecord, bool, error) {
	if j.chats == nil {
		return InboxRecord{}, false, errors.New("durability: the inbox was not opened for coordination")
	}
	g := j.chats.group(provider, chat)
	cursor := IndexEntry{Score: math.MinInt64}
	for {
		entries, err := j.chats.kv.Range(ctx, g, IndexOrder, cursor, math.MaxInt64, 8)
		if err != nil || len(entries) == 0 {
			return InboxRecord{}, false, err
		}
		for _, e := range entries {
			cursor = e
			id := e.Key[len(g):]
			rec, _, err := j.t.get(ctx, id)
			if err == nil && !rec.State.Terminal() {
				return rec, true, nil
			}
			if err != nil && !errors.Is(err, ErrNotFound) {
				return InboxRecord{}, false, err
			}
			// A stale marker: drop it unless it changed meanwhile (a
			// replay put it back).
			if _, v, err := j.chats.kv.Get(ctx, e.Key); err == nil && v != 0 {
				if rec, _, err := j.t.get(ctx, id); errors.Is(err, ErrNotFound) || err == nil && rec.State.Terminal() {
					j.chats.kv.Commit(ctx, []Write{{Key: e.Key, Version: v, Delete: true, Group: g}})
				}
			}
		}
	}
}
