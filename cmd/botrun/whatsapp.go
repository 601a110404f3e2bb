package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/host"
	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/channel/whatsappweb"
	"github.com/botrun/botrun/host/config"
)

// pairClient, when set (tests), is the network client botrun whatsapp pair
// uses instead of whatsmeow's.
var pairClient whatsappweb.NewClientFunc

const whatsappUsage = "Usage: botrun whatsapp pair [-c bot.toml] --provider ID [--png FILE]"

// cmdWhatsApp links a WhatsApp Web device: botrun whatsapp pair.
func cmdWhatsApp(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "pair" {
		fmt.Fprintln(stderr, whatsappUsage)
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help") {
			return 0
		}
		return 2
	}
	fs, cfgPath := opsFlags("whatsapp pair", whatsappUsage+"\n\n"+
		"Links a new device to the WhatsApp account for the whatsapp-web provider ID: shows a QR code to\n"+
		"scan with the phone (WhatsApp > Settings > Linked devices > Link a device), or with pair_phone a\n"+
		"code to type there, and exits once the phone linked it. The device keys go where the provider's\n"+
		"store says (by default the bot's own SQLite or PostgreSQL backend). A running bot's leader\n"+
		"connects with the new device by itself.", stderr)
	id := fs.String("provider", "", "the id of a whatsapp-web [[channels]] entry")
	png := fs.String("png", "", "also write each QR code to this PNG file")
	if code, stop := parse(fs, args[1:], 0); stop {
		return code
	}
	cfg, err := config.Load(*cfgPath)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	var wa *whatsappweb.Config
	var ids []string
	for _, p := range cfg.Channels {
		if c, ok := p.Settings.(*whatsappweb.Config); ok {
			ids = append(ids, p.ID)
			if p.ID == *id {
				copied := *c
				copied.ID = p.ID
				wa = &copied
			}
		}
	}
	if wa == nil {
		fmt.Fprintf(stderr, "botrun whatsapp pair: --provider %q is not a whatsapp-web [[channels]] id in %s (whatsapp-web ids: %v)\n", *id, *cfgPath, ids)
		return 2
	}
	if pairClient != nil {
		wa.NewClient = pairClient
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	env := channel.Env{ID: wa.ID, KeyPrefix: host.Scope(cfg).ID() + "/",
		Logger: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	if cfg.Durability.Backend != "memory" {
		b, err := host.OpenBackend(ctx, cfg)
		if err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		defer b.Close()
		if kvb, ok := b.(interface{ Kv() durability.Kv }); ok {
			env.Kv = kvb.Kv()
		}
	}
	if err := whatsappweb.Pair(ctx, *wa, env, whatsappweb.PairOptions{Out: stdout, PNG: *png}); err != nil {
		fmt.Fprintf(stderr, "botrun whatsapp pair: %v\n", err)
		return 1
	}
	return 0
}
