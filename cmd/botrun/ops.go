package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"github.com/botrun/botrun/abi"
	"io"
	"net"
	"net/http"
	"os"
	"reflect"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/host"
	"github.com/botrun/botrun/host/config"
	"github.com/botrun/botrun/host/ops"
	"github.com/botrun/botrun/unit"
)

// opsFlags adds -c to a command's flags.
func opsFlags(name, synopsis string, stderr io.Writer) (*flag.FlagSet, *string) {
	fs := flags(name, synopsis, stderr)
	cfg := fs.String("c", "bot.toml", "the bot's config file")
	return fs, cfg
}

// openOperator opens the journals of the bot a config describes, from
// outside the running bot, and an operator over them. SQLite may be shared
// with a live bot; a file journal held by a live bot refuses; the memory
// backend has nothing outside its process.
func openOperator(path string, stderr io.Writer) (*ops.Operator, durability.Journals, func(), bool) {
	return openOperatorFor(path, false, stderr)
}

// openOperatorFor is openOperator; readOnly opens the journals only to read
// them where the backend can (SQLite: no lock, no write, and a file that is
// not there is an error rather than a new empty journal).
func openOperatorFor(path string, readOnly bool, stderr io.Writer) (*ops.Operator, durability.Journals, func(), bool) {
	cfg, j, kv, done, ok := openBackendFor(path, readOnly, stderr)
	if !ok {
		return nil, j, done, ok
	}
	return host.NewOperator(cfg, j, kv), j, done, ok
}

// openBackend opens the journals of the bot a config describes (see
// openOperator), and returns the config and the backend's Kv (nil when it
// keeps none).
func openBackend(path string, stderr io.Writer) (*config.Config, durability.Journals, durability.Kv, func(), bool) {
	return openBackendFor(path, false, stderr)
}

func openBackendFor(path string, readOnly bool, stderr io.Writer) (*config.Config, durability.Journals, durability.Kv, func(), bool) {
	cfg, j, b, err := openScope(path, readOnly)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return nil, durability.Journals{}, nil, nil, false
	}
	var kv durability.Kv
	if kvb, ok := b.(interface{ Kv() durability.Kv }); ok {
		kv = kvb.Kv()
	}
	return cfg, j, kv, func() { b.Close() }, true
}

// openScope opens the backend of the bot a config describes, from outside
// it, and its scope's journals; readOnly opens it for reading only where the
// backend can (SQLite: no lock, no write), as any client of a server
// otherwise. The config comes back with an error of the backend's.
func openScope(path string, readOnly bool) (*config.Config, durability.Journals, durability.Backend, error) {
	cfg, err := config.LoadBackend(path)
	if err != nil {
		return nil, durability.Journals{}, nil, err
	}
	if cfg.Durability.Backend == "memory" {
		return nil, durability.Journals{}, nil, fmt.Errorf("%s: durability.backend is memory: its journals live only inside the running bot (configure sqlite or file to inspect them from here)", path)
	}
	var b durability.Backend
	if ro, ok := cfg.Durability.Options.(durability.ReadOnlyOpener); ok && readOnly {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		b, err = ro.OpenReadOnly(ctx)
		if err != nil {
			err = fmt.Errorf("durability: open %s backend read-only: %w", cfg.Durability.Backend, err)
		}
	} else {
		b, err = host.OpenBackend(context.Background(), cfg)
	}
	if err != nil {
		return cfg, durability.Journals{}, nil, err
	}
	j, err := b.Open(context.Background(), host.Scope(cfg))
	if err != nil {
		b.Close()
		return cfg, durability.Journals{}, nil, err
	}
	return cfg, j, b, nil
}

func ms(t int64) string {
	if t == 0 {
		return "-"
	}
	return time.UnixMilli(t).UTC().Format("2006-01-02T15:04:05.000Z")
}

// listing is what differs between inbox list and outbox list.
type listing[R any] struct {
	name, doc string
	states    []string
	list      func(op *ops.Operator, f durability.ListFilter) ([]R, error)
	header    string
	row       func(r R) string
}

func cmdList[R any](l listing[R], args []string, stdout, stderr io.Writer) int {
	usage := "Usage: botrun " + l.name + " list [-c bot.toml] [--state S] [--chat C] [--limit N] [--json]"
	if len(args) == 0 || args[0] != "list" {
		switch {
		case len(args) > 0 && (args[0] == "-h" || args[0] == "--help"):
			fmt.Fprintln(stderr, usage)
			return 0
		case len(args) == 0:
			fmt.Fprintf(stderr, "botrun %s: what to do is missing: botrun %s list\n%s\n", l.name, l.name, usage)
		default:
			fmt.Fprintf(stderr, "botrun %s: unknown subcommand %q: botrun %s list\n%s\n", l.name, args[0], l.name, usage)
		}
		return 2
	}
	fs, cfgPath := opsFlags(l.name+" list", usage+"\n\n"+l.doc, stderr)
	state := fs.String("state", "", "only records in this state: "+strings.Join(l.states, ", "))
	chat := fs.String("chat", "", "only records of this chat")
	limit := fs.Int("limit", 0, "at most this many records (0: all)")
	asJSON := fs.Bool("json", false, "print JSON")
	if code, stop := parse(fs, args[1:], 0); stop {
		return code
	}
	if *state != "" && !slices.Contains(l.states, *state) {
		fmt.Fprintf(stderr, "botrun: --state %q: want one of %s\n", *state, strings.Join(l.states, ", "))
		return 2
	}
	op, _, done, ok := openOperatorFor(*cfgPath, true, stderr)
	if !ok {
		return 1
	}
	defer done()
	recs, err := l.list(op, durability.ListFilter{State: *state, Chat: *chat, Limit: *limit})
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	if *asJSON {
		return printJSON(stdout, recs)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, l.header)
	for _, r := range recs {
		fmt.Fprintln(tw, l.row(r))
	}
	tw.Flush()
	return 0
}

func states[S ~string](ss []S) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = string(s)
	}
	return out
}

func cmdInbox(args []string, stdout, stderr io.Writer) int {
	return cmdList(listing[durability.InboxRecord]{
		name: "inbox", doc: "Lists inbound records, oldest first. --state dead is the inbound dead-letter queue.",
		states: states(durability.InboxStates),
		list: func(op *ops.Operator, f durability.ListFilter) ([]durability.InboxRecord, error) {
			recs, err := op.ListInbox(context.Background(), f)
			return durability.WithoutInputs(recs), err // large, and they hold state values
		},
		header: "ID\tSTATE\tATTEMPTS\tCHAT\tCREATED\tERROR",
		row: func(r durability.InboxRecord) string {
			return fmt.Sprintf("%s\t%s\t%d\t%s\t%s\t%s", r.ID, r.State, r.Attempts, r.Chat, ms(r.CreatedAt), oneLine(r.Error))
		},
	}, args, stdout, stderr)
}

func cmdOutbox(args []string, stdout, stderr io.Writer) int {
	return cmdList(listing[durability.OutboxRecord]{
		name: "outbox", doc: "Lists sends, oldest first. --state dead is the outbound dead-letter queue; --state scheduled lists the sends held until a later time (botrun discard KEY cancels one).",
		states: states(durability.OutboxStates),
		list: func(op *ops.Operator, f durability.ListFilter) ([]durability.OutboxRecord, error) {
			return op.ListOutbox(context.Background(), f)
		},
		header: "KEY\tSTATE\tATTEMPTS\tCHAT\tREF\tCREATED\tERROR",
		row: func(r durability.OutboxRecord) string {
			return fmt.Sprintf("%s\t%s\t%d\t%s\t%s\t%s\t%s", r.Key, r.State, r.Attempts, r.Chat, r.Ref, ms(r.CreatedAt), oneLine(r.Error))
		},
	}, args, stdout, stderr)
}

// cmdOne runs an operator action on one record; with wait, the command
// takes --wait and waits up to it for the record's outcome.
func cmdOne(name, what, synopsis string, act func(op *ops.Operator, arg string) (string, error), wait func(op *ops.Operator, arg string, d time.Duration) (string, error), args []string, stdout, stderr io.Writer) int {
	fs, cfgPath := opsFlags(name, synopsis, stderr)
	var waitFor *time.Duration
	if wait != nil {
		waitFor = fs.Duration("wait", 0, "wait up to this long for the outcome and print it (e.g. 30s; 0: do not wait)")
	}
	pos, code, stop := parseInterleaved(fs, args)
	if stop {
		return code
	}
	switch {
	case len(pos) == 0:
		fmt.Fprintf(stderr, "botrun %s: the %s is missing (botrun %s list shows them)\n", name, what, strings.Split(what, " ")[0])
		fs.Usage()
		return 2
	case len(pos) > 1:
		fmt.Fprintf(stderr, "botrun %s: one %s at a time, not %d (%s)\n", name, what, len(pos), strings.Join(pos, " "))
		return 2
	}
	arg := pos[0]
	op, _, done, ok := openOperator(*cfgPath, stderr)
	if !ok {
		return 1
	}
	defer done()
	msg, err := act(op, arg)
	if err == nil && waitFor != nil && *waitFor > 0 {
		msg, err = wait(op, arg, *waitFor)
	}
	switch {
	case errors.Is(err, durability.ErrNotFound):
		fmt.Fprintf(stderr, "botrun %s: no %s %q (list them with botrun %s list)\n", name, what, arg, strings.Split(what, " ")[0])
		return 1
	case err != nil:
		fmt.Fprintf(stderr, "botrun %s: %v\n", name, err)
		return 1
	}
	fmt.Fprintln(stdout, msg)
	return 0
}

// settle reads a record every 50 ms until final says it settled, or d
// passed; it returns the last one read and whether it settled.
func settle[R any](d time.Duration, get func() (R, error), final func(R) bool) (R, bool, error) {
	deadline := time.Now().Add(d)
	for {
		r, err := get()
		if err != nil || final(r) {
			return r, err == nil, err
		}
		if time.Now().After(deadline) {
			return r, false, nil
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// sendOutcome waits up to d for the send key to settle and says how it did.
func sendOutcome(op *ops.Operator, key string, d time.Duration) (string, error) {
	rec, ok, err := settle(d, func() (durability.OutboxRecord, error) { return op.OutboxRecord(context.Background(), key) },
		func(r durability.OutboxRecord) bool { return r.State.Terminal() })
	switch {
	case err != nil:
		return "", err
	case !ok:
		return fmt.Sprintf("%s %s: not settled within %s (is the bot running? its sweeper sends it)", rec.State, key, d), nil
	case rec.State == durability.OutboxSent:
		return fmt.Sprintf("sent %s (ref %s)", key, rec.Ref), nil
	}
	return fmt.Sprintf("%s %s: %s", rec.State, key, rec.Error), nil
}

func cmdReplay(args []string, stdout, stderr io.Writer) int {
	for _, a := range args {
		if a == "--dry-run" || a == "-dry-run" || a == "--dry-run=true" || a == "-dry-run=true" {
			return cmdReplayDryRun(args, stdout, stderr)
		}
	}
	return cmdOne("replay", "inbox record", "Usage: botrun replay [-c bot.toml] [--wait 30s] ID\n\nProcesses a done, failed or dead inbound record again with a fresh attempt budget;\nits sends are answered from the outbox where already sent. The running bot's sweeper\ntakes it on its next sweep.\n(botrun replay --dry-run --module NEW.wasm tests a new module against the journal instead.)",
		func(op *ops.Operator, id string) (string, error) {
			if err := op.ReplayInbound(context.Background(), id); err != nil {
				return "", err
			}
			return fmt.Sprintf("replayed %s: the running bot's sweeper processes it (--wait 30s waits for the outcome)", id), nil
		},
		func(op *ops.Operator, id string, d time.Duration) (string, error) {
			rec, ok, err := settle(d, func() (durability.InboxRecord, error) { return op.InboxRecord(context.Background(), id) },
				func(r durability.InboxRecord) bool { return r.State.Terminal() })
			switch {
			case err != nil:
				return "", err
			case !ok:
				return fmt.Sprintf("%s %s: not processed within %s (is the bot running?)", rec.State, id, d), nil
			case rec.State == durability.InboxDead:
				return fmt.Sprintf("dead %s after %d attempts: %s", id, rec.Attempts, rec.Error), nil
			}
			return fmt.Sprintf("done %s (attempt %d)", id, rec.Attempts), nil
		}, args, stdout, stderr)
}

func cmdRetry(args []string, stdout, stderr io.Writer) int {
	return cmdOne("retry", "outbox record", "Usage: botrun retry [-c bot.toml] [--wait 30s] KEY\n\nSends a dead, failed or unknown send again.",
		func(op *ops.Operator, key string) (string, error) {
			if err := op.RetrySend(context.Background(), key); err != nil {
				return "", err
			}
			return fmt.Sprintf("retrying %s: the running bot's sweeper sends it (--wait 30s waits for the outcome)", key), nil
		}, sendOutcome, args, stdout, stderr)
}

func cmdDiscard(args []string, stdout, stderr io.Writer) int {
	return cmdOne("discard", "outbox record", "Usage: botrun discard [-c bot.toml] KEY\n\nForgets a send: a later send with the same key goes out again.",
		func(op *ops.Operator, key string) (string, error) {
			if err := op.Discard(context.Background(), key); err != nil {
				return "", err
			}
			return "discarded " + key, nil
		}, nil, args, stdout, stderr)
}

func cmdPurge(args []string, stdout, stderr io.Writer) int {
	fs, cfgPath := opsFlags("purge", "Usage: botrun purge [-c bot.toml] --before DURATION\n"+
		"       botrun purge [-c bot.toml] --dead (--before DURATION | --all)\n\n"+
		"Deletes the done inbound records and the sent outbound records completed more than\n"+
		"DURATION ago (\"7d\", \"12h\"), and the API calls' answers journaled before then,\n"+
		"as durability.retention does. Dead letters (dead inbound\n"+
		"records, dead and unknown sends) are kept: --dead deletes them instead, those completed\n"+
		"more than DURATION ago or, with --all, every one, each send with the later parts of its\n"+
		"text (as botrun discard).", stderr)
	before := fs.String("before", "", "age of the records to delete, e.g. 7d")
	dead := fs.Bool("dead", false, "delete the dead letters (dead inbound records, dead and unknown sends) instead")
	all := fs.Bool("all", false, "with --dead: delete every dead letter, whatever its age")
	if code, stop := parse(fs, args, 0); stop {
		return code
	}
	switch {
	case *all && !*dead:
		fmt.Fprintln(stderr, "botrun purge: --all goes with --dead (botrun purge --dead --all deletes every dead letter); done and sent records take --before DURATION")
		return 2
	case *all && *before != "":
		fmt.Fprintln(stderr, "botrun purge: --all and --before exclude each other: --dead --before 7d deletes the dead letters older than 7 days, --dead --all every one")
		return 2
	case *dead && !*all && *before == "":
		fmt.Fprintln(stderr, "botrun purge: --dead needs --before DURATION (e.g. --before 7d) or --all to delete every dead letter")
		return 2
	}
	cut, since := time.Now().UnixMilli()+1, ""
	if !*all {
		d, err := unit.ParseDuration(*before)
		if *before == "" || err != nil {
			fmt.Fprintf(stderr, "botrun purge: --before DURATION is required, e.g. --before 7d (%q: %v)\n", *before, err)
			return 2
		}
		cut = time.Now().Add(-d).UnixMilli()
		since = " completed before " + ms(cut)
	}
	op, j, done, ok := openOperator(*cfgPath, stderr)
	if !ok {
		return 1
	}
	defer done()
	ctx := context.Background()
	if *dead {
		in, out, err := op.PurgeDeadLetters(ctx, cut)
		if err != nil {
			fmt.Fprintf(stderr, "botrun purge: %v (deleted %d inbox and %d outbox records before it; run it again)\n", err, in, out)
			return 1
		}
		fmt.Fprintf(stdout, "purged %d dead inbox records and %d dead or unknown outbox records%s\n", in, out, since)
		return 0
	}
	in, err := j.Inbox.Purge(ctx, cut)
	if err != nil {
		fmt.Fprintf(stderr, "botrun purge: %v\n", err)
		return 1
	}
	out, err := j.Outbox.Purge(ctx, cut)
	if err != nil {
		fmt.Fprintf(stderr, "botrun purge: %v (deleted %d done inbox records before it)\n", err, in)
		return 1
	}
	calls, err := op.PurgeAnswers(ctx, cut)
	if err != nil {
		fmt.Fprintf(stderr, "botrun purge: %v (deleted %d done inbox and %d sent outbox records before it)\n", err, in, out)
		return 1
	}
	fmt.Fprintf(stdout, "purged %d done inbox records, %d sent outbox records and %d API answers%s; dead letters are kept (botrun purge --dead deletes them)\n", in, out, calls, since)
	return 0
}

// printJSON prints v for tools and people: an empty list as [], times
// (the records' *_at and lease_until, Unix milliseconds inside) as RFC 3339,
// and a payload that is JSON as JSON (not base64).
func printJSON(w io.Writer, v any) int {
	b, err := json.Marshal(v)
	if err != nil {
		return 1
	}
	var tree any
	if err := json.Unmarshal(b, &tree); err != nil {
		return 1
	}
	if tree == nil && reflect.ValueOf(v).Kind() == reflect.Slice {
		tree = []any{}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(readable(tree)); err != nil {
		return 1
	}
	return 0
}

// readable rewrites the times and payloads of a decoded JSON value.
func readable(v any) any {
	switch x := v.(type) {
	case []any:
		for i := range x {
			x[i] = readable(x[i])
		}
	case map[string]any:
		for k, e := range x {
			switch n, isNum := e.(float64); {
			case isNum && n > 0 && (strings.HasSuffix(k, "_at") || k == "at" || k == "lease_until"):
				x[k] = time.UnixMilli(int64(n)).UTC().Format("2006-01-02T15:04:05.000Z07:00")
			case k == "payload":
				if s, ok := e.(string); ok {
					if raw, err := base64.StdEncoding.DecodeString(s); err == nil && json.Valid(raw) {
						x[k] = json.RawMessage(raw)
					}
				}
			default:
				x[k] = readable(e)
			}
		}
	}
	return v
}

func oneLine(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > 80 {
		return s[:77] + "..."
	}
	return s
}

// cmdSend journals a send for the running bot's sweeper: now, or at a time.
func cmdSend(args []string, stdout, stderr io.Writer) int {
	fs, cfgPath := opsFlags("send", "Usage: botrun send [-c bot.toml] --provider P --chat C [--key K] [--at WHEN] TEXT\n\n"+
		"Journals TEXT as a send to chat C on provider P; the running bot's sweeper delivers it once.\n"+
		"--at holds it until WHEN: an RFC 3339 time (2026-12-24T09:00:00Z) or a wait from now (90s, 10m, 1d).\n"+
		"A key already journaled is not sent again (without --key, a random one). Works beside a running\n"+
		"bot on sqlite, postgres or redis; for the memory or file backend use POST /admin/send.", stderr)
	provider := fs.String("provider", "", "the provider id (a [[channels]] entry)")
	chat := fs.String("chat", "", "the chat to send to")
	key := fs.String("key", "", "the idempotency key (default: a random one)")
	at := fs.String("at", "", "when to send: an RFC 3339 time or a wait such as 10m (default: now)")
	wait := fs.Duration("wait", 10*time.Second, "wait up to this long for the running bot to deliver it and print the outcome (0: print journaled and return)")
	pos, code, stop := parseInterleaved(fs, args)
	if stop {
		return code
	}
	switch {
	case len(pos) == 0:
		fmt.Fprintln(stderr, "botrun send: the text is missing: botrun send --provider web --chat c1 \"hello\"")
		return 2
	case pos[0] == "":
		fmt.Fprintln(stderr, "botrun send: the text is empty")
		return 2
	case len(pos) > 1:
		fmt.Fprintf(stderr, "botrun send: one text, got %d words: quote it (\"%s\")\n", len(pos), strings.Join(pos, " "))
		return 2
	case *provider == "":
		fmt.Fprintln(stderr, "botrun send: --provider is missing: the [[channels]] id to send on")
		return 2
	case *chat == "":
		fmt.Fprintln(stderr, "botrun send: --chat is missing: the chat to send to")
		return 2
	}
	when, err := parseWhen(*at, time.Now())
	if err != nil {
		fmt.Fprintf(stderr, "botrun send: --at: %v\n", err)
		return 2
	}
	if code := checkProvider("send", *cfgPath, *provider, stderr); code != 0 {
		return code
	}
	op, _, done, ok := openOperator(*cfgPath, stderr)
	if !ok {
		return 1
	}
	defer done()
	res, err := op.SendLater(context.Background(), *provider, *chat, pos[0], *key, when)
	if err != nil {
		fmt.Fprintf(stderr, "botrun %v\n", err)
		return 1
	}
	switch {
	case res.Status == abi.SendScheduled:
		fmt.Fprintf(stdout, "scheduled %s for %s\n", res.Key, time.UnixMilli(when).UTC().Format(time.RFC3339))
	case res.Status == abi.SendDeduped || res.Status == abi.SendDead || *wait <= 0:
		fmt.Fprintf(stdout, "%s %s\n", map[bool]string{true: "journaled", false: string(res.Status)}[res.Status == abi.SendDeferred], res.Key)
	default:
		msg, err := sendOutcome(op, res.Key, *wait)
		if err != nil {
			fmt.Fprintf(stderr, "botrun send: %v\n", err)
			return 1
		}
		fmt.Fprintln(stdout, msg)
	}
	return 0
}

// parseWhen reads --at: empty is now (0), an RFC 3339 time, or a wait from
// now such as "90s" or "1d".
func parseWhen(s string, now time.Time) (int64, error) {
	if s == "" {
		return 0, nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t.UnixMilli(), nil
	}
	d, err := unit.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q is neither an RFC 3339 time (2026-12-24T09:00:00Z) nor a wait (90s, 10m, 1d)", s)
	}
	return now.Add(d).UnixMilli(), nil
}

// checkProvider answers 0 when id is a [[channels]] id of the config at
// path, else the exit code after saying why.
func checkProvider(cmd, path, id string, stderr io.Writer) int {
	cfg, err := config.LoadBackend(path)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	for _, p := range cfg.Channels {
		if p.ID == id {
			return 0
		}
	}
	fmt.Fprintf(stderr, "botrun %s: --provider %q is not a [[channels]] id in %s\n", cmd, id, path)
	return 2
}

// cmdBroadcast journals one send per chat of a file for the running bot.
func cmdBroadcast(args []string, stdout, stderr io.Writer) int {
	fs, cfgPath := opsFlags("broadcast", "Usage: botrun broadcast [-c bot.toml] --provider P --chats FILE --key-prefix K [--at WHEN] TEXT\n\n"+
		"Journals TEXT as one send per chat listed in FILE (one chat id per line; - reads stdin), under the\n"+
		"keys K:<chat>; the running bot's sweeper delivers them, a few at a time, each chat once. Run it\n"+
		"again with the same prefix and the chats already journaled are not sent again.", stderr)
	provider := fs.String("provider", "", "the provider id (a [[channels]] entry)")
	chatsFile := fs.String("chats", "", "a file with one chat id per line (- for stdin)")
	prefix := fs.String("key-prefix", "", "the keys' prefix: each send's key is <prefix>:<chat>")
	at := fs.String("at", "", "when to send: an RFC 3339 time or a wait such as 10m (default: now)")
	pos, code, stop := parseInterleaved(fs, args)
	if stop {
		return code
	}
	if len(pos) != 1 {
		fmt.Fprintf(stderr, "botrun broadcast: want one text (quote it), got %d words\n", len(pos))
		return 2
	}
	when, err := parseWhen(*at, time.Now())
	if err != nil {
		fmt.Fprintf(stderr, "botrun broadcast: --at: %v\n", err)
		return 2
	}
	chats, err := readChats(*chatsFile)
	if err != nil {
		fmt.Fprintf(stderr, "botrun broadcast: --chats: %v\n", err)
		return 2
	}
	req := abi.BroadcastRequest{Chats: chats, Text: pos[0], KeyPrefix: *prefix, At: when}
	if err := req.Check(); err != nil {
		fmt.Fprintf(stderr, "botrun broadcast: %v\n", err)
		return 2
	}
	if code := checkProvider("broadcast", *cfgPath, *provider, stderr); code != 0 {
		return code
	}
	if cfg, err := config.LoadBackend(*cfgPath); err == nil && len(chats) > cfg.Bot.MaxBroadcast {
		fmt.Fprintf(stderr, "botrun broadcast: %d chats, over bot.max_broadcast (%d): raise it in [bot] or split the list\n", len(chats), cfg.Bot.MaxBroadcast)
		return 2
	}
	op, _, done, ok := openOperator(*cfgPath, stderr)
	if !ok {
		return 1
	}
	defer done()
	res, err := op.BroadcastLater(context.Background(), *provider, req)
	if err != nil {
		fmt.Fprintf(stderr, "botrun %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "journaled %d, already journaled %d\n", res.Journaled, res.Existing)
	return 0
}

// readChats reads one chat id per line (blank lines skipped) from path, or
// stdin for "-".
func readChats(path string) ([]string, error) {
	if path == "" {
		return nil, errors.New("required: a file with one chat id per line")
	}
	var b []byte
	var err error
	if path == "-" {
		b, err = io.ReadAll(io.LimitReader(os.Stdin, abi.MaxPayload))
	} else {
		b, err = os.ReadFile(path)
	}
	if err != nil {
		return nil, err
	}
	var chats []string
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			chats = append(chats, l)
		}
	}
	return chats, nil
}

// cmdLog prints a chat's message log.
func cmdLog(args []string, stdout, stderr io.Writer) int {
	fs, cfgPath := opsFlags("log", "Usage: botrun log [-c bot.toml] --chat C [--limit N] [--json]\n\n"+
		"Prints the chat's delivered messages, inbound and outbound, oldest first: a view over the journals\n"+
		"(kept as long as durability.retention keeps the records).", stderr)
	chat := fs.String("chat", "", "the chat id")
	limit := fs.Int("limit", 0, "the latest N entries only (0: all)")
	asJSON := fs.Bool("json", false, "print JSON")
	if code, stop := parse(fs, args, 0); stop {
		return code
	}
	if *chat == "" {
		fmt.Fprintln(stderr, "botrun log: --chat is required")
		return 2
	}
	op, _, done, ok := openOperatorFor(*cfgPath, true, stderr)
	if !ok {
		return 1
	}
	defer done()
	log, err := op.MessageLog(context.Background(), *chat, *limit)
	if err != nil {
		fmt.Fprintf(stderr, "botrun log: %v\n", err)
		return 1
	}
	if *asJSON {
		return printJSON(stdout, log)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "AT\tDIR\tPROVIDER\tID\tTEXT")
	for _, e := range log {
		text := oneLine(e.Text)
		for _, m := range e.Media {
			text = strings.TrimSpace(text + " [" + m.Type + "]")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", ms(e.At), e.Direction, e.Provider, e.ID, text)
	}
	tw.Flush()
	return 0
}

// cmdStatus shows who holds what among the bot's replicas: botrun status.
func cmdStatus(args []string, stdout, stderr io.Writer) int {
	fs, cfgPath := opsFlags("status", "Usage: botrun status [-c bot.toml] [--json]\n\n"+
		"Shows the bot: the running bot's module and uptime (asked over its admin API, with [admin]\n"+
		"token), its channels, and from the journals its queues and dead letters; then the leader of\n"+
		"each provider whose session is \"leader\" (the replica's instance id, the fencing token of its\n"+
		"hold and when the hold expires unless renewed), and for each replica (lease owner) the sessions\n"+
		"it leads and the records it holds leased: how many, how many past their lease (a replica that\n"+
		"died or froze; another takes them over) and the earliest expiry.", stderr)
	asJSON := fs.Bool("json", false, "print JSON")
	if code, stop := parse(fs, args, 0); stop {
		return code
	}
	cfg, j, kv, done, ok := openBackendFor(*cfgPath, true, stderr)
	if !ok {
		return 1
	}
	defer done()
	op := host.NewOperator(cfg, j, kv)
	ctx := context.Background()
	st, err := op.Status(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "botrun status: %v\n", err)
		return 1
	}
	bs := botStatus{Config: cfg.File, Backend: cfg.Durability.Backend, Status: st}
	for _, c := range cfg.Channels {
		bs.Channels = append(bs.Channels, c.ID+" ("+c.Type+")")
	}
	if bs.Inbox, bs.Outbox, err = queueCounts(ctx, op); err != nil {
		fmt.Fprintf(stderr, "botrun status: %v\n", err)
		return 1
	}
	bs.Running = askRunning(cfg)
	if *asJSON {
		return printJSON(stdout, bs)
	}
	printBot(stdout, bs)
	printStatus(stdout, st)
	return 0
}

// botStatus is what botrun status shows.
type botStatus struct {
	Config   string   `json:"config"`
	Backend  string   `json:"backend"`
	Channels []string `json:"channels"`
	// Running is what the running bot says of itself.
	Running running `json:"running"`
	// Inbox and Outbox count the records in each state (up to 10,000).
	Inbox  map[string]int `json:"inbox"`
	Outbox map[string]int `json:"outbox"`
	ops.Status
}

// running is the running bot as its admin API answers.
type running struct {
	// URL is where it was asked; Answer what happened ("" when it
	// answered).
	URL    string `json:"url,omitempty"`
	Answer string `json:"answer,omitempty"`
	Module string `json:"module,omitempty"`
	// Since is when its module was first loaded (Unix ms): its start.
	Since int64 `json:"since_at,omitempty"`
}

// askRunning asks the bot's admin API (GET /admin/overview) for its module
// and start.
func askRunning(cfg *config.Config) running {
	addr := cfg.HTTP.Listen
	if cfg.Admin.Listen != "" {
		addr = cfg.Admin.Listen
	}
	if h, p, err := net.SplitHostPort(addr); err == nil && (h == "" || h == "0.0.0.0" || h == "::") {
		addr = net.JoinHostPort("127.0.0.1", p)
	}
	r := running{URL: "http://" + addr + "/admin/overview"}
	if cfg.Admin.Token == "" {
		r.Answer = "not asked: set [admin] token to see the running bot"
		return r
	}
	req, _ := http.NewRequest("GET", r.URL, nil)
	req.Header.Set("Authorization", "Bearer "+cfg.Admin.Token)
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		r.Answer = "no answer: is the bot running? (" + err.Error() + ")"
		return r
	}
	defer resp.Body.Close()
	var o struct {
		Module  string `json:"module"`
		Modules []struct {
			At    int64  `json:"at"`
			Event string `json:"event"`
		} `json:"modules"`
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&o) != nil {
		r.Answer = "answered " + resp.Status + " (is it this bot? is the token right?)"
		return r
	}
	r.Module = o.Module
	for _, m := range o.Modules {
		if m.Event == "loaded" {
			r.Since = m.At
			break
		}
	}
	return r
}

// queueCounts counts the inbox's and the outbox's records by state.
func queueCounts(ctx context.Context, op *ops.Operator) (inbox, outbox map[string]int, err error) {
	inbox, outbox = map[string]int{}, map[string]int{}
	for _, st := range durability.InboxStates {
		recs, err := op.ListInbox(ctx, durability.ListFilter{State: string(st), Limit: 10000})
		if err != nil {
			return nil, nil, err
		}
		inbox[string(st)] = len(recs)
	}
	for _, st := range durability.OutboxStates {
		recs, err := op.ListOutbox(ctx, durability.ListFilter{State: string(st), Limit: 10000})
		if err != nil {
			return nil, nil, err
		}
		outbox[string(st)] = len(recs)
	}
	return inbox, outbox, nil
}

// printBot prints the bot's part of botrun status.
func printBot(w io.Writer, bs botStatus) {
	fmt.Fprintf(w, "bot        %s (%s backend)\n", bs.Config, bs.Backend)
	switch r := bs.Running; {
	case r.Answer != "":
		fmt.Fprintf(w, "running    %s\n", r.Answer)
	default:
		since := time.UnixMilli(r.Since)
		fmt.Fprintf(w, "running    module %.12s, up %s (since %s)\n", r.Module, time.Since(since).Round(time.Second), since.UTC().Format(time.RFC3339))
	}
	fmt.Fprintf(w, "channels   %s\n", strings.Join(bs.Channels, ", "))
	counts := func(m map[string]int, states []string) string {
		var parts []string
		for _, s := range states {
			parts = append(parts, fmt.Sprintf("%s %d", s, m[s]))
		}
		return strings.Join(parts, ", ")
	}
	fmt.Fprintf(w, "inbox      %s\n", counts(bs.Inbox, states(durability.InboxStates)))
	fmt.Fprintf(w, "outbox     %s\n", counts(bs.Outbox, states(durability.OutboxStates)))
	if dead := bs.Inbox["dead"] + bs.Outbox["dead"] + bs.Outbox["unknown"]; dead > 0 {
		fmt.Fprintf(w, "dead letters: %d (botrun inbox list --state dead, botrun outbox list --state dead)\n", dead)
	}
	fmt.Fprintln(w)
}

// printStatus writes st as two tables: sessions, then replicas.
func printStatus(w io.Writer, st ops.Status) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if len(st.Sessions) == 0 {
		fmt.Fprintln(tw, "no provider has a leader-only session (session = \"leader\")")
	} else {
		fmt.Fprintln(tw, "SESSION\tLEADER\tTOKEN\tUNTIL")
		for _, s := range st.Sessions {
			leader, until := s.Leader, ms(s.Until)+" ("+relative(s.Until, st.At)+")"
			switch {
			case s.Leader == "":
				leader, until = "none", "-"
			case s.Expired:
				leader += " (expired: taken over within a lease)"
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", s.Provider, leader, s.Token, until)
		}
	}
	fmt.Fprintln(tw)
	kinds := ops.LeaseKinds()
	if len(st.Replicas) == 0 {
		fmt.Fprintln(tw, "no replica holds a lease")
		tw.Flush()
		return
	}
	header := "REPLICA\tLEADS"
	for _, k := range kinds {
		header += "\t" + strings.ToUpper(k) + " LEASED"
	}
	fmt.Fprintln(tw, header)
	for _, r := range st.Replicas {
		leads := strings.Join(r.Leads, ",")
		if leads == "" {
			leads = "-"
		}
		row := r.Owner + "\t" + leads
		for _, k := range kinds {
			row += "\t" + heldCell(r.Held[k], st.At)
		}
		fmt.Fprintln(tw, row)
	}
	tw.Flush()
}

// heldCell is one kind of leases a replica holds: "0", or the count, the
// expired ones and the earliest expiry.
func heldCell(h ops.HeldLeases, now int64) string {
	if h.Count == 0 {
		return "0"
	}
	s := fmt.Sprintf("%d, earliest %s", h.Count, relative(h.Earliest, now))
	if h.Expired > 0 {
		s += fmt.Sprintf(" (%d expired)", h.Expired)
	}
	return s
}

// relative says when t is from now: "in 41s", "3.2s ago".
func relative(t, now int64) string {
	d := time.Duration(t-now) * time.Millisecond
	if d >= 0 {
		return "in " + d.Round(100*time.Millisecond).String()
	}
	return (-d).Round(100*time.Millisecond).String() + " ago"
}
