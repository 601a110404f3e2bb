package email

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"sync"

	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/host/provider"
)

// cursor is how far the mailbox was journaled.
type cursor struct {
	UIDValidity uint32 `json:"uidvalidity"`
	UID         uint32 `json:"uid"`
}

// thread is what a send to a chat needs: whom to write, the subject, and the
// ids to thread under.
type thread struct {
	To         string   `json:"to"`
	Subject    string   `json:"subject"`
	References []string `json:"references,omitempty"`
}

// maxReferences caps the References a reply carries (the root and the
// latest ids, as mail clients do).
const maxReferences = 20

// store keeps the cursor, the threads and the aliases (a Message-ID that
// belongs to a chat named otherwise) in the Kv under
// "<KeyPrefix>email/<id>/", or in memory without a Kv.
type store struct {
	kv     durability.Kv
	prefix string
	mu     sync.Mutex
	mem    map[string][]byte
}

func newStore(env provider.Env) *store {
	return &store{kv: env.Kv, prefix: env.KeyPrefix + "email/" + env.ID + "/", mem: map[string][]byte{}}
}

// hashed names a key by a digest of an untrusted value (an address or a
// Message-ID: any bytes, any length).
func hashed(kind, v string) string {
	h := sha256.Sum256([]byte(v))
	return kind + "/" + hex.EncodeToString(h[:16])
}

func (s *store) get(ctx context.Context, key string, v any) (bool, error) {
	var b []byte
	if s.kv == nil {
		s.mu.Lock()
		b = s.mem[key]
		s.mu.Unlock()
	} else {
		var err error
		if b, _, err = s.kv.Get(ctx, s.prefix+key); err != nil {
			return false, err
		}
	}
	if b == nil {
		return false, nil
	}
	return true, json.Unmarshal(b, v)
}

func (s *store) put(ctx context.Context, kvs map[string]any) error {
	var writes []durability.Write
	for k, v := range kvs {
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		writes = append(writes, durability.Write{Key: s.prefix + k, Version: durability.AnyVersion, Value: b})
	}
	if s.kv == nil {
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, w := range writes {
			s.mem[w.Key[len(s.prefix):]] = w.Value
		}
		return nil
	}
	return s.kv.Commit(ctx, writes)
}

func (s *store) cursor(ctx context.Context) (cursor, bool, error) {
	var c cursor
	ok, err := s.get(ctx, "cursor", &c)
	return c, ok, err
}

func (s *store) setCursor(ctx context.Context, c cursor) error {
	return s.put(ctx, map[string]any{"cursor": c})
}

func (s *store) thread(ctx context.Context, chat string) (thread, bool, error) {
	var t thread
	ok, err := s.get(ctx, hashed("chat", chat), &t)
	return t, ok, err
}

// alias returns the chat a Message-ID belongs to, if one was recorded.
func (s *store) alias(ctx context.Context, messageID string) (string, error) {
	var chat string
	_, err := s.get(ctx, hashed("alias", messageID), &chat)
	return chat, err
}

// record writes chat's thread and the aliases of ids to it, in one commit.
func (s *store) record(ctx context.Context, chat string, t thread, ids ...string) error {
	if len(t.References) > maxReferences {
		t.References = append(t.References[:1:1], t.References[len(t.References)-maxReferences+1:]...)
	}
	kvs := map[string]any{hashed("chat", chat): t}
	for _, id := range ids {
		if id != "" && id != chat {
			kvs[hashed("alias", id)] = chat
		}
	}
	return s.put(ctx, kvs)
}

var errNoThread = errors.New("no thread")
