// Package bot is the Go SDK for botrun handlers. It implements ABI v1
// (abi/SPEC.md in the botrun repository): importing it makes a module export
// botrun_abi_v1 and botrun_on_event, so a bot is just a handler registered from
// init:
//
//	package main
//
//	import bot "github.com/botrun/botrun/guest-sdk/go"
//
//	func init() {
//		bot.Handle(func(ctx *bot.Context) error {
//			_, err := ctx.Reply("echo: " + ctx.Event.Text)
//			return err
//		})
//	}
//
//	func main() {}
//
// Build it with GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o bot.wasm .
// In that build mode main never runs, so register the handler in init.
//
// The SDK has no dependencies beyond the standard library.
package bot

import (
	"errors"
	"fmt"
	"time"
	"unsafe"
)

// Event is the inbound message being handled.
type Event struct {
	ID         string  `json:"id"`
	Provider   string  `json:"provider"`
	Chat       string  `json:"chat"`
	From       string  `json:"from"`
	Text       string  `json:"text"`
	Media      []Media `json:"media"`
	Attempt    int     `json:"attempt"`
	ReceivedAt int64   `json:"received_at"`
	// Kind is KindMessage, or KindInteraction for the press of a button or
	// a list row the bot sent (then Interaction says which, and Text holds
	// its title too). An event from a host that sends no kind is a message;
	// a kind a later host adds is passed on as it is.
	Kind string `json:"kind"`
	// Interaction is the press, for an event of kind KindInteraction; nil
	// otherwise.
	Interaction *Interaction `json:"interaction,omitempty"`
}

// Event kinds (abi/SPEC.md section 2).
const (
	// KindMessage is a message: the host sent no kind, or "".
	KindMessage = "message"
	// KindInteraction is the press of a reply button or a list row.
	KindInteraction = "interaction"
)

// Interaction is the press of a reply button or a list row.
type Interaction struct {
	// ID is the button's or row's id, as the send gave it.
	ID string `json:"id"`
	// Title is its title, when the channel says ("" otherwise).
	Title string `json:"title,omitempty"`
	// Message is the channel's id of the message it was on (the Ref its
	// send returned), when the channel says ("" otherwise).
	Message string `json:"message,omitempty"`
}

// Button is one button under a message: a reply button (ID and Title: a
// press arrives as an event of kind KindInteraction with that ID) or a URL
// button (Title and URL: the user's app opens it, the bot hears nothing).
// Give ID or URL, not both.
type Button struct {
	ID    string `json:"id,omitempty"`
	Title string `json:"title"`
	URL   string `json:"url,omitempty"`
}

// ReplyButton is a reply button: pressed, it arrives as an interaction with id.
func ReplyButton(id, title string) Button { return Button{ID: id, Title: title} }

// URLButton is a button that opens url (http or https).
func URLButton(title, url string) Button { return Button{Title: title, URL: url} }

// List is a menu of rows to pick one from, opened by a button titled Button.
// A picked row arrives as an interaction with the row's ID.
type List struct {
	Button   string        `json:"button"`
	Sections []ListSection `json:"sections"`
}

// ListSection is a group of rows; Title may be empty.
type ListSection struct {
	Title string    `json:"title,omitempty"`
	Rows  []ListRow `json:"rows"`
}

// ListRow is one choice of a List; Description may be empty.
type ListRow struct {
	ID          string `json:"id"`
	Title       string `json:"title"`
	Description string `json:"description,omitempty"`
}

// The ABI's bounds of a send's choices, whatever the channel (the host
// refuses more with ErrBadPayload); each channel may allow fewer, and refuses
// at send time what it cannot show (the send is dead).
const (
	MaxButtons  = 16
	MaxListRows = 100
	// MaxChoiceID bounds a button's or row's id, in bytes.
	MaxChoiceID = 256
)

// Media is an attachment: inbound it has a Ref; outbound a Ref or a public URL.
type Media struct {
	Type    string `json:"type"`
	Ref     string `json:"ref,omitempty"`
	URL     string `json:"url,omitempty"`
	MIME    string `json:"mime,omitempty"`
	Caption string `json:"caption,omitempty"`
}

// SendResult is the host's answer to a send or an enqueue.
type SendResult struct {
	// Status is sent, deduped, deferred, dead or bypassed; queued from
	// Reply and Post (the send is made when the handler returns); scheduled
	// from Enqueue with a future WithAt (held until then); or, from the SDK
	// and not the host, replayed (a flow's send while it replays a step
	// already taken: see Flow).
	Status string `json:"status"`
	// Key is the idempotency key the host used.
	Key string `json:"key"`
	// Ref is the channel's message id, when known.
	Ref string `json:"ref"`
	// Error says why a send is dead or deferred.
	Error string `json:"error"`
}

// SendError is returned by Reply and Send when a send did not go out now: it is
// dead, or deferred (it stays journaled and the host keeps retrying it).
type SendError struct{ Result SendResult }

func (e *SendError) Error() string {
	return fmt.Sprintf("send %s %s: %s", e.Result.Key, e.Result.Status, e.Result.Error)
}

// Code is a host function's negative result (abi/SPEC.md section 4.1).
type Code int32

// The host's error codes (abi/SPEC.md section 4.1).
const (
	// CodeBadPointer: a pointer/length pair is outside the guest's memory.
	CodeBadPointer Code = -1
	// CodeBadPayload: the payload (or a state key) is not what the host
	// accepts; the host logs why.
	CodeBadPayload Code = -2
	// CodeNotFound: no such state key, or no media at that index.
	CodeNotFound Code = -3
	// CodeUnsupported: this host does not offer the function.
	CodeUnsupported Code = -4
	// CodeTooLarge: a payload, key or value over the host's limits, a state
	// write past the state limits, or media over 20 MiB.
	CodeTooLarge Code = -5
	// CodeNoResult: result_read with no pending result.
	CodeNoResult Code = -6
	// CodeHostError: the host failed; the event's attempt fails and is retried.
	CodeHostError Code = -7
	// CodeMediaUnavailable: media_load cannot have the bytes; see
	// MediaUnavailableError.
	CodeMediaUnavailable Code = -8
	// CodeChannelFailed: the channel refused or failed an edit or a typing
	// indicator; see ChannelError. The event goes on.
	CodeChannelFailed Code = -9
	// CodeFetchFailed: an API call got no response; see FetchError. The
	// event goes on.
	CodeFetchFailed Code = -10
)

var codeNames = map[Code]string{CodeBadPointer: "BAD_POINTER", CodeBadPayload: "BAD_PAYLOAD", CodeNotFound: "NOT_FOUND",
	CodeUnsupported: "UNSUPPORTED", CodeTooLarge: "TOO_LARGE", CodeNoResult: "NO_RESULT", CodeHostError: "HOST_ERROR",
	CodeMediaUnavailable: "MEDIA_UNAVAILABLE", CodeChannelFailed: "CHANNEL_FAILED", CodeFetchFailed: "FETCH_FAILED"}

// String is the code's SPEC name, e.g. "TOO_LARGE", or the number for a code
// this SDK does not know.
func (c Code) String() string {
	if name, ok := codeNames[c]; ok {
		return name
	}
	return fmt.Sprint(int32(c))
}

// Sentinels, one per code: errors.Is(err, ErrTooLarge) matches a *HostError
// with that code (ErrMediaUnavailable a *MediaUnavailableError, and
// ErrChannelFailed a *ChannelError).
var (
	ErrBadPointer       = errors.New("BAD_POINTER")
	ErrBadPayload       = errors.New("BAD_PAYLOAD")
	ErrNotFound         = errors.New("NOT_FOUND")
	ErrUnsupported      = errors.New("unsupported by this host")
	ErrTooLarge         = errors.New("TOO_LARGE")
	ErrNoResult         = errors.New("NO_RESULT")
	ErrHostError        = errors.New("HOST_ERROR")
	ErrMediaUnavailable = errors.New("MEDIA_UNAVAILABLE")
	ErrChannelFailed    = errors.New("CHANNEL_FAILED")
)

var codeErrs = map[Code]error{CodeBadPointer: ErrBadPointer, CodeBadPayload: ErrBadPayload, CodeNotFound: ErrNotFound,
	CodeUnsupported: ErrUnsupported, CodeTooLarge: ErrTooLarge, CodeNoResult: ErrNoResult, CodeHostError: ErrHostError,
	CodeMediaUnavailable: ErrMediaUnavailable, CodeChannelFailed: ErrChannelFailed, CodeFetchFailed: ErrFetchFailed}

// HostError is a negative code from a host function (see SPEC.md section
// 4.1). errors.Is matches it against the code's sentinel (ErrTooLarge, ...);
// errors.As gives the function and the code.
type HostError struct {
	// Func is the host function that answered, e.g. "state_set".
	Func string
	// Code is what it answered.
	Code Code
}

func (e *HostError) Error() string { return "botrun." + e.Func + ": " + e.Code.String() }

// Is makes errors.Is(err, ErrTooLarge) (and every other code's sentinel) work.
func (e *HostError) Is(target error) bool { return target != nil && codeErrs[e.Code] == target }

// CodeOf is the host code err carries (a *HostError's, CodeMediaUnavailable
// for a *MediaUnavailableError, CodeChannelFailed for a *ChannelError,
// CodeFetchFailed for a *FetchError), or 0
// when it carries none.
func CodeOf(err error) Code {
	var he *HostError
	var mu *MediaUnavailableError
	var ce *ChannelError
	var fe *FetchError
	switch {
	case errors.As(err, &he):
		return he.Code
	case errors.As(err, &mu):
		return CodeMediaUnavailable
	case errors.As(err, &ce):
		return CodeChannelFailed
	case errors.As(err, &fe):
		return CodeFetchFailed
	}
	return 0
}

// Log levels of Logf (abi/SPEC.md section 4, log).
const (
	LevelDebug int32 = 0
	LevelInfo  int32 = 1
	LevelWarn  int32 = 2
	LevelError int32 = 3
)

// SendResult statuses (abi/SPEC.md section 2); StatusReplayed is the SDK's.
const (
	StatusSent     = "sent"
	StatusDeduped  = "deduped"
	StatusDeferred = "deferred"
	StatusDead     = "dead"
	StatusBypassed = "bypassed"
	StatusQueued   = "queued"
	// StatusScheduled answers Enqueue WithAt a future time: the send is
	// journaled and held until then.
	StatusScheduled = "scheduled"
)

// Context is what a handler gets for one event.
type Context struct {
	// Event is the message being handled.
	Event Event

	// replaying is set while a flow replays the steps it already took: its
	// sends are not made (see Flow). flowCalls keeps the answers of the
	// flow's API calls (nil outside a flow).
	replaying bool
	flowCalls *flowCalls
}

// Handler handles one event. Returning an error reports it to the host, which
// logs it and does not retry (the handler's sends already happened). A panic is
// a fault: the host retries the event, deduplicating its sends.
type Handler func(ctx *Context) error

var handler Handler

// Handle registers the handler. Call it from an init function.
func Handle(h Handler) { handler = h }

// SendOption changes one send.
type SendOption func(*sendRequest)

type sendRequest struct {
	Chat           string   `json:"chat"`
	Text           string   `json:"text"`
	Media          *Media   `json:"media"`
	IdempotencyKey string   `json:"idempotency_key"`
	At             int64    `json:"at,omitempty"`
	Buttons        []Button `json:"buttons,omitempty"`
	List           *List    `json:"list,omitempty"`
}

// WithIdempotencyKey names the send: the host sends a key at most once per bot.
// Without it the key is derived from the event and the send's position.
func WithIdempotencyKey(key string) SendOption {
	return func(r *sendRequest) { r.IdempotencyKey = key }
}

// WithAt holds an Enqueue until t: the host journals the send at once,
// answers StatusScheduled, and sends it once when t is due, across restarts
// (botrun outbox list --state scheduled shows it; botrun discard KEY cancels
// it). The clock is the event's: compute t from the event's time, e.g.
// time.UnixMilli(ctx.Event.ReceivedAt).Add(time.Hour). A zero t, or a time
// already past, sends as soon as possible (StatusDeferred). The time is sent in
// Unix milliseconds; one before 1970 is refused (BAD_PAYLOAD).
//
// Only Enqueue takes it: Send and Post pass it to the host, which refuses
// them with BAD_PAYLOAD (ErrBadPayload), as it does any other request it does
// not accept.
func WithAt(t time.Time) SendOption {
	return func(r *sendRequest) {
		r.At = 0
		if !t.IsZero() {
			r.At = t.UnixMilli()
		}
	}
}

// WithMedia attaches one media item.
func WithMedia(m Media) SendOption {
	return func(r *sendRequest) { r.Media = &m }
}

// WithButtons puts buttons under the message (a later WithButtons replaces
// them): reply buttons (ReplyButton, or Button{ID, Title}), whose press
// arrives as an event of kind KindInteraction, and URL buttons (URLButton).
// The host refuses with ErrBadPayload an empty title, a button with both an
// id and a url (or neither), an id that is not printable or is over
// MaxChoiceID bytes, a url that is not http(s), more than MaxButtons, and
// buttons with WithList. A channel that cannot show them refuses the send
// at send time: it is dead (a Send answers it; a Post's is in the dead
// letters), never sent without them. A text the channel splits carries
// them on its last part.
//
// Send, Post and Enqueue take it; Broadcast passes it on to the host, which
// refuses it (ErrBadPayload: a broadcast carries no choices).
func WithButtons(buttons ...Button) SendOption {
	return func(r *sendRequest) { r.Buttons = append([]Button(nil), buttons...) }
}

// WithList puts a list under the message: a button titled l.Button opens
// its sections of rows, and a picked row arrives as an event of kind
// KindInteraction with the row's id. The host refuses with ErrBadPayload a
// list without a button title, sections or rows, a row without an id or a
// title, more than MaxListRows rows, and a list with WithButtons; a channel
// that cannot show it refuses the send (dead), as for WithButtons.
func WithList(l List) SendOption {
	return func(r *sendRequest) { r.List = &l }
}

// Reply posts text to the event's chat (see Post): it returns at once with
// status queued and the send's key, and the host makes the send when the
// handler returns. Use Send to wait for the channel's answer.
func (c *Context) Reply(text string, opts ...SendOption) (SendResult, error) {
	return c.Post(c.Event.Chat, text, opts...)
}

// Post queues a send of text to chat and returns at once with status queued
// and its key. The host journals and makes the handler's posted sends, in
// order, when the handler returns (a later Send or Enqueue makes them first),
// so the handler's instance is free while they wait on the journal and the
// channel. If the handler faults, its posted sends are not made; its retry
// posts them again under the same keys.
func (c *Context) Post(chat, text string, opts ...SendOption) (SendResult, error) {
	return c.send("post", chat, text, opts)
}

// Send sends text to chat and waits for the outbox's answer. A dead or deferred
// send returns its result with a *SendError.
func (c *Context) Send(chat, text string, opts ...SendOption) (SendResult, error) {
	res, err := c.send("send", chat, text, opts)
	if err == nil && (res.Status == StatusDead || res.Status == StatusDeferred) {
		err = &SendError{Result: res}
	}
	return res, err
}

// Enqueue journals a send for the host to deliver in the background and returns
// at once (StatusDeferred; StatusScheduled with WithAt a future time). A second
// Enqueue with the same explicit key does nothing.
func (c *Context) Enqueue(chat, text string, opts ...SendOption) (SendResult, error) {
	return c.send("enqueue", chat, text, opts)
}

func (c *Context) send(fn, chat, text string, opts []SendOption) (SendResult, error) {
	if c.replaying {
		// The host numbers sends, so one that does not reach it takes no
		// derived key: the live sends keep their numbers on every replay.
		return SendResult{Status: StatusReplayed}, nil
	}
	r := sendRequest{Chat: chat, Text: text}
	for _, o := range opts {
		o(&r)
	}
	b := encodeSendRequest(r)
	var n int32
	switch fn {
	case "send":
		n = hostSend(ptr(b), int32(len(b)))
	case "post":
		n = hostPost(ptr(b), int32(len(b)))
	default:
		n = hostEnqueue(ptr(b), int32(len(b)))
	}
	out, err := result(fn, n)
	if err != nil {
		return SendResult{}, err
	}
	res, err := decodeSendResult(out)
	if err != nil {
		return SendResult{}, fmt.Errorf("botrun.%s: bad result: %w", fn, err)
	}
	return res, nil
}

// BroadcastResult answers Broadcast: the host's counts of the keys
// "<keyPrefix>:<chat>" it journaled now, and of those it had journaled
// already (a replay of the event, or an earlier broadcast with the same
// prefix), which are not sent again.
type BroadcastResult struct {
	Journaled int `json:"journaled"`
	Existing  int `json:"existing"`
	// Cancelled counts the chats whose send the module's before-send hook
	// cancelled (see package beforesend).
	Cancelled int `json:"cancelled"`
	// Replayed is the SDK's: the broadcast was made by a flow while it
	// replays a step already taken, so nothing went to the host (see Flow).
	Replayed bool `json:"-"`
}

// Broadcast journals one send of text to each of chats, under the key
// "<keyPrefix>:<chat>", for the host's sweeper to deliver, and returns at once
// with the counts. A chat listed twice is sent once, and a key journaled
// before (the event's retry, or an earlier broadcast with the same prefix) is
// not sent again: name the prefix after what is announced (e.g. "news:42"),
// not after the event. A broadcast counts once against bot.max_sends; more
// chats than bot.max_broadcast (default 10000) is ErrTooLarge. WithAt holds
// every send until then and WithMedia attaches one item; WithIdempotencyKey
// does not apply (keyPrefix names the keys) and is ignored. WithButtons and
// WithList are passed on, and the host refuses them (ErrBadPayload: a
// broadcast carries no choices).
//
// Errors are *HostError: ErrBadPayload for no chats, an empty chat or
// keyPrefix, no text and no media, a negative time or a control character in
// a chat or keyPrefix; ErrTooLarge; ErrUnsupported from a host without
// broadcast (a module that calls Broadcast imports it, so it loads only on a
// host that has it); ErrHostError when the journal fails or past
// bot.max_sends.
func (c *Context) Broadcast(chats []string, text, keyPrefix string, opts ...SendOption) (BroadcastResult, error) {
	if c.replaying {
		// As a flow's sends: the host numbers a broadcast like a send.
		return BroadcastResult{Replayed: true}, nil
	}
	r := sendRequest{Text: text}
	for _, o := range opts {
		o(&r)
	}
	b := encodeBroadcastRequest(chats, r, keyPrefix)
	out, err := result("broadcast", hostBroadcast(ptr(b), int32(len(b))))
	if err != nil {
		return BroadcastResult{}, err
	}
	res, err := decodeBroadcastResult(out)
	if err != nil {
		return BroadcastResult{}, fmt.Errorf("botrun.broadcast: bad result: %w", err)
	}
	return res, nil
}

// Log writes an info line to the host log, tagged with the event.
func (c *Context) Log(format string, args ...any) { logf(LevelInfo, format, args...) }

// Logf is Log at a level: LevelDebug, LevelInfo, LevelWarn or LevelError.
func (c *Context) Logf(level int32, format string, args ...any) { logf(level, format, args...) }

// StateGet reads a conversation state value; ok is false when it is absent
// (NOT_FOUND). Every other code is an error (a *HostError), never absence:
// UNSUPPORTED, TOO_LARGE, BAD_PAYLOAD, HOST_ERROR.
func (c *Context) StateGet(key string) (value []byte, ok bool, err error) {
	k := []byte(key)
	n := hostStateGet(ptr(k), int32(len(k)))
	if Code(n) == CodeNotFound {
		return nil, false, nil
	}
	v, err := result("state_get", n)
	return v, err == nil, err
}

// StateSet writes a conversation state value; it commits with the event.
func (c *Context) StateSet(key string, value []byte) error {
	k := []byte(key)
	return check("state_set", hostStateSet(ptr(k), int32(len(k)), ptr(value), int32(len(value))))
}

// StateDelete removes a conversation state value; it commits with the event.
func (c *Context) StateDelete(key string) error {
	k := []byte(key)
	return check("state_delete", hostStateDelete(ptr(k), int32(len(k))))
}

// MediaUnavailableError is returned by LoadMedia when the media's bytes cannot
// be had. Reason is "not-durable" (the channel's reference did not survive a
// restart and was not journaled), "provider-mismatch" (the stored reference
// belongs to another provider) or "rehydrate-failed" (the stored reference did
// not validate, or the channel no longer has the file). The message is
// processed all the same; only the download failed.
type MediaUnavailableError struct {
	Reason  string
	Message string
}

func (e *MediaUnavailableError) Error() string {
	if e.Message == "" {
		return "media unavailable: " + e.Reason
	}
	return "media unavailable: " + e.Reason + ": " + e.Message
}

// Is makes errors.Is(err, ErrMediaUnavailable) work.
func (e *MediaUnavailableError) Is(target error) bool { return target == ErrMediaUnavailable }

// Reasons of a MediaUnavailableError (abi/SPEC.md section 4).
const (
	ReasonNotDurable       = "not-durable"
	ReasonProviderMismatch = "provider-mismatch"
	ReasonRehydrateFailed  = "rehydrate-failed"
)

// LoadMedia downloads the bytes of Event.Media[index] through the host. It
// fails with a *MediaUnavailableError (errors.As) when the media cannot be
// had, and with a *HostError otherwise: ErrUnsupported when the event's
// channel cannot download media, ErrNotFound for an index the event does not
// have, ErrTooLarge over 20 MiB.
func (c *Context) LoadMedia(index int) ([]byte, error) {
	n := hostMediaLoad(int32(index))
	if Code(n) == CodeMediaUnavailable {
		// The reason is a JSON object of at most 1 KiB (SPEC.md section 4).
		b := make([]byte, 1024)
		got := hostResultRead(ptr(b), int32(len(b)))
		if got < 0 {
			return nil, &HostError{Func: "result_read", Code: Code(got)}
		}
		e, err := decodeMediaUnavailable(b[:got])
		if err != nil {
			return nil, fmt.Errorf("botrun.media_load: bad result: %w", err)
		}
		return nil, e
	}
	return result("media_load", n)
}

// ChannelError is returned by Edit and Typing when the channel refused or
// failed the call (CHANNEL_FAILED): Message is the channel's error, as the
// host gives it (cut to at most 512 bytes). The event goes on: it is not a
// host failure, and nothing is retried.
type ChannelError struct {
	// Func is the host function that answered: "edit" or "typing".
	Func    string
	Message string
}

func (e *ChannelError) Error() string {
	if e.Message == "" {
		return "botrun." + e.Func + ": CHANNEL_FAILED"
	}
	return "botrun." + e.Func + ": CHANNEL_FAILED: " + e.Message
}

// Is makes errors.Is(err, ErrChannelFailed) work.
func (e *ChannelError) Is(target error) bool { return target == ErrChannelFailed }

// Edit replaces the text of a message the bot sent in chat: message is the
// Ref its Send returned (a Post's send is made after the handler returns, so
// its ref is not known: Send what you mean to edit). The channel edits it
// now; the edit is not journaled (a retry of the event edits again, which
// changes nothing), takes no number in the event's derived keys and does not
// count against bot.max_sends.
//
// Errors: a *ChannelError (ErrChannelFailed) when the channel refused or
// failed it, with the channel's message (the event goes on); ErrUnsupported
// when the channel cannot edit (WhatsApp, Twilio) or the host has no edit;
// ErrBadPayload for an empty chat, message or text, or a chat or message
// that is not printable; ErrTooLarge over 1 MiB. While a flow replays a
// step already taken (see Flow) it makes no call and returns nil.
func (c *Context) Edit(chat, message, text string) error {
	if c.replaying {
		return nil // the step's edit was made with the message that took it
	}
	b := encodeEditRequest(chat, message, text)
	return channelOp("edit", hostEdit(ptr(b), int32(len(b))))
}

// Typing shows "typing…" in chat for a few seconds (or until the bot's next
// message), where the channel has it: webchat, Telegram, and WhatsApp (which
// shows it in answer to the event's message, and marks that message read).
// Like Edit it is not journaled and not counted as a send, and its errors
// are Edit's (ErrUnsupported on Twilio, or a host without typing). A bot
// usually ignores them: the indicator is a courtesy. While a flow replays a
// step already taken it makes no call and returns nil.
func (c *Context) Typing(chat string) error {
	if c.replaying {
		return nil
	}
	b := encodeTypingRequest(chat)
	return channelOp("typing", hostTyping(ptr(b), int32(len(b))))
}

// channelOp is the answer of edit or typing (fn): nil, a *ChannelError with
// the pending result's message, or a *HostError.
func channelOp(fn string, n int32) error {
	if Code(n) != CodeChannelFailed {
		return check(fn, n)
	}
	// The host cuts the channel's message to 512 bytes; escaped in JSON
	// (\u003c for '<') that is at most about 3 KiB.
	b := make([]byte, 4096)
	got := hostResultRead(ptr(b), int32(len(b)))
	if got < 0 {
		return &HostError{Func: "result_read", Code: Code(got)}
	}
	msg, err := decodeChannelError(b[:got])
	if err != nil {
		return fmt.Errorf("botrun.%s: bad result: %w", fn, err)
	}
	return &ChannelError{Func: fn, Message: msg}
}

// NowMs is the event's time in milliseconds: the deterministic clock.
func NowMs() int64 { return hostNowMs() }

func logf(level int32, format string, args ...any) {
	b := []byte(fmt.Sprintf(format, args...))
	hostLog(level, ptr(b), int32(len(b)))
}

func check(fn string, n int32) error {
	if n < 0 {
		return &HostError{Func: fn, Code: Code(n)}
	}
	return nil
}

// result pulls a host result of length n.
func result(fn string, n int32) ([]byte, error) {
	if n < 0 {
		return nil, &HostError{Func: fn, Code: Code(n)}
	}
	buf := make([]byte, n)
	if n > 0 {
		if got := hostResultRead(ptr(buf), n); got != n {
			if got >= 0 {
				got = int32(CodeNoResult) // a short read: the result is not the one announced
			}
			return nil, &HostError{Func: "result_read", Code: Code(got)}
		}
	}
	return buf, nil
}

func ptr(b []byte) unsafe.Pointer {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Pointer(&b[0])
}

func onEvent(n int32) int32 {
	buf := make([]byte, n)
	if got := hostEventRead(ptr(buf), n); got != n {
		logf(LevelError, "botrun sdk: event_read returned %d, want %d", got, n)
		return 1
	}
	ev, err := decodeEvent(buf)
	if err != nil {
		logf(LevelError, "botrun sdk: bad event: %v", err)
		return 1
	}
	ctx := &Context{Event: ev}
	if handler == nil {
		logf(LevelError, "botrun sdk: no handler registered: call bot.Handle from an init function (main never runs in a reactor)")
		return 1
	}
	if err := handler(ctx); err != nil {
		logf(LevelError, "%v", err)
		return 1
	}
	return 0
}
