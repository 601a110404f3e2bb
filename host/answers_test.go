package host

import (
	"context"
	"testing"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/host/internal/answers"
)

// TestAnswersOnEveryBackend: the journal of API answers on the Kv of every
// backend configuration the bot runs on: an answer is read back as
// journaled, per record and call; the same request replays it (marked
// replayed), another does not; a diverged run's Put replaces it; Purge
// takes what was journaled before its time, and nothing after or of another
// bot.
func TestAnswersOnEveryBackend(t *testing.T) {
	ctx := context.Background()
	for name, nb := range backends {
		t.Run(name, func(t *testing.T) {
			b := nb(t)
			kvb, ok := b.(interface{ Kv() durability.Kv })
			if !ok {
				t.Fatalf("the %s backend keeps no Kv: its API answers cannot be journaled", name)
			}
			bot := uniquePrefix("answers")
			j, other := answers.New(kvb.Kv(), bot, nil), answers.New(kvb.Kv(), bot+"other/", nil)
			if _, ok, err := j.Get(ctx, "web:m1", 1); ok || err != nil {
				t.Fatalf("an empty journal: ok %v, err %v", ok, err)
			}
			ok200 := answers.Answer{Fingerprint: "f1", Response: &abi.FetchResponse{Status: 200, Headers: map[string]string{"Content-Type": "text/plain"}, Body: "order 42: shipped"}, At: 1000}
			failed := answers.Answer{Fingerprint: "f2", Error: &abi.FetchError{Reason: abi.FetchTimeout, Message: "no answer within 10s"}, At: 2000}
			for _, p := range []struct {
				j   *answers.Journal
				rec string
				n   int
				a   answers.Answer
			}{
				{j, "web:m1", 1, ok200}, {j, "web:m1", 2, failed},
				{j, "web:m2/x", 1, answers.Answer{Fingerprint: "f3", Response: &abi.FetchResponse{Status: 404}, At: 3000}},
				{other, "web:m1", 1, ok200},
			} {
				if err := p.j.Put(ctx, p.rec, p.n, p.a); err != nil {
					t.Fatal(err)
				}
			}
			a, ok, err := j.Get(ctx, "web:m1", 1)
			if !ok || err != nil {
				t.Fatalf("call 1: %v %v", ok, err)
			}
			if res, ok, err := a.Replay("f1"); !ok || err != nil || !res.Replayed || res.Status != 200 || res.Body != "order 42: shipped" || res.Headers["Content-Type"] != "text/plain" {
				t.Fatalf("call 1 replayed: %+v %v %v", res, ok, err)
			}
			if _, ok, _ := a.Replay("f-other"); ok {
				t.Fatal("another request was answered from call 1's answer")
			}
			a, _, _ = j.Get(ctx, "web:m1", 2)
			if _, ok, err := a.Replay("f2"); !ok || err == nil || a.Error.Reason != abi.FetchTimeout || a.Response != nil {
				t.Fatalf("call 2: %+v (replay: %v, %v)", a, ok, err)
			}
			// A diverged run's answer replaces the first.
			if err := j.Put(ctx, "web:m1", 1, answers.Answer{Fingerprint: "f9", Response: &abi.FetchResponse{Status: 201}, At: 1500}); err != nil {
				t.Fatal(err)
			}
			if a, _, _ := j.Get(ctx, "web:m1", 1); a.Fingerprint != "f9" || a.Response.Status != 201 {
				t.Fatalf("replaced: %+v", a)
			}
			if n, err := j.Purge(ctx, 2001); err != nil || n != 2 {
				t.Fatalf("purge before 2001: %d, %v; want 2", n, err)
			}
			for _, c := range []struct {
				j    *answers.Journal
				rec  string
				n    int
				kept bool
			}{{j, "web:m1", 1, false}, {j, "web:m1", 2, false}, {j, "web:m2/x", 1, true}, {other, "web:m1", 1, true}} {
				if _, ok, _ := c.j.Get(ctx, c.rec, c.n); ok != c.kept {
					t.Errorf("%s call %d after the purge: kept %v, want %v", c.rec, c.n, ok, c.kept)
				}
			}
		})
	}
	if k := answers.Key("web:m1", 3); k != "web:m1:fetch:3" {
		t.Fatalf("Key = %q", k)
	}
}
