package telegram

import (
	"context"
	"errors"
	"testing"

	"github.com/botrun/botrun/host/channel"
)

// TestEditAndTyping: an edit changes a sent message (an edit to the same
// text is the edit already made); an unknown message is the API's error;
// typing sends the chat action.
func TestEditAndTyping(t *testing.T) {
	p, api, _ := setup(t, false)
	ctx := context.Background()
	ref, err := p.Send(ctx, channel.Outbound{Chat: "42", Text: "draft"})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Edit(ctx, "42", ref, "final"); err != nil {
		t.Fatalf("edit: %v", err)
	}
	if got := api.Sent[len(api.Sent)-1]["text"]; got != "final" {
		t.Fatalf("the message reads %q after the edit", got)
	}
	if err := p.Edit(ctx, "42", ref, "final"); err != nil {
		t.Fatalf("the same edit again: %v (Telegram's \"not modified\" is the edit made)", err)
	}
	if err := p.Edit(ctx, "42", "999", "x"); err == nil {
		t.Fatal("an edit of an unknown message succeeded")
	}
	if err := p.Edit(ctx, "42", "not-a-number", "x"); !errors.Is(err, channel.ErrUnsupportedContent) {
		t.Fatalf("an edit of a non-Telegram ref: %v", err)
	}
	if err := p.Typing(ctx, "42", "7"); err != nil {
		t.Fatal(err)
	}
	api.Lock()
	defer api.Unlock()
	if len(api.Actions) != 1 || api.Actions[0] != "42:typing" {
		t.Fatalf("chat actions %v", api.Actions)
	}
}
