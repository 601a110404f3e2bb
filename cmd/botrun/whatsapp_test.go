package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.mau.fi/whatsmeow/store"
	"go.mau.fi/whatsmeow/types"
	waLog "go.mau.fi/whatsmeow/util/log"

	"github.com/botrun/botrun/host"
	"github.com/botrun/botrun/host/channel/whatsappweb"
	"github.com/botrun/botrun/host/channel/whatsappweb/whatsappwebtest"
	"github.com/botrun/botrun/host/config"
	"github.com/botrun/botrun/internal/waitfor"
	"github.com/botrun/botrun/internal/wasmbuild"
)

// whatsappConfig writes a bot.toml with a SQLite backend, webchat and an
// unpaired whatsapp-web provider "wa".
func whatsappConfig(t *testing.T, module string) string {
	t.Helper()
	dir := t.TempDir()
	p := filepath.Join(dir, "bot.toml")
	src := fmt.Sprintf(`[bot]
module = %q
data_dir = %q

[durability]
backend = "sqlite"
path = %q

[[providers]]
id = "web"
type = "webchat"

[[providers]]
id = "wa"
type = "whatsapp-web"
`, module, testDataDir(), filepath.Join(dir, "data", "bot.db"))
	if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestWhatsAppPairCommand(t *testing.T) {
	net := whatsappwebtest.NewNetwork(types.NewJID("15550001111", types.DefaultUserServer))
	pairClient = func(dev *store.Device, log waLog.Logger) whatsappweb.Client { return net.NewClient(dev, log) }
	defer func() { pairClient = nil }()
	cfg := whatsappConfig(t, "unused.wasm")
	code, out, errs := runCLI("whatsapp", "pair", "-c", cfg, "--provider", "wa")
	if code != 0 || strings.Count(out, "Scan it with WhatsApp") != 2 || !strings.Contains(out, "linked as 15550001111:17@s.whatsapp.net") {
		t.Fatalf("pair: %d\n%s\n%s", code, out, errs)
	}
	if code, out, _ := runCLI("whatsapp", "pair", "-c", cfg, "--provider", "wa"); code != 0 || !strings.Contains(out, "already paired") {
		t.Fatalf("pair again: %d %s", code, out)
	}
	if code, _, errs := runCLI("whatsapp", "pair", "-c", cfg, "--provider", "web"); code != 2 || !strings.Contains(errs, `whatsapp-web ids: [wa]`) {
		t.Fatalf("pair a webchat: %d %s", code, errs)
	}
	if code, _, errs := runCLI("whatsapp", "link"); code != 2 || !strings.Contains(errs, whatsappUsage) {
		t.Fatalf("an unknown subcommand: %d %s", code, errs)
	}
}

// TestUnpairedWhatsAppWebLeavesTheBotRunning: a bot with an unpaired
// whatsapp-web provider starts, says how to pair, serves its other channels
// and stops cleanly.
func TestUnpairedWhatsAppWebLeavesTheBotRunning(t *testing.T) {
	cfg, err := config.Load(whatsappConfig(t, wasmbuild.Go(t, "../../examples/echo")))
	if err != nil {
		t.Fatal(err)
	}
	logs := &lockedBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	bot, err := host.New(ctx, cfg, host.Options{Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- bot.Run(ctx, ln, 10*time.Second) }()
	webchatEcho(t, "http://"+ln.Addr().String())
	line := "whatsapp-web wa: not paired: run botrun whatsapp pair -c <your bot.toml> --provider wa"
	if !waitfor.True(30*time.Second, func() bool { return strings.Contains(logs.String(), line) }) {
		t.Fatalf("no not-paired line:\n%s", logs.String())
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("stop: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the bot did not stop\n%s", logs.String())
	}
	if strings.Contains(logs.String(), "did not stop within the grace period") {
		t.Fatalf("a channel held the stop back:\n%s", logs.String())
	}
}
