package ops

import (
	"context"
	"strings"

	"github.com/botrun/botrun/host/internal/answers"
)

// Call is one API call of an inbound record's turn as the journal of
// answers holds it: what an operator sees of it (never its headers, and
// of its body a short preview).
type Call struct {
	N      int    `json:"n"`
	API    string `json:"api"`
	Method string `json:"method"`
	// Path is without its query.
	Path string `json:"path"`
	// Status is the API's answer; Failed the reason it got none
	// (refused, connection, timeout, too-large) and Message its message.
	Status  int    `json:"status,omitempty"`
	Failed  string `json:"failed,omitempty"`
	Message string `json:"message,omitempty"`
	// At is when the answer was journaled (Unix ms), TookMs how long the
	// call took.
	At     int64 `json:"at"`
	TookMs int64 `json:"took_ms"`
	// Preview is the body's first 120 characters (text bodies only).
	Preview string `json:"preview,omitempty"`
}

// previewRunes is how much of a body Call.Preview shows.
const previewRunes = 120

// Calls lists the API calls of inbound record id whose answers were
// journaled (calls to an API with journal = false, and calls refused
// before they were made, are not), in call order.
func (op *Operator) Calls(ctx context.Context, id string) ([]Call, error) {
	if op.o.Kv == nil {
		return nil, nil
	}
	max := op.o.MaxFetches
	if max <= 0 {
		max = 16
	}
	got, err := answers.New(op.o.Kv, op.o.Scope, op.in).Calls(ctx, id, max)
	out := make([]Call, 0, len(got))
	for _, a := range got {
		c := Call{N: a.N, API: a.API, Method: a.Method, Path: a.Path, At: a.At, TookMs: a.TookMs}
		switch {
		case a.Error != nil:
			c.Failed, c.Message = a.Error.Reason, a.Error.Message
		case a.Response != nil:
			c.Status = a.Response.Status
			c.Preview = preview(a.Response.Body)
		}
		out = append(out, c)
	}
	return out, err
}

// preview is body's first previewRunes characters, "…" when cut.
func preview(body string) string {
	n := 0
	for i := range body {
		if n == previewRunes {
			return strings.ToValidUTF8(body[:i], "") + "…"
		}
		n++
	}
	return strings.ToValidUTF8(body, "")
}

// PurgeAnswers deletes the API calls' answers journaled before before (Unix
// ms), as durability.retention does beside the done records: botrun purge
// --before runs it with the records' purge.
func (op *Operator) PurgeAnswers(ctx context.Context, before int64) (int, error) {
	if op.o.Kv == nil {
		return 0, nil
	}
	return answers.New(op.o.Kv, op.o.Scope, op.in).Purge(ctx, before)
}
