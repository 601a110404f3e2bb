package email

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/host/channel"
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
	// V is threadChecked for a thread whose To is its chat's
	// correspondent, 0 for one an earlier version recorded.
	V int `json:"v,omitempty"`
}

// threadChecked marks a thread recorded since a reply joins a chat only
// from its correspondent.
const threadChecked = 2

// maxReferences caps the References a reply carries (the root and the
// latest ids, as mail clients do).
const maxReferences = 20

// store keeps the cursor, the threads, the Message-IDs botrun sent (each
// with its chat) and the key the channel mints them with, in the Kv under
// "<KeyPrefix>email/<id>/", or in memory without a Kv.
type store struct {
	kv     durability.Kv
	prefix string
	mu     sync.Mutex
	mem    map[string][]byte
	key    []byte // the minting key, once read
}

func newStore(env channel.Env) *store {
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

// sentIn returns the chat botrun sent the Message-ID id in, "" for an id
// it did not send. (The "alias/" entries of earlier versions, which mapped
// any id of a thread, the senders' ones too, are not read.)
func (s *store) sentIn(ctx context.Context, id string) (string, error) {
	var chat string
	_, err := s.get(ctx, hashed("sent", id), &chat)
	return chat, err
}

// record writes chat's thread and, for sent (the Message-ID of a send to
// it, "" for none), which chat botrun sent it in, in one commit.
func (s *store) record(ctx context.Context, chat string, t thread, sent string) error {
	if len(t.References) > maxReferences {
		t.References = append(t.References[:1:1], t.References[len(t.References)-maxReferences+1:]...)
	}
	kvs := map[string]any{hashed("chat", chat): t}
	if sent != "" {
		kvs[hashed("sent", sent)] = chat
	}
	return s.put(ctx, kvs)
}

// mintingKey returns the channel's random key for the Message-IDs it
// mints, created (crypto/rand) once and kept in the Kv, so that a resend
// after a restart, or by another replica, carries the same id; without a
// Kv, a key for this process.
func (s *store) mintingKey(ctx context.Context) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.key != nil {
		return s.key, nil
	}
	fresh := make([]byte, 32)
	rand.Read(fresh)
	if s.kv == nil {
		s.key = fresh
		return s.key, nil
	}
	b, _ := json.Marshal(fresh)
	err := s.kv.Commit(ctx, []durability.Write{{Key: s.prefix + "key", Version: 0, Value: b}})
	if err != nil && !errors.Is(err, durability.ErrConflict) {
		return nil, err
	}
	// Created, or another replica created it first: read what is kept.
	v, _, err := s.kv.Get(ctx, s.prefix+"key")
	if err != nil {
		return nil, err
	}
	var key []byte
	if err := json.Unmarshal(v, &key); err != nil || len(key) != 32 {
		return nil, fmt.Errorf("the Message-ID key %q in the Kv is not 32 bytes: delete it to make a new one", s.prefix+"key")
	}
	s.key = key
	return s.key, nil
}
