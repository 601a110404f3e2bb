package wasm_test

import (
	"context"
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
// says it is not available, and anything else gets the usage line. Both
// must make exactly the same calls.
func TestButtonsExample(t *testing.T) {
	const usage = "post c1 usage: menu | remind <n> <text> | edit key="
	press := func(id, title string) *abi.Interaction { return &abi.Interaction{ID: id, Title: title, Message: "m-1"} }
	cases := []struct {
		text  string
		press *abi.Interaction
		calls []string
	}{
		{"menu", nil, []string{`post c1 Pick one key= buttons=[{"id":"yes","title":"Yes"},{"id":"no","title":"No"}]`}},
		// A press's text is its title: the bot answers the press, not the text.
		{"Yes", press("yes", "Yes"), []string{"post c1 you chose yes key="}},
		{"No", press("no", "No"), []string{"post c1 you chose no key="}},
		{"menu", press("menu-id", "menu"), []string{"post c1 you chose menu-id key="}},
		{"remind 90 take the cake out", nil, []string{"enqueue c1 take the cake out key= at=1764412890000", "post c1 ok key="}},
		{"remind 2592000 renew", nil, []string{"enqueue c1 renew key= at=1767004800000", "post c1 ok key="}},
		{"remind 0 now", nil, []string{usage}},
		{"remind 2592001 too late", nil, []string{usage}},
		{"remind x y", nil, []string{usage}},
		{"remind 5", nil, []string{usage}},
		{"edit", nil, []string{"post c1 edit is not available yet key="}},
		{"hello", nil, []string{usage}},
		{"Yes", nil, []string{usage}}, // the title typed, not pressed
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
			e, err := wasm.NewEngine(ctx, wasm.Config{Workers: 1, Logger: slog.New(slog.NewTextHandler(&confLog{}, nil))})
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
				ev := abi.Event{ID: "ev", Provider: "web", Chat: "c1", From: "u1", Text: c.text, Attempt: 1, ReceivedAt: 1764412800000}
				if c.press != nil {
					ev.Kind, ev.Interaction = abi.EventInteraction, c.press
				}
				if err := m.Handle(ctx, ev, env); err != nil {
					t.Errorf("%q: Handle: %v", c.text, err)
				}
				if strings.Join(env.calls, "\n") != strings.Join(c.calls, "\n") {
					t.Errorf("%q (press %v) made the calls\n\t%s\nwant\n\t%s", c.text, c.press, strings.Join(env.calls, "\n\t"), strings.Join(c.calls, "\n\t"))
				}
			}
		})
	}
}
