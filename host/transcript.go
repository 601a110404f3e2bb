package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/host/provider/webchat"
)

// kvTranscript keeps the webchat transcript in the backend's Kv, beside the
// journals, so it survives a restart on a persistent backend. Each entry is
// also indexed by the time it was appended ("<prefix>time/"), so retention
// can purge it.
type kvTranscript struct {
	kv     durability.Kv
	prefix string
}

type transcriptEntry struct {
	Chat string `json:"chat"`
	Text string `json:"text"`
}

func pad(seq int64) string { return fmt.Sprintf("%020d", seq) }

// timeGroup holds one key per entry, scored by its append time in Unix
// milliseconds, whose value is the entry's key.
func (t *kvTranscript) timeGroup() string { return t.prefix + "time/" }

// Append implements webchat.Transcript. Each chat has its own seq key
// ("<prefix><provider>/chat/<chat>/seq"), so concurrent replies to different
// chats never conflict. A chat's first append under this scheme starts after
// the provider-wide seq that earlier versions kept ("<prefix><provider>/seq"),
// so its seq stays above any entry it already has.
func (t *kvTranscript) Append(ctx context.Context, provider, chat, text string) (int64, error) {
	p := t.prefix + provider + "/"
	group := p + "chat/" + chat + "/"
	seqKey := group + "seq"
	entry, _ := json.Marshal(transcriptEntry{Chat: chat, Text: text})
	for {
		b, version, err := t.kv.Get(ctx, seqKey)
		if err != nil {
			return 0, err
		}
		if version == 0 {
			if b, _, err = t.kv.Get(ctx, p+"seq"); err != nil {
				return 0, err
			}
		}
		seq, _ := strconv.ParseInt(string(b), 10, 64)
		seq++
		key := group + pad(seq)
		at := time.Now().UnixMilli()
		err = t.kv.Commit(ctx, []durability.Write{
			{Key: seqKey, Version: version, Value: []byte(strconv.FormatInt(seq, 10))},
			{Key: key, Version: durability.AnyVersion, Value: entry, Group: group, Order: &seq},
			{Key: t.timeGroup() + provider + "/" + chat + "/" + pad(seq), Version: durability.AnyVersion, Value: []byte(key), Group: t.timeGroup(), Order: &at},
		})
		if errors.Is(err, durability.ErrConflict) {
			continue
		}
		return seq, err
	}
}

// After implements webchat.Transcript.
func (t *kvTranscript) After(ctx context.Context, provider, chat string, after int64, limit int) ([]webchat.Entry, error) {
	group := t.prefix + provider + "/chat/" + chat + "/"
	ids, err := t.kv.Range(ctx, group, durability.IndexOrder, durability.IndexEntry{Score: after, Key: group + pad(after)}, math.MaxInt64, limit)
	if err != nil {
		return nil, err
	}
	var out []webchat.Entry
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
		out = append(out, webchat.Entry{Seq: id.Score, Chat: e.Chat, Text: e.Text})
	}
	return out, nil
}

// Purge implements webchat.Transcript: the entries appended before before,
// in batches of 500. Entries written before the time index existed are kept.
func (t *kvTranscript) Purge(ctx context.Context, before time.Time) (int, error) {
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
