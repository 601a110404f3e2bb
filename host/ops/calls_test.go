package ops

import (
	"context"
	"strings"
	"testing"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/durability"
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
	j := answers.New(kv, "bot/", nil)
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

// TestPurgeAnswersKeepsThoseOfKeptRecords: the purge deletes the old
// answers of records that are gone, and keeps those of a record the inbox
// still holds (a dead letter a later replay reads them for).
func TestPurgeAnswersKeepsThoseOfKeptRecords(t *testing.T) {
	ctx := context.Background()
	backend := memory.New()
	scope := durability.Scope{Bot: "b"}
	j, err := backend.Open(ctx, scope)
	if err != nil {
		t.Fatal(err)
	}
	kv := backend.(interface{ Kv() durability.Kv }).Kv()
	l := durability.Lease{Owner: "i1", Now: 500, Until: 1500}
	if _, _, err := j.Inbox.Put(ctx, durability.InboxPut{ID: "web:dead", Provider: "web", Chat: "c1", Payload: []byte(`{}`)}, 500, &l); err != nil {
		t.Fatal(err)
	}
	if err := j.Inbox.Fail(ctx, "web:dead", 1, "trap", durability.FailOptions{Now: 600, Dead: true}); err != nil {
		t.Fatal(err)
	}
	op := New(Options{Journals: j, Kv: kv, Scope: scope.ID() + "/"})
	a := answers.New(kv, scope.ID()+"/", nil)
	for _, rec := range []string{"web:dead", "web:gone/x"} {
		if err := a.Put(ctx, rec, 1, answers.Answer{Fingerprint: "f", Response: &abi.FetchResponse{Status: 200}, At: 1000}); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := op.PurgeAnswers(ctx, 2000); err != nil || n != 1 {
		t.Fatalf("PurgeAnswers = %d, %v; want 1 (web:gone/x's)", n, err)
	}
	if calls, _ := op.Calls(ctx, "web:dead"); len(calls) != 1 {
		t.Fatal("the dead letter's answer was purged: its replay would call the API again")
	}
	if calls, _ := op.Calls(ctx, "web:gone/x"); len(calls) != 0 {
		t.Fatal("the answer of a record that is gone was kept")
	}
}
