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

// hookRow is one call of a send hook and what every SDK's conformance guest
// must answer (examples/CONFORMANCE.md, "Send hooks").
type hookRow struct {
	name  string
	after bool
	hook  func(h *abi.SendHook)
	// cancel and rewrite are before_send's expected answer (rewrite as the
	// host's re-encoded SendRequest; "" for none).
	cancel  bool
	rewrite string
	// handlerErr is the hook's expected HANDLER_ERROR message.
	handlerErr string
	logs       []string
}

const hookTime = 1764412800000

var hookRows = []hookRow{
	{name: "before/unchanged", hook: func(h *abi.SendHook) { h.Text = "hi" }},
	{name: "before/same-text-no-rewrite", hook: func(h *abi.SendHook) { h.Text = "hook-same x" }},
	{name: "before/cancel", hook: func(h *abi.SendHook) { h.Text = "hook-cancel" }, cancel: true},
	{name: "before/fail", hook: func(h *abi.SendHook) { h.Text = "hook-fail" }, handlerErr: "hook failed"},
	{name: "before/rewrite", hook: func(h *abi.SendHook) { h.Text = "hook-rewrite c2 <é&>" },
		rewrite: `{"chat":"c2","text":"<é&>","media":null,"idempotency_key":""}`},
	{name: "before/rewrite-keeps-media-and-buttons", hook: func(h *abi.SendHook) {
		h.Text = "hook-rewrite c1 hello"
		h.Media = &abi.Media{Type: "image", URL: "https://example.com/a.png", Caption: "cap"}
		h.Buttons = []abi.Button{{ID: "yes", Title: "Yes"}, {Title: "Docs", URL: "https://example.com/docs"}}
	}, rewrite: `{"chat":"c1","text":"hello","media":{"type":"image","url":"https://example.com/a.png","caption":"cap"},"idempotency_key":"","buttons":[{"id":"yes","title":"Yes"},{"title":"Docs","url":"https://example.com/docs"}]}`},
	{name: "before/rewrite-keeps-list", hook: func(h *abi.SendHook) {
		h.Text = "hook-rewrite c1 menu"
		h.List = &abi.List{Button: "Open", Sections: []abi.ListSection{{Title: "Drinks", Rows: []abi.ListRow{{ID: "tea", Title: "Tea", Description: "hot"}, {ID: "c", Title: "C"}}}}}
	}, rewrite: `{"chat":"c1","text":"menu","media":null,"idempotency_key":"","list":{"button":"Open","sections":[{"title":"Drinks","rows":[{"id":"tea","title":"Tea","description":"hot"},{"id":"c","title":"C"}]}]}}`},
	{name: "before/rewrite-refused", hook: func(h *abi.SendHook) { h.Text = "hook-rewrite c1 -" },
		handlerErr: "botrun.rewrite: BAD_PAYLOAD", logs: []string{"guest passed a bad payload", "func=rewrite"}},
	{name: "before/probe", hook: func(h *abi.SendHook) {
		h.Text, h.At = "hook-probe", hookTime+5000
		h.Media = &abi.Media{Type: "image", Ref: "r1"}
		h.Buttons = []abi.Button{{ID: "a", Title: "A"}, {ID: "b", Title: "B"}}
	}, rewrite: `{"chat":"c1","text":"hook=before_send event=ev provider=web chat=c1 key=ev:1 at=1764412805000 time=1764412800000 now=1764412800000 media=image buttons=2 list=- state=UNSUPPORTED send=UNSUPPORTED","media":{"type":"image","ref":"r1"},"idempotency_key":"","buttons":[{"id":"a","title":"A"},{"id":"b","title":"B"}]}`},
	{name: "after/log", after: true, hook: func(h *abi.SendHook) { h.Text, h.Ref, h.Time = "hi there", "7", hookTime+412 },
		logs: []string{"after_send key=ev:1 ref=7 chat=c1 text=hi there time=1764412800412"}},
	{name: "after/fail", after: true, hook: func(h *abi.SendHook) { h.Text = "hook-fail" }, handlerErr: "hook failed"},
}

// TestConformanceHooks runs every SDK's send hooks (SPEC.md section 4.7)
// through the same table.
func TestConformanceHooks(t *testing.T) {
	for _, g := range conformanceGuests {
		t.Run(g.lang, func(t *testing.T) {
			m, logs := loadLogged(t, g.build(t))
			ctx := context.Background()
			var err error
			if before, after := m.Hooks(); !before || !after {
				t.Fatalf("Hooks() = %v, %v: the %s conformance guest exports both", before, after, g.lang)
			}
			for _, row := range hookRows {
				t.Run(row.name, func(t *testing.T) {
					h := abi.SendHook{Event: "ev", Provider: "web", Chat: "c1", Key: "ev:1", Time: hookTime}
					row.hook(&h)
					logs.take()
					var out wasm.BeforeSend
					if row.after {
						err = m.AfterSend(ctx, h)
					} else {
						out, err = m.BeforeSend(ctx, h)
					}
					var herr *wasm.HandlerError
					switch {
					case row.handlerErr != "":
						if !errors.As(err, &herr) || herr.Message != row.handlerErr {
							t.Errorf("%s: err = %v, want the handler error %q", g.lang, err, row.handlerErr)
						}
					case err != nil:
						t.Errorf("%s: %v", g.lang, err)
					}
					if out.Cancel != row.cancel {
						t.Errorf("%s: cancel = %v, want %v", g.lang, out.Cancel, row.cancel)
					}
					got := ""
					if out.Rewrite != nil {
						got = exactJSON(out.Rewrite)
					}
					if got != row.rewrite {
						t.Errorf("%s: rewrite\n\t%s\nwant\n\t%s", g.lang, got, row.rewrite)
					}
					l := logs.take()
					for _, want := range row.logs {
						if !strings.Contains(l, want) {
							t.Errorf("%s: the log lacks %q:\n%.2000s", g.lang, want, l)
						}
					}
				})
			}
		})
	}
}

// TestNoHooksNoExports: a module without send hooks (every SDK's echo
// example) exports none, so the host runs nothing and journals no
// after_send record for its sends.
func TestNoHooksNoExports(t *testing.T) {
	ctx := context.Background()
	e, err := wasm.NewEngine(ctx, wasm.Config{Workers: 1, CacheDir: wasm.TestCacheDir, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	for lang, build := range map[string]func(t *testing.T) string{
		"go": func(t *testing.T) string { return wasmbuild.Go(t, "../../examples/echo") },
		"c": func(t *testing.T) string {
			return wasmbuild.C(t, "../../examples/c-echo", "echo.c", "../../guest-sdk/c/botrun.c")
		},
		"rust":           func(t *testing.T) string { return wasmbuild.Rust(t, "../../examples/rust-echo") },
		"assemblyscript": func(t *testing.T) string { return wasmbuild.AssemblyScript(t, "../../examples/as-echo") },
	} {
		t.Run(lang, func(t *testing.T) {
			m, err := e.Load(ctx, build(t))
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close(ctx)
			if before, after := m.Hooks(); before || after {
				t.Errorf("the %s echo example exports send hooks: before %v, after %v", lang, before, after)
			}
			out, err := m.BeforeSend(ctx, abi.SendHook{Key: "k", Text: "hook-cancel"})
			if err != nil || out.Cancel || out.Rewrite != nil {
				t.Errorf("BeforeSend without the export = %+v, %v; want the send unchanged", out, err)
			}
		})
	}
}
