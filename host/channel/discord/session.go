package discord

import (
	"context"
	"encoding/json"
	"net/url"
	"sync/atomic"
	"time"

	"github.com/botrun/botrun/durability"
)

// session is the Gateway session as kept in the backend's Kv, so that a
// restarted botrun resumes it (Discord replays what was sent while it was
// down, within the session's life) instead of identifying anew and losing
// those messages. Seq only moves once a dispatch is journaled, so a stored
// seq is never ahead of the journal; one behind it (saved a second ago)
// replays dispatches the inbox deduplicates.
type session struct {
	ID        string `json:"session_id"`
	ResumeURL string `json:"resume_gateway_url,omitempty"`
	Seq       int64  `json:"seq"`
}

// sessionStore keeps a gateway's session under one Kv key.
type sessionStore struct {
	kv  durability.Kv
	key string
	// current is the run goroutine's session (nil: none), published for
	// the saver; saved is what the Kv holds.
	current atomic.Pointer[session]
	saved   session
}

// saveEvery is how often a changed session is written.
const saveEvery = time.Second

// load returns the stored session, if any.
func (s *sessionStore) load(ctx context.Context) (session, bool) {
	if s.kv == nil {
		return session{}, false
	}
	b, _, err := s.kv.Get(ctx, s.key)
	var st session
	if err != nil || b == nil || json.Unmarshal(b, &st) != nil || st.ID == "" {
		return session{}, false
	}
	s.saved = st
	return st, true
}

// publish makes the run goroutine's session (id and resume URL; seq is read
// at save time) the one to save; an empty id forgets it.
func (s *sessionStore) publish(id string, resume *url.URL) {
	if id == "" {
		s.current.Store(nil)
		return
	}
	st := &session{ID: id}
	if resume != nil {
		st.ResumeURL = resume.String()
	}
	s.current.Store(st)
}

// save writes the current session with seq when it changed since the last
// write (deletes it when there is none).
func (s *sessionStore) save(ctx context.Context, seq int64) {
	if s.kv == nil {
		return
	}
	var want session
	if cur := s.current.Load(); cur != nil {
		want = *cur
		want.Seq = seq
	}
	if want == s.saved {
		return
	}
	w := durability.Write{Key: s.key, Version: durability.AnyVersion}
	if want.ID == "" {
		w.Delete = true
	} else {
		w.Value, _ = json.Marshal(want)
	}
	if s.kv.Commit(ctx, []durability.Write{w}) == nil {
		s.saved = want
	}
}

// keep saves the session every saveEvery until ctx ends, then once more
// (with a context of its own: the bot is stopping).
func (s *sessionStore) keep(ctx context.Context, seq *atomic.Int64) {
	t := time.NewTicker(saveEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			final, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			s.save(final, seq.Load())
			cancel()
			return
		case <-t.C:
			s.save(ctx, seq.Load())
		}
	}
}
