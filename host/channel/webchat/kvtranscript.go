package webchat

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/durability"
)

// kvTranscript keeps the webchat transcript in the backend's Kv, beside the
// journals, so it survives a restart on a persistent backend. Each entry is
// also indexed by the time it was appended ("<prefix>time/"), so retention
// can purge it. The latest entries this process appended to a chat are kept
// in memory too, so a long poll woken by a reply reads no store.
type kvTranscript struct {
	kv     durability.Kv
	prefix string

	mu    sync.Mutex
	tails map[string]*tail // by provider + "\x00" + chat
}

// tail is what this process knows of a chat: its last seq (the seq key's
// version is its value), and its latest entries, contiguous up to seq.
type tail struct {
	seq     int64
	entries []Entry
}

// Bounds of the tail cache: chats, and entries per chat.
const (
	tailChats   = 1024
	tailEntries = 8
)

type transcriptEntry struct {
	Chat    string       `json:"chat"`
	Text    string       `json:"text"`
	Buttons []abi.Button `json:"buttons,omitempty"`
	List    *abi.List    `json:"list,omitempty"`
	Edits   int64        `json:"edits,omitempty"`
}

func pad(seq int64) string { return fmt.Sprintf("%020d", seq) }

// timeGroup holds one key per entry, scored by its append time in Unix
// milliseconds, whose value is the entry's key.
func (t *kvTranscript) timeGroup() string { return t.prefix + "time/" }

// lastSeq returns the chat's last seq as this process wrote it.
func (t *kvTranscript) lastSeq(provider, chat string) (int64, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	tl, ok := t.tails[provider+"\x00"+chat]
	if !ok {
		return 0, false
	}
	return tl.seq, true
}

// cachedAfter returns a copy of the chat's cached entries after after, at
// most limit, when the cache holds every one of them (ok false otherwise).
func (t *kvTranscript) cachedAfter(provider, chat string, after int64, limit int) ([]Entry, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	tl, ok := t.tails[provider+"\x00"+chat]
	if !ok || len(tl.entries) == 0 || tl.entries[0].Seq > after+1 || after >= tl.seq {
		return nil, false
	}
	es := tl.entries[after+1-tl.entries[0].Seq:]
	return slices.Clone(es[:min(len(es), limit)]), true
}

// remember records that this process appended e, the chat's entry e.Seq.
func (t *kvTranscript) remember(provider string, e Entry) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.tails == nil {
		t.tails = map[string]*tail{}
	}
	k := provider + "\x00" + e.Chat
	tl := t.tails[k]
	if tl == nil {
		if len(t.tails) >= tailChats {
			for victim := range t.tails {
				delete(t.tails, victim)
				break
			}
		}
		tl = &tail{}
		t.tails[k] = tl
	}
	if tl.seq != e.Seq-1 {
		tl.entries = nil // another writer appended in between
	}
	tl.seq = e.Seq
	tl.entries = append(tl.entries, e)
	if n := len(tl.entries); n > tailEntries {
		tl.entries = slices.Clone(tl.entries[n-tailEntries:])
	}
}

// forget drops what the process knows of a chat.
func (t *kvTranscript) forget(provider, chat string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.tails, provider+"\x00"+chat)
}

// Append implements Transcript. Each chat has its own seq key
// ("<prefix><provider>/chat/<chat>/seq", whose version is the seq), so
// concurrent replies to different chats never conflict. A chat's first
// append under this scheme starts after the provider-wide seq that earlier
// versions kept ("<prefix><provider>/seq"), so its seq stays above any entry
// it already has.
func (t *kvTranscript) Append(ctx context.Context, provider string, e Entry) (int64, error) {
	for retry := false; ; retry = true {
		seq, writes, err := t.prepare(ctx, provider, e, retry)
		if err != nil {
			return 0, err
		}
		err = t.kv.Commit(ctx, writes)
		if errors.Is(err, durability.ErrConflict) {
			continue
		}
		if err != nil {
			t.forget(provider, e.Chat)
			return 0, err
		}
		e.Seq = seq
		t.appended(provider, e)
		return seq, nil
	}
}

// prepare returns the seq the chat's next entry gets and the writes that
// append it; they conflict if another writer appended to the chat first.
// retry is true after such a conflict: the seq is read from the store again.
func (t *kvTranscript) prepare(ctx context.Context, provider string, e Entry, retry bool) (int64, []durability.Write, error) {
	chat := e.Chat
	if retry {
		t.forget(provider, chat)
	}
	p := t.prefix + provider + "/"
	group := p + "chat/" + chat + "/"
	seqKey := group + "seq"
	entry, _ := json.Marshal(transcriptEntry{Chat: chat, Text: e.Text, Buttons: e.Buttons, List: e.List, Edits: e.Edits})
	seq, known := t.lastSeq(provider, chat)
	version := seq
	if !known {
		b, v, err := t.kv.Get(ctx, seqKey)
		if err != nil {
			return 0, nil, err
		}
		if v == 0 {
			if b, _, err = t.kv.Get(ctx, p+"seq"); err != nil {
				return 0, nil, err
			}
		}
		seq, _ = strconv.ParseInt(string(b), 10, 64)
		version = v
	}
	seq++
	key := group + pad(seq)
	at := time.Now().UnixMilli()
	return seq, []durability.Write{
		{Key: seqKey, Version: version, Next: seq, Value: []byte(strconv.FormatInt(seq, 10))},
		{Key: key, Version: durability.AnyVersion, Value: entry, Group: group, Order: &seq},
		{Key: t.timeGroup() + provider + "/" + chat + "/" + pad(seq), Version: durability.AnyVersion, Value: []byte(key), Group: t.timeGroup(), Order: &at},
	}, nil
}

// appended records that the writes of prepare committed (e.Seq set).
func (t *kvTranscript) appended(provider string, e Entry) {
	t.remember(provider, e)
}

// After implements Transcript: from memory when the chat's cached
// entries start right after after, else from the store.
func (t *kvTranscript) After(ctx context.Context, provider, chat string, after int64, limit int) ([]Entry, error) {
	if es, ok := t.cachedAfter(provider, chat, after, limit); ok {
		return es, nil
	}
	group := t.prefix + provider + "/chat/" + chat + "/"
	ids, err := t.kv.Range(ctx, group, durability.IndexOrder, durability.IndexEntry{Score: after, Key: group + pad(after)}, math.MaxInt64, limit)
	if err != nil {
		return nil, err
	}
	var out []Entry
	for _, id := range ids {
		b, v, err := t.kv.Get(ctx, id.Key)
		if err != nil {
			return nil, err
		}
		if v == 0 {
			continue
		}
		var e transcriptEntry
		if err := json.Unmarshal(b, &e); err != nil {
			return nil, err
		}
		out = append(out, Entry{Seq: id.Score, Chat: e.Chat, Text: e.Text, Buttons: e.Buttons, List: e.List, Edits: e.Edits})
	}
	return out, nil
}

// Purge implements Transcript: the entries appended before before,
// in batches of 500. Entries written before the time index existed are kept.
// The cached entries go too.
func (t *kvTranscript) Purge(ctx context.Context, before time.Time) (int, error) {
	t.mu.Lock()
	for _, tl := range t.tails {
		tl.entries = nil
	}
	t.mu.Unlock()
	n := 0
	for {
		ids, err := t.kv.Range(ctx, t.timeGroup(), durability.IndexOrder, durability.IndexEntry{Score: math.MinInt64}, before.UnixMilli()-1, 500)
		if err != nil || len(ids) == 0 {
			return n, err
		}
		writes := make([]durability.Write, 0, 2*len(ids))
		for _, id := range ids {
			entry, _, err := t.kv.Get(ctx, id.Key)
			if err != nil {
				return n, err
			}
			writes = append(writes, durability.Write{Key: id.Key, Version: durability.AnyVersion, Delete: true, Group: t.timeGroup()})
			if k := string(entry); len(k) > len(pad(0)) {
				// The entry's key is its chat's group + pad(seq): delete it
				// from that group's index too (Redis keeps one per group).
				writes = append(writes, durability.Write{Key: k, Version: durability.AnyVersion, Delete: true, Group: k[:len(k)-len(pad(0))]})
			}
		}
		if err := t.kv.Commit(ctx, writes); err != nil {
			return n, err
		}
		n += len(ids)
	}
}
