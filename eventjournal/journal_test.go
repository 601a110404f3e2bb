package eventjournal

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/botrun/botrun/durability/file"
)

// clock is a test clock in Unix milliseconds.
type clock struct{ ms atomic.Int64 }

func (c *clock) now() time.Time        { return time.UnixMilli(c.ms.Load()) }
func (c *clock) at(ms int64) time.Time { return time.UnixMilli(ms) }

// journals open a fresh journal of each kind at path with clock c.
var journals = map[string]func(path string, c *clock) (Journal, error){
	"file": func(path string, c *clock) (Journal, error) {
		return OpenFile(path, &FileOptions{Lock: true, AppendLog: true, CompactEvery: 5, NoFsync: true, Now: c.now})
	},
	"file-snapshot": func(path string, c *clock) (Journal, error) {
		return OpenFile(path, &FileOptions{Lock: true, NoFsync: true, Now: c.now})
	},
	"shared": func(path string, c *clock) (Journal, error) {
		return OpenShared(path, &SharedOptions{AppendLog: true, CompactEvery: 5, NoFsync: true, Now: c.now})
	},
	"shared-snapshot": func(path string, c *clock) (Journal, error) {
		return OpenShared(path, &SharedOptions{NoFsync: true, Now: c.now})
	},
}

func eachJournal(t *testing.T, fn func(t *testing.T, j Journal, c *clock, path string)) {
	for name, open := range journals {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "events.json")
			c := &clock{}
			c.ms.Store(1000)
			j, err := open(path, c)
			if err != nil {
				t.Fatal(err)
			}
			defer j.Close()
			fn(t, j, c, path)
		})
	}
}

var ctx = context.Background()

func ids(recs []EventRecord) []string {
	var out []string
	for _, r := range recs {
		out = append(out, r.ID)
	}
	return out
}

func must[T any](t *testing.T) func(v T, err error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

func TestAppendAndList(t *testing.T) {
	eachJournal(t, func(t *testing.T, j Journal, c *clock, _ string) {
		add := func(id, channel, typ string, at int64) {
			t.Helper()
			if _, err := j.Append(ctx, Event{ID: id, Channel: channel, Type: typ, Time: c.at(at), Payload: []byte(id)}); err != nil {
				t.Fatal(err)
			}
		}
		add("o3", "orders", "order.paid", 300)
		add("o1", "orders", "order.created", 100)
		add("m2", "mail", "mail.sent", 200)
		add("x4", "", "tick", 400)
		rec := must[EventRecord](t)(j.Get(ctx, "o1"))
		if rec.State != Pending || rec.Time != 100 || string(rec.Payload) != "o1" || rec.Channel != "orders" {
			t.Fatalf("get: %+v", rec)
		}
		for _, tc := range []struct {
			f    Filter
			want []string
		}{
			{Filter{}, []string{"o1", "m2", "o3", "x4"}},
			{Filter{Channel: "orders"}, []string{"o1", "o3"}},
			{Filter{Type: "order.paid"}, []string{"o3"}},
			{Filter{Since: c.at(200), Until: c.at(300)}, []string{"m2", "o3"}},
			{Filter{Since: c.at(201)}, []string{"o3", "x4"}},
			{Filter{Limit: 2}, []string{"o1", "m2"}},
			{Filter{State: Done}, nil},
		} {
			if got := ids(must[[]EventRecord](t)(j.List(ctx, tc.f))); !slices.Equal(got, tc.want) {
				t.Errorf("List(%+v) = %v, want %v", tc.f, got, tc.want)
			}
		}
		// An id the journal holds: refused, the record unchanged.
		old, err := j.Append(ctx, Event{ID: "o1", Type: "other"})
		if !errors.Is(err, ErrExists) || old.Type != "order.created" {
			t.Fatalf("append of an existing id: %+v %v", old, err)
		}
		for _, e := range []Event{{Channel: "botrun:durable", Type: "x"}, {ID: "botrun:1", Type: "x"}} {
			if _, err := j.Append(ctx, e); !errors.Is(err, ErrReserved) {
				t.Fatalf("append %+v: %v, want ErrReserved", e, err)
			}
		}
		if _, err := j.Append(ctx, Event{Channel: "a"}); err == nil {
			t.Fatal("an event without a type was appended")
		}
		gen := must[EventRecord](t)(j.Append(ctx, Event{Type: "t"}))
		if gen.ID == "" || gen.Time != c.ms.Load() {
			t.Fatalf("generated id/time: %+v", gen)
		}
	})
}

func TestClaimLeasesAndFencing(t *testing.T) {
	eachJournal(t, func(t *testing.T, j Journal, c *clock, _ string) {
		for _, e := range []Event{
			{ID: "a", Channel: "work", Type: "t", Time: c.at(100)},
			{ID: "b", Channel: "work", Type: "t", Time: c.at(200)},
			{ID: "later", Channel: "work", Type: "t", Time: c.at(5000)},
			{ID: "other", Channel: "mail", Type: "t", Time: c.at(50)},
			{ID: "bare", Type: "t", Time: c.at(60)},
		} {
			must[EventRecord](t)(j.Append(ctx, e))
		}
		// A claim without a channel takes only events without one.
		got := must[[]EventRecord](t)(j.Claim(ctx, ClaimOptions{Owner: "w0", Lease: time.Second}))
		if !slices.Equal(ids(got), []string{"bare"}) {
			t.Fatalf("claim without a channel = %v", ids(got))
		}
		got = must[[]EventRecord](t)(j.Claim(ctx, ClaimOptions{Channel: "work", Owner: "w1", Lease: time.Second, Limit: 1}))
		if !slices.Equal(ids(got), []string{"a"}) || got[0].Token != 1 || got[0].Attempts != 1 || got[0].Owner != "w1" || got[0].LeaseUntil != 2000 {
			t.Fatalf("first claim = %+v", got)
		}
		got = must[[]EventRecord](t)(j.Claim(ctx, ClaimOptions{Channel: "work", Owner: "w2", Lease: time.Second}))
		if !slices.Equal(ids(got), []string{"b"}) {
			t.Fatalf("second claim = %v (a is leased, later is not due)", ids(got))
		}
		// a's lease expires: w2 takes it with token 2; w1 is fenced off.
		c.ms.Store(2000)
		got = must[[]EventRecord](t)(j.Claim(ctx, ClaimOptions{Channel: "work", Owner: "w2", Lease: time.Second}))
		if len(got) != 2 || got[0].ID != "a" || got[0].Token != 2 || got[0].Attempts != 2 {
			t.Fatalf("claim after expiry = %+v", got)
		}
		if err := j.Complete(ctx, "a", 1); !errors.Is(err, ErrStaleLease) {
			t.Fatalf("stale complete: %v", err)
		}
		if err := j.Extend(ctx, "a", 1, time.Minute); !errors.Is(err, ErrStaleLease) {
			t.Fatalf("stale extend: %v", err)
		}
		if err := j.Extend(ctx, "a", 2, time.Minute); err != nil {
			t.Fatal(err)
		}
		if err := j.Complete(ctx, "a", 2); err != nil {
			t.Fatal(err)
		}
		if r := must[EventRecord](t)(j.Get(ctx, "a")); r.State != Done || r.CompletedAt != 2000 {
			t.Fatalf("after complete: %+v", r)
		}
		// b fails, is due again at 2500, then dies.
		if err := j.Fail(ctx, "b", 2, "boom", FailOptions{RetryAt: c.at(2500)}); err != nil {
			t.Fatal(err)
		}
		if got := must[[]EventRecord](t)(j.Claim(ctx, ClaimOptions{Channel: "work", Owner: "w3"})); len(got) != 0 {
			t.Fatalf("claimed %v before retry_at", ids(got))
		}
		c.ms.Store(2500)
		got = must[[]EventRecord](t)(j.Claim(ctx, ClaimOptions{Channel: "work", Owner: "w3"}))
		if !slices.Equal(ids(got), []string{"b"}) || got[0].Attempts != 3 {
			t.Fatalf("retry claim = %+v", got)
		}
		if err := j.Fail(ctx, "b", got[0].Token, "boom", FailOptions{Dead: true}); err != nil {
			t.Fatal(err)
		}
		// Replay: done and dead events run again; one in flight cannot.
		if err := j.Replay(ctx, "b"); err != nil {
			t.Fatal(err)
		}
		if r := must[EventRecord](t)(j.Get(ctx, "b")); r.State != Pending || r.Attempts != 0 || r.Error != "boom" {
			t.Fatalf("after replay: %+v", r)
		}
		if err := j.Replay(ctx, "b"); !errors.Is(err, ErrInvalidState) {
			t.Fatalf("replay of a pending event: %v", err)
		}
		if err := j.Replay(ctx, "nope"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("replay of a missing event: %v", err)
		}
		got = must[[]EventRecord](t)(j.Claim(ctx, ClaimOptions{Channel: "work", Owner: "w4"}))
		if !slices.Equal(ids(got), []string{"b"}) || got[0].Token != 4 {
			t.Fatalf("claim after replay = %+v", got)
		}
		// Purge: done events completed before the cut go; others stay.
		if n := must[int](t)(j.Purge(ctx, c.at(3000))); n != 1 {
			t.Fatalf("purged %d, want 1 (a)", n)
		}
		if _, err := j.Get(ctx, "a"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("a after purge: %v", err)
		}
	})
}

func TestEventsSurviveReopen(t *testing.T) {
	for name, open := range journals {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "events.json")
			c := &clock{}
			c.ms.Store(1000)
			j := must[Journal](t)(open(path, c))
			for i := range 12 {
				must[EventRecord](t)(j.Append(ctx, Event{ID: fmt.Sprint("e", i), Channel: "c", Type: "t", Payload: []byte{byte(i)}}))
			}
			got := must[[]EventRecord](t)(j.Claim(ctx, ClaimOptions{Channel: "c", Owner: "w", Limit: 3}))
			for _, r := range got {
				if err := j.Complete(ctx, r.ID, r.Token); err != nil {
					t.Fatal(err)
				}
			}
			if err := j.Close(); err != nil {
				t.Fatal(err)
			}
			if _, err := j.Append(ctx, Event{Type: "t"}); !errors.Is(err, ErrClosed) {
				t.Fatalf("append after close: %v", err)
			}
			j = must[Journal](t)(open(path, c))
			defer j.Close()
			if all := must[[]EventRecord](t)(j.List(ctx, Filter{})); len(all) != 12 {
				t.Fatalf("%d events after reopen, want 12", len(all))
			}
			if done := must[[]EventRecord](t)(j.List(ctx, Filter{State: Done})); len(done) != 3 {
				t.Fatalf("%d done after reopen, want 3", len(done))
			}
		})
	}
}

// TestSharedClaimsAreExclusive: workers on two shared journals over one file
// (as in two processes) claim every event exactly once.
func TestSharedClaimsAreExclusive(t *testing.T) {
	path := filepath.Join(t.TempDir(), "events.json")
	opts := &SharedOptions{AppendLog: true, CompactEvery: 20, NoFsync: true}
	a := must[*SharedFileEventJournal](t)(OpenShared(path, opts))
	defer a.Close()
	b := must[*SharedFileEventJournal](t)(OpenShared(path, opts))
	defer b.Close()
	const n = 150
	for i := range n {
		must[EventRecord](t)(a.Append(ctx, Event{ID: fmt.Sprintf("e%03d", i), Channel: "work", Type: "t"}))
	}
	var mu sync.Mutex
	claimed := map[string]int{}
	var wg sync.WaitGroup
	for w := range 6 {
		j := Journal(a)
		if w%2 == 1 {
			j = b
		}
		wg.Go(func() {
			for {
				got, err := j.Claim(ctx, ClaimOptions{Channel: "work", Owner: fmt.Sprint("w", w), Lease: time.Hour, Limit: 4})
				if err != nil {
					t.Error(err)
					return
				}
				if len(got) == 0 {
					return
				}
				for _, r := range got {
					mu.Lock()
					claimed[r.ID]++
					mu.Unlock()
					if err := j.Complete(ctx, r.ID, r.Token); err != nil {
						t.Error(err)
					}
				}
			}
		})
	}
	wg.Wait()
	if len(claimed) != n {
		t.Fatalf("%d events claimed, want %d", len(claimed), n)
	}
	for id, k := range claimed {
		if k != 1 {
			t.Fatalf("%s claimed %d times", id, k)
		}
	}
}

func TestFileLockAndSharedExclude(t *testing.T) {
	path := filepath.Join(t.TempDir(), "events.json")
	j := must[*FileEventJournal](t)(OpenFile(path, &FileOptions{Lock: true}))
	if _, err := OpenFile(path, &FileOptions{Lock: true}); !errors.Is(err, file.ErrLocked) || !strings.Contains(err.Error(), "already open in this process") {
		t.Fatalf("second locked open: %v", err)
	}
	if _, err := OpenShared(path, nil); !errors.Is(err, file.ErrLocked) {
		t.Fatalf("shared open of a locked file: %v", err)
	}
	j.Close()
	s := must[*SharedFileEventJournal](t)(OpenShared(path, nil))
	if _, err := OpenFile(path, &FileOptions{Lock: true}); !errors.Is(err, file.ErrLocked) || !strings.Contains(err.Error(), "shared journal") {
		t.Fatalf("locked open of a shared file: %v", err)
	}
	s.Close()
	j = must[*FileEventJournal](t)(OpenFile(path, &FileOptions{Lock: true}))
	j.Close()
}

// TestCorruptLogRefused: both journals refuse a log with a bad line before
// its end, with APPEND_LOG_CORRUPT, and trim a torn last line.
func TestCorruptLogRefused(t *testing.T) {
	for name, open := range journals {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "events.json")
			good := `{"seq":1,"w":[{"k":"x","v":"MQ=="}]}` + "\n"
			os.WriteFile(path+".log", []byte(good+`{"seq":2,"w":[{"k"`), 0o600)
			j, err := open(path, &clock{})
			if err != nil {
				t.Fatalf("a torn last line: %v", err)
			}
			j.Close()
			if b, _ := os.ReadFile(path + ".log"); string(b) != good && len(b) != 0 {
				t.Fatalf("log after a torn line: %q", b)
			}
			bad := good + "garbage\n" + `{"seq":3,"w":[]}` + "\n"
			os.Remove(path)
			os.WriteFile(path+".log", []byte(bad), 0o600)
			_, err = open(path, &clock{})
			var ce *file.CorruptError
			if !errors.As(err, &ce) || ce.Code != "APPEND_LOG_CORRUPT" || ce.Line != 2 {
				t.Fatalf("corrupt log: %v", err)
			}
			if b, _ := os.ReadFile(path + ".log"); string(b) != bad {
				t.Fatal("a corrupt log was modified")
			}
		})
	}
}

func FuzzDecodeRecord(f *testing.F) {
	f.Add([]byte(`{"id":"e1","channel":"c","type":"t","time":5,"payload":"eA==","meta":{"a":1},"state":"pending","attempts":0,"token":0,"updated_at":5}`))
	f.Add([]byte(`{"id":"e1","type":"t","state":"nope"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeRecord(b)
		if err != nil {
			return
		}
		w, err := StoredWrite(&r, 0, 1)
		if err != nil {
			t.Fatalf("a decoded record does not encode: %v", err)
		}
		again, err := DecodeRecord(w.Value)
		if err != nil || again.ID != r.ID || again.State != r.State {
			t.Fatalf("round trip: %+v %v", again, err)
		}
	})
}
