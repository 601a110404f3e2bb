package answers

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/durability/memory"
	"github.com/botrun/botrun/durability/sqlite"
)

// TestJournal: an answer is read back as journaled, per record and call;
// a second Put replaces it; Purge takes what was journaled before its
// time and nothing after; on memory and on SQLite (as the bot's Kv).
func TestJournal(t *testing.T) {
	ctx := context.Background()
	for name, open := range map[string]func(t *testing.T) durability.Kv{
		"memory": func(*testing.T) durability.Kv { return memory.NewKv() },
		"sqlite": func(t *testing.T) durability.Kv {
			s, err := sqlite.OpenStore(filepath.Join(t.TempDir(), "bot.db"), nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		},
	} {
		t.Run(name, func(t *testing.T) {
			j := New(open(t), "bot/")
			if _, ok, err := j.Get(ctx, "web:m1", 1); ok || err != nil {
				t.Fatalf("an empty journal: ok %v, err %v", ok, err)
			}
			ok200 := Answer{Fingerprint: "f1", Response: &abi.FetchResponse{Status: 200, Body: "order 42: shipped"}, At: 1000}
			failed := Answer{Fingerprint: "f2", Error: &abi.FetchError{Reason: abi.FetchTimeout, Message: "no answer within 10s"}, At: 2000}
			for _, p := range []struct {
				rec string
				n   int
				a   Answer
			}{{"web:m1", 1, ok200}, {"web:m1", 2, failed}, {"web:m2/x", 1, Answer{Fingerprint: "f3", Response: &abi.FetchResponse{Status: 404}, At: 3000}}} {
				if err := j.Put(ctx, p.rec, p.n, p.a); err != nil {
					t.Fatal(err)
				}
			}
			if a, ok, err := j.Get(ctx, "web:m1", 1); !ok || err != nil || a.Fingerprint != "f1" || a.Response.Body != "order 42: shipped" {
				t.Fatalf("call 1: %+v %v %v", a, ok, err)
			}
			if a, _, _ := j.Get(ctx, "web:m1", 2); a.Error == nil || a.Error.Reason != abi.FetchTimeout || a.Response != nil {
				t.Fatalf("call 2: %+v", a)
			}
			// A diverged run's answer replaces the first.
			if err := j.Put(ctx, "web:m1", 1, Answer{Fingerprint: "f9", Response: &abi.FetchResponse{Status: 201}, At: 1500}); err != nil {
				t.Fatal(err)
			}
			if a, _, _ := j.Get(ctx, "web:m1", 1); a.Fingerprint != "f9" || a.Response.Status != 201 {
				t.Fatalf("replaced: %+v", a)
			}
			n, err := j.Purge(ctx, 2001)
			if err != nil || n != 2 {
				t.Fatalf("purge before 2001: %d, %v; want 2", n, err)
			}
			for _, c := range []struct {
				rec  string
				n    int
				kept bool
			}{{"web:m1", 1, false}, {"web:m1", 2, false}, {"web:m2/x", 1, true}} {
				if _, ok, _ := j.Get(ctx, c.rec, c.n); ok != c.kept {
					t.Errorf("%s call %d after the purge: kept %v, want %v", c.rec, c.n, ok, c.kept)
				}
			}
		})
	}
	if k := Key("web:m1", 3); k != "web:m1:fetch:3" {
		t.Fatalf("Key = %q", k)
	}
}
