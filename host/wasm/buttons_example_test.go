package wasm_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/host/wasm"
	"github.com/botrun/botrun/internal/wasmbuild"
)

// TestButtonsExample runs examples/buttons (Go) and examples/rust-buttons
// against the scripted host: "menu" posts reply buttons, a press is answered
// with its id, "remind" enqueues at the event's time plus n seconds, "edit"
// shows typing, sends "draft" and edits it (by the ref its send returned) to
// "final", or posts "final" where the channel cannot edit, and anything else
// gets the usage line. Both must make exactly the same calls.
func TestButtonsExample(t *testing.T) {
	const usage = "post c1 usage: menu | remind <n> <text> | edit key="
	press := func(id, title string) *abi.Interaction { return &abi.Interaction{ID: id, Title: title, Message: "m-1"} }
	draft := []string{"typing c1", "send c1 draft key=", "edit c1 r1 final"}
	redraft := append(draft[:3:3], "post c1 final key=")
	type example struct {
		text  string
		press *abi.Interaction
		calls []string
		// env scripts the host (nil: a healthy host with edit and typing);
		// handlerErr is the handler error the bot returns ("" for none).
		env        func(e *scripted)
		handlerErr string
	}
	cases := []example{
		{text: "menu", calls: []string{`post c1 Pick one key= buttons=[{"id":"yes","title":"Yes"},{"id":"no","title":"No"}]`}},
		// A press's text is its title: the bot answers the press, not the text.
		{text: "Yes", press: press("yes", "Yes"), calls: []string{"post c1 you chose yes key="}},
		{text: "No", press: press("no", "No"), calls: []string{"post c1 you chose no key="}},
		{text: "menu", press: press("menu-id", "menu"), calls: []string{"post c1 you chose menu-id key="}},
		{text: "remind 90 take the cake out", calls: []string{"enqueue c1 take the cake out key= at=1764412890000", "post c1 ok key="}},
		{text: "remind 2592000 renew", calls: []string{"enqueue c1 renew key= at=1767004800000", "post c1 ok key="}},
		{text: "remind 0 now", calls: []string{usage}},
		{text: "remind 2592001 too late", calls: []string{usage}},
		{text: "remind x y", calls: []string{usage}},
		{text: "remind 5", calls: []string{usage}},
		// Typing first; the scripted send answers sent with the ref r1,
		// which the edit names.
		{text: "edit", calls: draft},
		// WhatsApp: typing, no edit (UNSUPPORTED): the final text is a new
		// message.
		{text: "edit", calls: redraft, env: func(e *scripted) { e.editErr = wasm.ErrUnsupported }},
		// The channel refused the edit (CHANNEL_FAILED): logged, and the
		// final text is a new message.
		{text: "edit", calls: redraft, env: func(e *scripted) { e.editErr = errEditRefused }},
		// Twilio: neither; the refused typing does not stop the answer.
		{text: "edit", calls: redraft, env: func(e *scripted) { e.typingErr, e.editErr = wasm.ErrUnsupported, wasm.ErrUnsupported }},
		{text: "edit", calls: draft, env: func(e *scripted) { e.typingErr = errors.New("Forbidden: bot was blocked by the user") }},
		// A host without edit and typing.
		{text: "edit", calls: []string{"send c1 draft key=", "post c1 final key="}, env: func(e *scripted) { e.noEditor = true }},
		// A draft without a ref cannot be edited.
		{text: "edit", calls: []string{"typing c1", "send c1 draft key=", "post c1 final key="}, env: func(e *scripted) {
			e.send = []answer{{res: abi.SendResult{Status: abi.SendDeduped, Key: "ev:1", Error: "outcome unknown after a crash (on_ambiguous = skip)"}}}
		}},
		// A dead draft is the handler's error: nothing to edit.
		{text: "edit", calls: []string{"typing c1", "send c1 draft key="}, env: func(e *scripted) {
			e.send = []answer{{res: abi.SendResult{Status: abi.SendDead, Key: "ev:1", Error: "blocked"}}}
		}, handlerErr: "send ev:1 dead: blocked"},
		{text: "hello", calls: []string{usage}},
		{text: "Yes", calls: []string{usage}}, // the title typed, not pressed
	}
	for _, g := range []struct {
		lang  string
		build func(t *testing.T) string
	}{
		{"go", func(t *testing.T) string { return wasmbuild.Go(t, "../../examples/buttons") }},
		{"rust", func(t *testing.T) string { return wasmbuild.Rust(t, "../../examples/rust-buttons") }},
	} {
		t.Run(g.lang, func(t *testing.T) {
			path := g.build(t)
			ctx := context.Background()
			e, err := wasm.NewEngine(ctx, wasm.Config{Workers: 1, CacheDir: wasm.TestCacheDir, Logger: slog.New(slog.NewTextHandler(&confLog{}, nil))})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close(ctx)
			m, err := e.Load(ctx, path)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close(ctx)
			for _, c := range cases {
				env := &scripted{event: "ev", now: 1764412800000, state: map[string]string{}}
				if c.env != nil {
					c.env(env)
				}
				var host wasm.Env = env
				if env.noEditor {
					host = noEditor{env, env}
				}
				ev := abi.Event{ID: "ev", Provider: "web", Chat: "c1", From: "u1", Text: c.text, Attempt: 1, ReceivedAt: 1764412800000}
				if c.press != nil {
					ev.Kind, ev.Interaction = abi.EventInteraction, c.press
				}
				err := m.Handle(ctx, ev, host)
				var herr *wasm.HandlerError
				switch {
				case c.handlerErr != "":
					if !errors.As(err, &herr) || herr.Message != c.handlerErr {
						t.Errorf("%q: Handle: %v, want the handler error %q", c.text, err, c.handlerErr)
					}
				case err != nil:
					t.Errorf("%q: Handle: %v", c.text, err)
				}
				if strings.Join(env.calls, "\n") != strings.Join(c.calls, "\n") {
					t.Errorf("%q (press %v) made the calls\n\t%s\nwant\n\t%s", c.text, c.press, strings.Join(env.calls, "\n\t"), strings.Join(c.calls, "\n\t"))
				}
			}
		})
	}
}
