// Command botrun runs a durable WebAssembly bot described by a bot.toml.
//
//	botrun bot.toml            run the bot (same as botrun run bot.toml)
//	botrun check bot.toml      validate the config and the module
//	botrun version             print the version
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/botrun/botrun/host"
	"github.com/botrun/botrun/host/admin"
	"github.com/botrun/botrun/host/config"
	"github.com/botrun/botrun/host/dryrun"
	"github.com/botrun/botrun/host/wasm"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

func main() {
	// A dry run's candidate compiles in a child process of this binary.
	dryrun.ServeCompileChild()
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `botrun runs a durable WebAssembly bot.

Usage:
  botrun [run] bot.toml     run the bot described by bot.toml
  botrun check bot.toml     validate bot.toml and its module; exit 1 with the reasons
  botrun new --lang L DIR   scaffold a bot in go, rust, c or assemblyscript
  botrun test [FILE|DIR]    run conversation tests against the module (-m bot.wasm, --crash, --json, -run, -update)
  botrun inbox list         list inbound records      (-c bot.toml, --state, --chat, --json)
  botrun outbox list        list sends                (-c bot.toml, --state, --chat, --json)
  botrun status             the running bot, its queues and dead letters, leaders and leases (-c bot.toml, --json)
  botrun replay ID          process an inbound record again (--wait 30s prints the outcome)
  botrun replay --dry-run --module NEW.wasm
                            diff what NEW would send against the journal (--since, --chat, --provider, --json)
  botrun retry KEY          send a dead, failed or unknown send again (--wait 30s prints the outcome)
  botrun discard KEY        forget a send (cancels a scheduled one)
  botrun log --chat C       a chat's delivered messages, in and out (-c bot.toml, --limit, --json)
  botrun send TEXT          journal a send for the running bot and wait for it (-c, --provider, --chat, --key, --at, --wait)
  botrun broadcast TEXT     journal one send per chat of a file (-c, --provider, --chats, --key-prefix, --at)
  botrun purge --before D   delete done inbound and sent outbound records older than D
  botrun purge --dead       delete the dead letters: dead inbound records, dead and unknown sends (--before D or --all)
  botrun whatsapp pair      link a WhatsApp Web device (-c bot.toml, --provider ID, --png FILE)
  botrun version            print the version
  botrun help               show this help

Every command takes --help.
`

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	case "version":
		return cmdVersion(args[1:], stdout, stderr)
	case "check":
		return cmdCheck(args[1:], stdout, stderr)
	case "run":
		return cmdRun(args[1:], stdout, stderr)
	case "new":
		return cmdNew(args[1:], stdout, stderr)
	case "test":
		return cmdTest(args[1:], stdout, stderr)
	case "inbox":
		return cmdInbox(args[1:], stdout, stderr)
	case "outbox":
		return cmdOutbox(args[1:], stdout, stderr)
	case "status":
		return cmdStatus(args[1:], stdout, stderr)
	case "replay":
		return cmdReplay(args[1:], stdout, stderr)
	case "retry":
		return cmdRetry(args[1:], stdout, stderr)
	case "discard":
		return cmdDiscard(args[1:], stdout, stderr)
	case "purge":
		return cmdPurge(args[1:], stdout, stderr)
	case "send":
		return cmdSend(args[1:], stdout, stderr)
	case "log":
		return cmdLog(args[1:], stdout, stderr)
	case "broadcast":
		return cmdBroadcast(args[1:], stdout, stderr)
	case "whatsapp":
		return cmdWhatsApp(args[1:], stdout, stderr)
	}
	if strings.HasPrefix(args[0], "-") || strings.HasSuffix(args[0], ".toml") || fileExists(args[0]) {
		return cmdRun(args, stdout, stderr)
	}
	fmt.Fprintf(stderr, "botrun: unknown command %q\n\n%s", args[0], usage)
	return 2
}

// printURLs tells the user where the chat page, the console and the
// metrics are, and how to turn on what is off.
func printURLs(w io.Writer, cfg *config.Config, main net.Addr, adminLn net.Listener) {
	for _, c := range cfg.Channels {
		if c.Type == "webchat" {
			fmt.Fprintf(w, "botrun: chat page  http://%s/\n", main)
			break
		}
	}
	admin := main
	if adminLn != nil {
		admin = adminLn.Addr()
	}
	switch {
	case cfg.Admin.Token != "":
		fmt.Fprintf(w, "botrun: console    http://%s/admin/ (sign in with [admin] token)\n", admin)
		fmt.Fprintf(w, "botrun: metrics    http://%s/metrics (bearer [admin] token%s)\n", admin, map[bool]string{true: " or none: metrics_public", false: ""}[cfg.Admin.MetricsPublic])
	case cfg.Admin.MetricsPublic:
		fmt.Fprintf(w, "botrun: metrics    http://%s/metrics\n", admin)
		fmt.Fprintln(w, "botrun: console off: set [admin] token in bot.toml (use ${ENV})")
	default:
		fmt.Fprintln(w, "botrun: console and metrics off: set [admin] token in bot.toml (use ${ENV})")
	}
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}

// flags builds a command's flag set with a --help text.
func flags(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "%s\n", synopsis)
		fs.PrintDefaults()
	}
	return fs
}

// parse parses args; it returns an exit code when the command should stop
// (wantArgs < 0: any number of arguments).
func parse(fs *flag.FlagSet, args []string, wantArgs int) (int, bool) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0, true
		}
		return 2, true
	}
	if wantArgs >= 0 && fs.NArg() != wantArgs {
		fs.Usage()
		return 2, true
	}
	return 0, false
}

func cmdVersion(args []string, stdout, stderr io.Writer) int {
	fs := flags("version", "Usage: botrun version\n\nPrints botrun's version and the Go version it was built with.", stderr)
	if code, stop := parse(fs, args, 0); stop {
		return code
	}
	rev := ""
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				rev = " (" + s.Value[:12] + ")"
			}
		}
	}
	fmt.Fprintf(stdout, "botrun %s%s, ABI v1, %s\n", version, rev, strings.TrimPrefix(goVersion(), "go"))
	return 0
}

func goVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		return bi.GoVersion
	}
	return "unknown"
}

func cmdCheck(args []string, stdout, stderr io.Writer) int {
	fs := flags("check", "Usage: botrun check bot.toml\n\nValidates bot.toml and compiles and validates its module against ABI v1.\nExit status 0 when both are good, 1 with the reasons otherwise.", stderr)
	if code, stop := parse(fs, args, -1); stop {
		return code
	}
	if fs.NArg() != 1 {
		fmt.Fprintf(stderr, "botrun check: one config file, not %d: botrun check bot.toml\n", fs.NArg())
		return 2
	}
	cfg, err := config.Load(fs.Arg(0))
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	for _, d := range cfg.Deprecations {
		fmt.Fprintln(stderr, "warning:", d)
	}
	ctx := context.Background()
	engine, err := wasm.NewEngine(ctx, wasm.Config{
		Workers: 1, MaxMemory: int64(cfg.Bot.MaxMemory), HandlerTimeout: cfg.Bot.HandlerTimeout.D(),
		CacheDir: filepath.Join(cfg.Bot.DataDir, "wasm-cache"),
		Logger:   slog.New(slog.NewTextHandler(stderr, nil)),
	})
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	defer engine.Close(ctx)
	m, err := engine.Load(ctx, cfg.Bot.Module)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	fmt.Fprintf(stdout, "ok: %s: module %s (sha256 %s), %d channel(s), durability %s\n",
		fs.Arg(0), cfg.Bot.Module, m.Digest()[:12], len(cfg.Channels), cfg.Durability.Backend)
	return 0
}

func cmdRun(args []string, stdout, stderr io.Writer) int {
	fs := flags("run", "Usage: botrun [run] [flags] bot.toml\n\nRuns the bot until SIGINT or SIGTERM, then lets events in flight finish.", stderr)
	level := fs.String("log-level", "info", "log level: debug, info, warn or error")
	listen := fs.String("listen", "", "override [http] listen (host:port; port 0 picks a free one)")
	if code, stop := parse(fs, args, 1); stop {
		return code
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(*level)); err != nil {
		fmt.Fprintf(stderr, "botrun: --log-level %q: want debug, info, warn or error\n", *level)
		return 2
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: lvl}))
	cfg, err := config.Load(fs.Arg(0))
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	for _, d := range cfg.Deprecations {
		logger.Warn(d)
	}
	if *listen != "" {
		cfg.HTTP.Listen = *listen
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	tp, shutdownTracing, err := newTracerProvider(cfg.Tracing)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	grace := cfg.Bot.HandlerTimeout.D() + 5*time.Second
	defer func() {
		// After the bot stopped: its last spans are exported.
		sctx, cancel := context.WithTimeout(context.Background(), grace)
		defer cancel()
		if err := shutdownTracing(sctx); err != nil {
			logger.Warn("tracing: the last spans were not exported", "err", err)
		}
	}()
	bot, err := host.New(ctx, cfg, host.Options{Logger: logger, TracerProvider: tp})
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	var adminLn net.Listener
	if cfg.Admin.Listen != "" {
		if adminLn, err = net.Listen("tcp", cfg.Admin.Listen); err != nil {
			fmt.Fprintf(stderr, "%s: admin.listen %q: %v (is another botrun running? pick another port)\n", cfg.File, cfg.Admin.Listen, err)
			bot.Stop(ctx)
			return 1
		}
		logger.Info("admin API on its own address", "listen", adminLn.Addr().String())
	}
	admin.AttachWith(bot, admin.Options{Token: cfg.Admin.Token, MetricsPublic: cfg.Admin.MetricsPublic}, adminLn)
	if cfg.Admin.Token == "" {
		logger.Info("admin API off: set [admin] token to turn it on")
	}
	ln, err := net.Listen("tcp", cfg.HTTP.Listen)
	if err != nil {
		fmt.Fprintf(stderr, "%s: http.listen %q: %v (is another botrun running? pick another port)\n", cfg.File, cfg.HTTP.Listen, err)
		return 1
	}
	logger.Info("botrun is up", "listen", ln.Addr().String(), "config", cfg.File)
	printURLs(stdout, cfg, ln.Addr(), adminLn)
	if err := bot.Run(ctx, ln, grace); err != nil {
		logger.Error("stopped with an error", "err", err)
		return 1
	}
	logger.Info("stopped")
	return 0
}
