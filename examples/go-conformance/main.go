// Command go-conformance is the Go SDK's conformance guest: every event's
// text is one command, which it runs through the SDK and whose outcome it
// posts, as one line of text, to the chat "report". host/wasm's
// TestConformance drives it, and the same commands in the C, Rust and
// AssemblyScript guests, against a scripted host; the protocol is in
// examples/CONFORMANCE.md.
package main

import (
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	bot "github.com/botrun/botrun/guest-sdk/go"
)

// arg decodes a command argument: "-" is the empty string, "@N" N bytes of 'x'.
func arg(s string) string {
	if s == "-" {
		return ""
	}
	if n, err := strconv.Atoi(strings.TrimPrefix(s, "@")); err == nil && strings.HasPrefix(s, "@") {
		return strings.Repeat("x", n)
	}
	return s
}

var sentinels = map[bot.Code]error{bot.CodeBadPointer: bot.ErrBadPointer, bot.CodeBadPayload: bot.ErrBadPayload,
	bot.CodeNotFound: bot.ErrNotFound, bot.CodeUnsupported: bot.ErrUnsupported, bot.CodeTooLarge: bot.ErrTooLarge,
	bot.CodeNoResult: bot.ErrNoResult, bot.CodeHostError: bot.ErrHostError, bot.CodeMediaUnavailable: bot.ErrMediaUnavailable,
	bot.CodeChannelFailed: bot.ErrChannelFailed, bot.CodeFetchFailed: bot.ErrFetchFailed}

// failure is the outcome line of an error the SDK returned.
func failure(err error) string {
	var send *bot.SendError
	var media *bot.MediaUnavailableError
	var channel *bot.ChannelError
	var fetch *bot.FetchError
	switch {
	case errors.As(err, &send):
		r := send.Result
		return fmt.Sprintf("not-sent %s key=%s ref=%s error=%s", r.Status, r.Key, r.Ref, r.Error)
	case errors.As(err, &media):
		if !errors.Is(err, bot.ErrMediaUnavailable) {
			return "err SENTINEL-MISMATCH"
		}
		return "unavailable " + media.Reason + " " + media.Message
	case errors.As(err, &channel):
		if !errors.Is(err, bot.ErrChannelFailed) || bot.CodeOf(err) != bot.CodeChannelFailed {
			return "err SENTINEL-MISMATCH"
		}
		return "channel-failed " + channel.Message
	case errors.As(err, &fetch):
		if !errors.Is(err, bot.ErrFetchFailed) || bot.CodeOf(err) != bot.CodeFetchFailed {
			return "err SENTINEL-MISMATCH"
		}
		return "fetch-failed " + fetch.Reason + " " + fetch.Message
	}
	code := bot.CodeOf(err)
	if code == 0 {
		return "err " + err.Error()
	}
	if !errors.Is(err, sentinels[code]) {
		return "err SENTINEL-MISMATCH " + code.String()
	}
	return "err " + code.String()
}

func sendOutcome(r bot.SendResult, err error) string {
	if err != nil {
		return failure(err)
	}
	return fmt.Sprintf("%s key=%s ref=%s error=%s", r.Status, r.Key, r.Ref, r.Error)
}

func opts(args []string, i int) []bot.SendOption {
	if len(args) > i {
		return []bot.SendOption{bot.WithIdempotencyKey(arg(args[i]))}
	}
	return nil
}

// atOpts decodes the AT argument of send-at, post-at and enqueue-at: "+N" is
// the event's time plus N ms, any other number a Unix time in ms ("0": none).
// The key, if any, follows the text.
func atOpts(ctx *bot.Context, args []string) []bot.SendOption {
	return append(opts(args, 4), bot.WithAt(atTime(ctx, args[2])))
}

// atTime decodes an AT argument.
func atTime(ctx *bot.Context, s string) time.Time {
	if n, ok := strings.CutPrefix(s, "+"); ok {
		ms, _ := strconv.ParseInt(n, 10, 64)
		return time.UnixMilli(ctx.Event.ReceivedAt).Add(time.Duration(ms) * time.Millisecond)
	}
	if ms, _ := strconv.ParseInt(s, 10, 64); ms != 0 {
		return time.UnixMilli(ms)
	}
	return time.Time{}
}

// sendFn is the send function FN of buttons and list: send, post or enqueue.
func sendFn(ctx *bot.Context, fn string) func(chat, text string, opts ...bot.SendOption) (bot.SendResult, error) {
	switch fn {
	case "send":
		return ctx.Send
	case "enqueue":
		return ctx.Enqueue
	}
	return ctx.Post
}

// button decodes a button SPEC: "id:ID:TITLE" (a reply button) or
// "url:TITLE:URL" (a URL button).
func button(spec string) bot.Button {
	kind, rest, _ := strings.Cut(spec, ":")
	a, b, _ := strings.Cut(rest, ":")
	if kind == "url" {
		return bot.URLButton(arg(a), arg(b))
	}
	return bot.ReplyButton(arg(a), arg(b))
}

// section decodes a list SECTION: "TITLE/ROW/ROW…", each ROW
// "ID:TITLE[:DESCRIPTION]".
func section(spec string) bot.ListSection {
	parts := strings.Split(spec, "/")
	sec := bot.ListSection{Title: arg(parts[0]), Rows: []bot.ListRow{}}
	for _, r := range parts[1:] {
		f := strings.SplitN(r, ":", 3)
		row := bot.ListRow{ID: arg(f[0])}
		if len(f) > 1 {
			row.Title = arg(f[1])
		}
		if len(f) > 2 {
			row.Description = arg(f[2])
		}
		sec.Rows = append(sec.Rows, row)
	}
	return sec
}

var signup = bot.NewFlow("signup", func(f *bot.FlowContext) error {
	name, err := f.Ask("name?")
	if err != nil {
		return err
	}
	if _, err := f.Reply("hi " + name); err != nil {
		return err
	}
	city, err := f.Ask("city?")
	if err != nil {
		return err
	}
	_, err = f.Reply("bye " + name + " from " + city)
	return err
})

// typist shows typing, asks "q?", and edits the message m-1 to the answer:
// replayed, its typing is not shown again.
var typist = bot.NewFlow("typist", func(f *bot.FlowContext) error {
	if err := f.Typing(f.Event.Chat); err != nil {
		return err
	}
	a, err := f.Ask("q?")
	if err != nil {
		return err
	}
	return f.Edit(f.Event.Chat, "m-1", a)
})

// fetcher calls orders GET /orders/42 and replies its outcome, asks
// "next?", replies that outcome again, calls orders POST /orders/42/pay and
// replies its outcome, asks "last?" and replies the second outcome again. A
// replayed step's call is answered from the calls kept with the flow,
// marked replayed, and does not reach the host (abi/SPEC.md section 7).
var fetcher = bot.NewFlow("fetcher", func(f *bot.FlowContext) error {
	first := callOutcome(f.Fetch("orders", bot.Request{Path: "/orders/42"}))
	if _, err := f.Reply("first " + first); err != nil {
		return err
	}
	if _, err := f.Ask("next?"); err != nil {
		return err
	}
	if _, err := f.Reply("had " + first); err != nil {
		return err
	}
	second := callOutcome(f.Fetch("orders", bot.Request{Method: "POST", Path: "/orders/42/pay"}))
	if _, err := f.Reply("paid " + second); err != nil {
		return err
	}
	if _, err := f.Ask("last?"); err != nil {
		return err
	}
	_, err := f.Reply("end " + second)
	return err
})

// callOutcome is the outcome line of a fetch.
func callOutcome(r *bot.Response, err error) string {
	if err != nil {
		return failure(err)
	}
	return fetchOutcome(r)
}

// fetchRequest decodes the arguments of fetch: API PATH [METHOD] [BODY]
// [KEY] [NAME:VALUE...]; a BODY "hex:HEX" is those bytes.
func fetchRequest(args []string) (string, bot.Request) {
	at := func(i int) string {
		if i < len(args) {
			return arg(args[i])
		}
		return ""
	}
	req := bot.Request{Path: at(2), Method: at(3), Key: at(5)}
	if b, ok := strings.CutPrefix(at(4), "hex:"); ok {
		req.Body, _ = hex.DecodeString(b)
	} else {
		req.Body = []byte(at(4))
	}
	for _, h := range args[min(6, len(args)):] {
		name, value, _ := strings.Cut(h, ":")
		if req.Header == nil {
			req.Header = map[string]string{}
		}
		req.Header[name] = value
	}
	return at(1), req
}

// fetchOutcome is the outcome line of a response: its body's first 64
// bytes as text when they are printable ASCII, else in hex.
func fetchOutcome(r *bot.Response) string {
	b := r.Body[:min(64, len(r.Body))]
	body := string(b)
	for _, c := range b {
		if c < 0x20 || c > 0x7e {
			body = "hex:" + hex.EncodeToString(b)
			break
		}
	}
	return fmt.Sprintf("fetch %d replayed=%t headers=%d type=%s len=%d body=%s", r.Status, r.Replayed, len(r.Header),
		r.Header["Content-Type"], len(r.Body), body)
}

// done is the outcome line of a call that returns only an error.
func done(err error) string {
	if err != nil {
		return failure(err)
	}
	return "ok"
}

// run runs one command and returns its outcome line.
func run(ctx *bot.Context, args []string) (string, error) {
	need := func(n int) string { return arg(args[n]) }
	switch args[0] {
	case "now":
		return fmt.Sprintf("now %d", bot.NowMs()), nil
	case "state-get":
		v, ok, err := ctx.StateGet(need(1))
		switch {
		case err != nil:
			return failure(err), nil
		case !ok:
			return "absent", nil
		}
		return "value " + string(v), nil
	case "state-set":
		if err := ctx.StateSet(need(1), []byte(need(2))); err != nil {
			return failure(err), nil
		}
		return "ok", nil
	case "fail-state-set":
		// The SDK's error, returned as the handler's own.
		if err := ctx.StateSet(need(1), []byte(need(2))); err != nil {
			return failure(err), err
		}
		return "ok", nil
	case "state-delete":
		if err := ctx.StateDelete(need(1)); err != nil {
			return failure(err), nil
		}
		return "ok", nil
	case "media", "fail-media":
		i, _ := strconv.Atoi(args[1])
		b, err := ctx.LoadMedia(i)
		if err != nil {
			if args[0] == "fail-media" {
				return failure(err), err // the SDK's error, returned as the handler's own
			}
			return failure(err), nil
		}
		return fmt.Sprintf("bytes %d", len(b)), nil
	case "send":
		return sendOutcome(ctx.Send(need(1), need(2), opts(args, 3)...)), nil
	case "post":
		return sendOutcome(ctx.Post(need(1), need(2), opts(args, 3)...)), nil
	case "enqueue":
		return sendOutcome(ctx.Enqueue(need(1), need(2), opts(args, 3)...)), nil
	case "send-at":
		return sendOutcome(ctx.Send(need(1), need(3), atOpts(ctx, args)...)), nil
	case "post-at":
		return sendOutcome(ctx.Post(need(1), need(3), atOpts(ctx, args)...)), nil
	case "enqueue-at":
		return sendOutcome(ctx.Enqueue(need(1), need(3), atOpts(ctx, args)...)), nil
	case "broadcast", "broadcast-at":
		// broadcast PREFIX TEXT CHAT..., broadcast-at PREFIX AT TEXT CHAT...
		var o []bot.SendOption
		text := 2
		if args[0] == "broadcast-at" {
			o, text = []bot.SendOption{bot.WithAt(atTime(ctx, args[2]))}, 3
		}
		var chats []string
		for _, c := range args[text+1:] {
			chats = append(chats, arg(c))
		}
		r, err := ctx.Broadcast(chats, need(text), need(1), o...)
		if err != nil {
			return failure(err), nil
		}
		return fmt.Sprintf("journaled %d existing %d", r.Journaled, r.Existing), nil
	case "buttons":
		// buttons FN CHAT TEXT SPEC...
		var bs []bot.Button
		for _, spec := range args[4:] {
			bs = append(bs, button(spec))
		}
		return sendOutcome(sendFn(ctx, args[1])(need(2), need(3), bot.WithButtons(bs...))), nil
	case "list":
		// list FN CHAT TEXT BUTTON SECTION...
		l := bot.List{Button: need(4), Sections: []bot.ListSection{}}
		for _, spec := range args[5:] {
			l.Sections = append(l.Sections, section(spec))
		}
		return sendOutcome(sendFn(ctx, args[1])(need(2), need(3), bot.WithList(l))), nil
	case "buttons-list":
		return sendOutcome(ctx.Post(need(1), need(2), bot.WithButtons(bot.ReplyButton("a", "A")),
			bot.WithList(bot.List{Button: "Menu", Sections: []bot.ListSection{{Rows: []bot.ListRow{{ID: "r1", Title: "R1"}}}}}))), nil
	case "event":
		return "kind=" + ctx.Event.Kind + " interaction=none", nil
	case "reply":
		return sendOutcome(ctx.Reply(need(1))), nil
	case "sends":
		n, _ := strconv.Atoi(args[1])
		for i := 1; i <= n; i++ {
			if _, err := ctx.Send("c1", fmt.Sprintf("n%d", i)); err != nil {
				return fmt.Sprintf("%s at %d", failure(err), i), nil
			}
		}
		return fmt.Sprintf("sent %d", n), nil
	case "log":
		level, _ := strconv.Atoi(args[1])
		count := 1
		if len(args) > 3 {
			count, _ = strconv.Atoi(args[3])
		}
		for range count {
			ctx.Logf(int32(level), "%s", need(2))
		}
		return "ok", nil
	case "edit":
		return done(ctx.Edit(need(1), need(2), need(3))), nil
	case "fail-edit":
		// The SDK's error, returned as the handler's own.
		err := ctx.Edit(need(1), need(2), need(3))
		return done(err), err
	case "typing":
		return done(ctx.Typing(need(1))), nil
	case "fetch", "fail-fetch":
		res, err := ctx.Fetch(fetchRequest(args))
		if err != nil {
			if args[0] == "fail-fetch" {
				return failure(err), err // the SDK's error, returned as the handler's own
			}
			return failure(err), nil
		}
		return fetchOutcome(res), nil
	case "flow-start":
		flow := signup
		if len(args) > 1 && args[1] == "typist" {
			flow = typist
		}
		if len(args) > 1 && args[1] == "fetcher" {
			flow = fetcher
		}
		if err := ctx.Start(flow); err != nil {
			return failure(err), nil
		}
		return "ok", nil
	case "flow-continue":
		in, err := ctx.Continue()
		switch {
		case err != nil:
			return failure(err), nil
		case in:
			return "in-flow", nil
		}
		return "not-in-flow", nil
	case "flow-name":
		name, ok, err := ctx.InFlow()
		switch {
		case err != nil:
			return failure(err), nil
		case ok:
			return "flow " + name, nil
		}
		return "no-flow", nil
	case "fail":
		return "failing", errors.New(need(1))
	}
	return "unknown command " + args[0], nil
}

func init() {
	bot.Handle(func(ctx *bot.Context) error {
		var out string
		var err error
		if in := ctx.Event.Interaction; in != nil {
			// A press is reported, not run: its text is the pressed title.
			out = fmt.Sprintf("interaction kind=%s id=%s title=%s message=%s text=%s", ctx.Event.Kind, in.ID, in.Title, in.Message, ctx.Event.Text)
		} else {
			out, err = run(ctx, strings.Split(ctx.Event.Text, " "))
		}
		if _, perr := ctx.Post("report", out); perr != nil {
			return perr
		}
		return err
	})
}

func main() {}
