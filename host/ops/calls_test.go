package ops

import (
	"context"
	"strings"
	"testing"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/durability/memory"
	"github.com/botrun/botrun/host/internal/answers"
)

// TestCallsAndPurgeAnswers: an operator sees a record's journaled calls in
// call order, with a preview of the body cut at 120 characters and a
// failure's reason; PurgeAnswers deletes what was journaled before its cut
// and nothing after.
func TestCallsAndPurgeAnswers(t *testing.T) {
	ctx := context.Background()
	kv := memory.NewKv()
	j := answers.New(kv, "bot/")
	long := strings.Repeat("é", 200)
	for _, p := range []struct {
		rec string
		n   int
		a   answers.Answer
	}{
		{"web:m1", 2, answers.Answer{Fingerprint: "f2", API: "crm", Method: "POST", Path: "/orders", Error: &abi.FetchError{Reason: abi.FetchTimeout, Message: "no answer"}, At: 2000, TookMs: 10000}},
		{"web:m1", 1, answers.Answer{Fingerprint: "f1", API: "crm", Method: "GET", Path: "/orders/42", Response: &abi.FetchResponse{Status: 200, Body: long}, At: 1000, TookMs: 12}},
		{"web:m2", 1, answers.Answer{Fingerprint: "f3", API: "crm", Method: "GET", Path: "/x", Response: &abi.FetchResponse{Status: 404}, At: 5000}},
	} {
		if err := j.Put(ctx, p.rec, p.n, p.a); err != nil {
			t.Fatal(err)
		}
	}
	op := New(Options{Kv: kv, Scope: "bot/"})
	calls, err := op.Calls(ctx, "web:m1")
	if err != nil || len(calls) != 2 {
		t.Fatalf("calls of web:m1: %+v, %v", calls, err)
	}
	if c := calls[0]; c.N != 1 || c.Method != "GET" || c.Path != "/orders/42" || c.Status != 200 || c.TookMs != 12 ||
		c.Preview != strings.Repeat("é", 120)+"…" {
		t.Fatalf("call 1: %+v", c)
	}
	if c := calls[1]; c.N != 2 || c.Failed != "timeout" || c.Message != "no answer" || c.Status != 0 || c.Preview != "" {
		t.Fatalf("call 2: %+v", c)
	}
	if n, err := op.PurgeAnswers(ctx, 3000); err != nil || n != 2 {
		t.Fatalf("PurgeAnswers(3000) = %d, %v; want 2", n, err)
	}
	if calls, _ := op.Calls(ctx, "web:m1"); len(calls) != 0 {
		t.Fatalf("web:m1's answers after the purge: %+v", calls)
	}
	if calls, _ := op.Calls(ctx, "web:m2"); len(calls) != 1 {
		t.Fatalf("web:m2's answer, journaled after the cut, was purged: %+v", calls)
	}
}
