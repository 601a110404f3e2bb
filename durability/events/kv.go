package events

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/botrun/botrun/durability"
	evj "github.com/botrun/botrun/eventjournal"
)

// journalKv is the durability.Kv KvDurability keeps the bot's journals in.
// An inbound record ("<scope>/in/<id>") is the event "botrun:<scope>/<id>" of
// the journal (see toEvent); every other key is a sidecar value in the
// journal's store, or in outbox when there is one, except conversation state
// ("<scope>/st/") and the inbox's state indexes ("<scope>/in.dead/"), which
// stay with the inbound records they commit with.
type journalKv struct {
	journal durability.Kv
	outbox  durability.Kv
}

// inboxKey splits an inbound record's key "<scope>/in/<id>".
func inboxKey(key string) (scope, id string, ok bool) {
	scope, rest, ok := strings.Cut(key, "/")
	if !ok {
		return "", "", false
	}
	id, ok = strings.CutPrefix(rest, "in/")
	return scope, id, ok
}

// eventPrefix is the id prefix of the scope's inbound events.
func eventPrefix(scope string) string { return evj.Reserved + scope + "/" }

// store returns where a key other than an inbound record's lives.
func (k *journalKv) store(key string) durability.Kv {
	if k.outbox == nil {
		return k.journal
	}
	if _, rest, _ := strings.Cut(key, "/"); strings.HasPrefix(rest, "st/") || strings.HasPrefix(rest, "in.") {
		return k.journal
	}
	return k.outbox
}

func (k *journalKv) Get(ctx context.Context, key string) ([]byte, int64, error) {
	scope, id, ok := inboxKey(key)
	if !ok {
		return k.store(key).Get(ctx, key)
	}
	b, v, err := k.journal.Get(ctx, evj.Key(eventPrefix(scope)+id))
	if err != nil || v == 0 {
		return nil, v, err
	}
	e, err := evj.DecodeRecord(b)
	if err != nil {
		return nil, 0, fmt.Errorf("events durability: event %s%s is unreadable: %w", eventPrefix(scope), id, err)
	}
	rec, err := toInbox(id, e)
	if err != nil {
		return nil, 0, err
	}
	b, err = json.Marshal(rec)
	return b, v, err
}

// Commit implements durability.Kv. With a separate outbox, a commit must stay
// on one side: the two stores cannot commit together.
func (k *journalKv) Commit(ctx context.Context, writes []durability.Write) error {
	var target durability.Kv
	out := make([]durability.Write, len(writes))
	for i, w := range writes {
		s := k.journal
		if scope, id, ok := inboxKey(w.Key); ok {
			ew, err := eventWrite(scope, id, w)
			if err != nil {
				return err
			}
			out[i] = ew
		} else {
			s, out[i] = k.store(w.Key), w
		}
		if target != nil && s != target {
			return fmt.Errorf("events durability: one commit spans the events journal and the outbox store (%s): they cannot commit together", w.Key)
		}
		target = s
	}
	if target == nil {
		return nil
	}
	return target.Commit(ctx, out)
}

// eventWrite turns a write of the inbound record id into the write of its
// event.
func eventWrite(scope, id string, w durability.Write) (durability.Write, error) {
	key := evj.Key(eventPrefix(scope) + id)
	if w.Delete {
		return durability.Write{Key: key, Version: w.Version, Delete: true, Group: evj.Group}, nil
	}
	var rec durability.InboxRecord
	if err := json.Unmarshal(w.Value, &rec); err != nil {
		return w, fmt.Errorf("events durability: inbound record %s: %w", id, err)
	}
	e := toEvent(scope, rec)
	return evj.StoredWrite(&e, w.Version, w.Next)
}

// Range implements durability.Kv; an inbound group ranges over the journal's
// events, keeping the scope's inbound ones.
func (k *journalKv) Range(ctx context.Context, group string, ix durability.Index, after durability.IndexEntry, max int64, limit int) ([]durability.IndexEntry, error) {
	scope, id, ok := inboxKey(group)
	if !ok || id != "" {
		return k.store(group).Range(ctx, group, ix, after, max, limit)
	}
	prefix := evj.Key(eventPrefix(scope))
	cursor := after
	if _, aid, ok := inboxKey(after.Key); ok {
		cursor.Key = prefix + aid
	}
	const page = 256
	var out []durability.IndexEntry
	for {
		entries, err := k.journal.Range(ctx, evj.Group, ix, cursor, max, page)
		if err != nil {
			return out, err
		}
		for _, e := range entries {
			if id, ok := strings.CutPrefix(e.Key, prefix); ok {
				out = append(out, durability.IndexEntry{Key: group + id, Score: e.Score})
				if len(out) == limit {
					return out, nil
				}
			}
		}
		if len(entries) < page {
			return out, nil
		}
		cursor = entries[len(entries)-1]
	}
}

// Close closes the journal and the outbox store.
func (k *journalKv) Close() error {
	err := k.journal.Close()
	if k.outbox != nil {
		err = errors.Join(err, k.outbox.Close())
	}
	return err
}

// inboxMeta is what an inbound record holds beyond its event's fields, kept
// in the event's Meta.
type inboxMeta struct {
	Provider   string `json:"provider"`
	Chat       string `json:"chat"`
	Duplicates int    `json:"duplicates,omitempty"`
	Module     string `json:"module,omitempty"`
	// Inputs are the record's recorded turn inputs (InboxRecord.Inputs).
	Inputs json.RawMessage `json:"inputs,omitempty"`
}

// toEvent is the event of scope's inbound record r.
func toEvent(scope string, r durability.InboxRecord) evj.EventRecord {
	meta, _ := json.Marshal(inboxMeta{Provider: r.Provider, Chat: r.Chat, Duplicates: r.Duplicates, Module: r.Module, Inputs: r.Inputs})
	return evj.EventRecord{
		ID: eventPrefix(scope) + r.ID, Channel: Channel, Type: eventType(r.Payload), Time: r.CreatedAt,
		Payload: r.Payload, Meta: meta, State: evj.State(r.State),
		Attempts: r.Attempts, Token: r.Token, Owner: r.Owner, LeasedAt: r.LeasedAt, LeaseUntil: r.LeaseUntil,
		RetryAt: r.RetryAt, Error: r.Error, UpdatedAt: r.UpdatedAt, CompletedAt: r.CompletedAt,
	}
}

// toInbox is the inbound record id that the event e holds. The event was read
// from a file: its meta is decoded strictly.
func toInbox(id string, e evj.EventRecord) (durability.InboxRecord, error) {
	var m inboxMeta
	dec := json.NewDecoder(bytes.NewReader(e.Meta))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return durability.InboxRecord{}, fmt.Errorf("events durability: event %s is not an inbound record: %w", e.ID, err)
	}
	if e.Channel != Channel {
		return durability.InboxRecord{}, fmt.Errorf("events durability: event %s is on channel %q, not %s", e.ID, e.Channel, Channel)
	}
	return durability.InboxRecord{
		ID: id, Provider: m.Provider, Chat: m.Chat, Payload: e.Payload, State: durability.InboxState(e.State),
		Attempts: e.Attempts, Token: e.Token, Owner: e.Owner, LeasedAt: e.LeasedAt, LeaseUntil: e.LeaseUntil,
		RetryAt: e.RetryAt, Duplicates: m.Duplicates, Error: e.Error, Module: m.Module, Inputs: m.Inputs,
		CreatedAt: e.Time, UpdatedAt: e.UpdatedAt, CompletedAt: e.CompletedAt,
	}, nil
}

// interaction is abi.EventInteraction, the kind of a journaled event that is
// the press of a button or a list row (durability does not import abi).
const interaction = "interaction"

// eventType is the event type of a journaled inbound event: its "kind".
func eventType(payload []byte) string {
	var ev struct {
		Kind string `json:"kind"`
	}
	if json.Unmarshal(payload, &ev) == nil && ev.Kind == interaction {
		return TypeInteraction
	}
	return TypeMessage
}
