package dryrun

import (
	"context"
	"errors"
	"testing"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/durability/memory"
	"github.com/botrun/botrun/host/inputs"
	"github.com/botrun/botrun/host/internal/answers"
)

// TestFetchAnsweredFromTheJournal: a candidate's n-th call that asks what
// the original's n-th call asked gets the journaled answer (or failure);
// another call is never made: the guest gets a refusal and the record is
// "new API call"; past bot.max_fetches, TOO_LARGE.
func TestFetchAnsweredFromTheJournal(t *testing.T) {
	ctx := context.Background()
	j := answers.New(memory.NewKv(), "bot/", nil)
	order := abi.FetchRequest{API: "orders", Path: "/orders/42"}
	_, fp := answers.Call("web:m1", 1, order)
	if err := j.Put(ctx, "web:m1", 1, answers.Answer{Fingerprint: fp, Response: &abi.FetchResponse{Status: 200, Body: "shipped"}}); err != nil {
		t.Fatal(err)
	}
	slow := abi.FetchRequest{API: "orders", Path: "/orders/7"}
	_, fp2 := answers.Call("web:m1", 2, slow)
	if err := j.Put(ctx, "web:m1", 2, answers.Answer{Fingerprint: fp2, Error: &abi.FetchError{Reason: abi.FetchTimeout}}); err != nil {
		t.Fatal(err)
	}
	e := newEnv(abi.Event{ID: "web:m1"}, inputs.Record{}, 10, 10)
	e.answers, e.maxFetches = j, 4
	if res, err := e.Fetch(ctx, order); err != nil || res.Status != 200 || res.Body != "shipped" || !res.Replayed {
		t.Fatalf("call 1: %+v %v", res, err)
	}
	var failed *abi.FetchError
	if _, err := e.Fetch(ctx, slow); !errors.As(err, &failed) || failed.Reason != abi.FetchTimeout {
		t.Fatalf("call 2: %v, want the journaled timeout", err)
	}
	if e.newCall != "" {
		t.Fatalf("new call after two journaled ones: %s", e.newCall)
	}
	if _, err := e.Fetch(ctx, abi.FetchRequest{API: "llm", Method: "POST", Path: "/chat/completions"}); !errors.As(err, &failed) || failed.Reason != abi.FetchRefused {
		t.Fatalf("a new call: %v, want a refusal", err)
	}
	if e.newCall != "call 3 (POST llm /chat/completions)" {
		t.Fatalf("newCall = %q", e.newCall)
	}
	e.Fetch(ctx, order)
	if _, err := e.Fetch(ctx, order); err == nil {
		t.Fatal("a fifth call past max_fetches = 4 was answered")
	}
}
