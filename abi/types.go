package abi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Event is one inbound message as the guest sees it.
type Event struct {
	ID         string  `json:"id"`
	Provider   string  `json:"provider"`
	Chat       string  `json:"chat"`
	From       string  `json:"from"`
	Text       string  `json:"text"`
	Media      []Media `json:"media"`
	Attempt    int     `json:"attempt"`
	ReceivedAt int64   `json:"received_at"`
	// Kind is "" (a message) or "interaction": the press of a button or a
	// list row the bot sent. Text then holds the pressed title too, so a
	// module that knows no interactions reads the press as a message.
	Kind string `json:"kind,omitempty"`
	// Interaction is the press, for kind "interaction".
	Interaction *Interaction `json:"interaction,omitempty"`
}

// EventInteraction is Event.Kind for the press of a button or a list row.
const EventInteraction = "interaction"

// Interaction is the press of a reply button or a list row.
type Interaction struct {
	// ID is the button's or row's id, as the send gave it.
	ID string `json:"id"`
	// Title is its title, when the channel says.
	Title string `json:"title,omitempty"`
	// Message is the channel's id of the message it was on (the ref its
	// send returned), when the channel says.
	Message string `json:"message,omitempty"`
}

// Button is one button under a message: a reply button (ID, pressed it
// arrives as an interaction) or a URL button (URL, opened by the user's app).
type Button struct {
	ID    string `json:"id,omitempty"`
	Title string `json:"title"`
	URL   string `json:"url,omitempty"`
}

// List is a menu of rows to pick one from, opened by a button titled Button.
type List struct {
	Button   string        `json:"button"`
	Sections []ListSection `json:"sections"`
}

// ListSection is a titled group of rows.
type ListSection struct {
	Title string    `json:"title,omitempty"`
	Rows  []ListRow `json:"rows"`
}

// ListRow is one choice of a List; picked, it arrives as an interaction.
type ListRow struct {
	ID          string `json:"id"`
	Title       string `json:"title"`
	Description string `json:"description,omitempty"`
}

// Limits of a send's buttons and list, whatever the channel; each channel
// refuses at send time what it cannot show (UnsupportedContent).
const (
	MaxButtons  = 16
	MaxListRows = 100
	// MaxChoiceID bounds a button's or row's id, in bytes.
	MaxChoiceID = 256
)

// Media is one attachment: inbound it carries the provider's ref, outbound a ref
// or a public URL.
type Media struct {
	Type    string `json:"type"`
	Ref     string `json:"ref,omitempty"`
	URL     string `json:"url,omitempty"`
	MIME    string `json:"mime,omitempty"`
	Caption string `json:"caption,omitempty"`
}

// SendRequest is what a guest passes to send, enqueue and post.
type SendRequest struct {
	Chat           string `json:"chat"`
	Text           string `json:"text"`
	Media          *Media `json:"media"`
	IdempotencyKey string `json:"idempotency_key"`
	// At holds an enqueued send until this time (Unix milliseconds): the
	// outbox keeps it, across restarts, and sends it once when it is due.
	// Only enqueue takes it; 0 (or a past time) sends as soon as possible.
	At int64 `json:"at,omitempty"`
	// Buttons go under the message: reply buttons, or URL buttons.
	Buttons []Button `json:"buttons,omitempty"`
	// List is a menu of rows under the message (not with Buttons).
	List *List `json:"list,omitempty"`
}

// SendStatus is the outcome of a send.
type SendStatus string

// Send outcomes, as SPEC.md section 2 defines them.
const (
	SendSent     SendStatus = "sent"
	SendDeduped  SendStatus = "deduped"
	SendDeferred SendStatus = "deferred"
	SendDead     SendStatus = "dead"
	SendBypassed SendStatus = "bypassed"
	// SendQueued answers post: the send is numbered and keyed, and the host
	// makes it when the handler returns.
	SendQueued SendStatus = "queued"
	// SendScheduled answers an enqueue with a future "at": the send is
	// journaled and held until then.
	SendScheduled SendStatus = "scheduled"
	// SendCancelled answers a send the module's botrun_before_send
	// cancelled: nothing was journaled or sent.
	SendCancelled SendStatus = "cancelled"
)

// SendResult is what the host answers to send, enqueue and post.
type SendResult struct {
	Status SendStatus `json:"status"`
	Key    string     `json:"key"`
	Ref    string     `json:"ref"`
	Error  string     `json:"error"`
}

// MediaTypes lists the media types the ABI knows.
var MediaTypes = []string{"image", "audio", "video", "document", "sticker"}

// ErrBadPayload is wrapped by every decoding error of a guest payload.
var ErrBadPayload = errors.New("bad payload")

// DecodeSendRequest parses and validates a SendRequest from untrusted guest
// bytes. Unknown fields, trailing data, a missing chat, a request with
// neither text nor media, a chat or key with a control character, and a media
// of an unknown type or with neither ref nor url are errors wrapping
// ErrBadPayload. Field names also match case-insensitively (encoding/json);
// SPEC.md does not guarantee it.
func DecodeSendRequest(b []byte) (SendRequest, error) {
	var r SendRequest
	if err := decodeStrict(b, "send request", &r); err != nil {
		return SendRequest{}, err
	}
	if r.Chat == "" {
		return SendRequest{}, fmt.Errorf("%w: send request: \"chat\" is required", ErrBadPayload)
	}
	if r.At < 0 {
		return SendRequest{}, fmt.Errorf("%w: send request: \"at\" %d is negative (Unix milliseconds, or 0 for now)", ErrBadPayload, r.At)
	}
	if r.Text == "" && r.Media == nil {
		return SendRequest{}, fmt.Errorf("%w: send request: \"text\" or \"media\" is required", ErrBadPayload)
	}
	if err := CheckName("\"chat\"", r.Chat); err != nil {
		return SendRequest{}, fmt.Errorf("%w: send request: %w", ErrBadPayload, err)
	}
	if err := CheckKey("\"idempotency_key\"", r.IdempotencyKey); err != nil {
		return SendRequest{}, fmt.Errorf("%w: send request: %w", ErrBadPayload, err)
	}
	if r.Media != nil {
		if err := r.Media.validate(); err != nil {
			return SendRequest{}, err
		}
	}
	if err := ValidateChoices(r.Buttons, r.List); err != nil {
		return SendRequest{}, err
	}
	return r, nil
}

// ValidateChoices checks a send's buttons and list against the ABI's rules
// (every channel's): each wraps ErrBadPayload.
func ValidateChoices(buttons []Button, list *List) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: send request: %s", ErrBadPayload, fmt.Sprintf(format, args...))
	}
	if len(buttons) > 0 && list != nil {
		return bad("\"buttons\" and \"list\" cannot go on one message")
	}
	if len(buttons) > MaxButtons {
		return bad("%d buttons, over %d", len(buttons), MaxButtons)
	}
	checkID := func(what, id string) error {
		if id == "" {
			return bad("%s has no id", what)
		}
		if len(id) > MaxChoiceID {
			return bad("%s id is %d bytes, over %d", what, len(id), MaxChoiceID)
		}
		if err := CheckName(what+" id", id); err != nil {
			return fmt.Errorf("%w: send request: %w", ErrBadPayload, err)
		}
		return nil
	}
	for i, b := range buttons {
		what := fmt.Sprintf("buttons[%d]", i)
		switch {
		case b.Title == "":
			return bad("%s has no title", what)
		case b.ID != "" && b.URL != "":
			return bad("%s has both an id (reply button) and a url (URL button): pick one", what)
		case b.URL != "":
			if u, err := url.Parse(b.URL); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
				return bad("%s url %q is not an http(s) URL", what, b.URL)
			}
		default:
			if err := checkID(what, b.ID); err != nil {
				return err
			}
		}
	}
	if list == nil {
		return nil
	}
	if list.Button == "" {
		return bad("list.button (the title of the button that opens the list) is empty")
	}
	rows := 0
	if len(list.Sections) == 0 {
		return bad("list has no sections")
	}
	for i, sec := range list.Sections {
		if len(sec.Rows) == 0 {
			return bad("list.sections[%d] has no rows", i)
		}
		for j, r := range sec.Rows {
			what := fmt.Sprintf("list.sections[%d].rows[%d]", i, j)
			if r.Title == "" {
				return bad("%s has no title", what)
			}
			if err := checkID(what, r.ID); err != nil {
				return err
			}
			rows++
		}
	}
	if rows > MaxListRows {
		return bad("list has %d rows, over %d", rows, MaxListRows)
	}
	return nil
}

// EditRequest is the JSON argument of edit: replace the text of a message
// the bot sent (Message is the ref its send returned). It is not journaled:
// an edit is idempotent.
type EditRequest struct {
	Chat    string `json:"chat"`
	Message string `json:"message"`
	Text    string `json:"text"`
}

// TypingRequest is the JSON argument of typing: show "typing…" in chat. It
// is transient and not journaled.
type TypingRequest struct {
	Chat string `json:"chat"`
}

// ChannelError is the pending result of CHANNEL_FAILED.
type ChannelError struct {
	Error string `json:"error"`
}

// DecodeEditRequest parses and validates an edit request from untrusted
// bytes. Every error wraps ErrBadPayload.
func DecodeEditRequest(b []byte) (EditRequest, error) {
	var r EditRequest
	if err := decodeStrict(b, "edit request", &r); err != nil {
		return EditRequest{}, err
	}
	switch {
	case r.Chat == "" || r.Message == "" || r.Text == "":
		return EditRequest{}, fmt.Errorf("%w: edit request: \"chat\", \"message\" (the ref its send returned) and \"text\" are required", ErrBadPayload)
	}
	for _, n := range []struct{ what, v string }{{"\"chat\"", r.Chat}, {"\"message\"", r.Message}} {
		if err := CheckName(n.what, n.v); err != nil {
			return EditRequest{}, fmt.Errorf("%w: edit request: %w", ErrBadPayload, err)
		}
	}
	return r, nil
}

// DecodeTypingRequest parses and validates a typing request from untrusted
// bytes. Every error wraps ErrBadPayload.
func DecodeTypingRequest(b []byte) (TypingRequest, error) {
	var r TypingRequest
	if err := decodeStrict(b, "typing request", &r); err != nil {
		return TypingRequest{}, err
	}
	if r.Chat == "" {
		return TypingRequest{}, fmt.Errorf("%w: typing request: \"chat\" is required", ErrBadPayload)
	}
	if err := CheckName("\"chat\"", r.Chat); err != nil {
		return TypingRequest{}, fmt.Errorf("%w: typing request: %w", ErrBadPayload, err)
	}
	return r, nil
}

// decodeStrict decodes one JSON object of known fields, at most MaxPayload
// bytes, into v.
func decodeStrict(b []byte, what string, v any) error {
	if len(b) > MaxPayload {
		return fmt.Errorf("%w: %s is %d bytes (limit %d)", ErrBadPayload, what, len(b), MaxPayload)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrBadPayload, what, err)
	}
	if dec.More() {
		return fmt.Errorf("%w: %s: trailing data after the JSON object", ErrBadPayload, what)
	}
	return nil
}

// BroadcastRequest is the JSON argument of broadcast: one send of text (and
// media) to each chat, journaled under the explicit key
// "<key_prefix>:<chat>", delivered by the sweeper. A chat listed twice is
// sent once.
type BroadcastRequest struct {
	Chats     []string `json:"chats"`
	Text      string   `json:"text"`
	Media     *Media   `json:"media"`
	KeyPrefix string   `json:"key_prefix"`
	// At holds every send until this time (Unix ms), as enqueue's.
	At int64 `json:"at,omitempty"`
}

// BroadcastResult answers broadcast: how many sends were journaled now, and
// how many keys were journaled already (a replay of the event, or an
// earlier broadcast with the same prefix), which are not sent again.
type BroadcastResult struct {
	Journaled int `json:"journaled"`
	Existing  int `json:"existing"`
	// Cancelled counts the chats whose send botrun_before_send cancelled.
	Cancelled int `json:"cancelled,omitempty"`
}

// DecodeBroadcastRequest parses and validates a broadcast request from
// untrusted bytes. Every error wraps ErrBadPayload.
func DecodeBroadcastRequest(b []byte) (BroadcastRequest, error) {
	var r BroadcastRequest
	if err := decodeStrict(b, "broadcast request", &r); err != nil {
		return BroadcastRequest{}, err
	}
	if err := r.Check(); err != nil {
		return BroadcastRequest{}, err
	}
	return r, nil
}

// Check validates a broadcast request however it was decoded. Every error
// wraps ErrBadPayload.
func (r BroadcastRequest) Check() error {
	switch {
	case len(r.Chats) == 0:
		return fmt.Errorf("%w: broadcast request: \"chats\" is required", ErrBadPayload)
	case r.KeyPrefix == "":
		return fmt.Errorf("%w: broadcast request: \"key_prefix\" is required (the keys are <key_prefix>:<chat>)", ErrBadPayload)
	case r.Text == "" && r.Media == nil:
		return fmt.Errorf("%w: broadcast request: \"text\" or \"media\" is required", ErrBadPayload)
	case r.At < 0:
		return fmt.Errorf("%w: broadcast request: \"at\" %d is negative", ErrBadPayload, r.At)
	}
	if err := CheckName("\"key_prefix\"", r.KeyPrefix); err != nil {
		return fmt.Errorf("%w: broadcast request: %w", ErrBadPayload, err)
	}
	for i, c := range r.Chats {
		if c == "" {
			return fmt.Errorf("%w: broadcast request: chats[%d] is empty", ErrBadPayload, i)
		}
		if err := CheckKey(fmt.Sprintf("chats[%d]", i), c); err != nil {
			return fmt.Errorf("%w: broadcast request: %w", ErrBadPayload, err)
		}
	}
	if r.Media != nil {
		return r.Media.validate()
	}
	return nil
}

func (m *Media) validate() error {
	for _, t := range MediaTypes {
		if m.Type == t {
			if m.Ref == "" && m.URL == "" {
				return fmt.Errorf("%w: media: \"ref\" or \"url\" is required", ErrBadPayload)
			}
			return nil
		}
	}
	return fmt.Errorf("%w: media: unknown type %q (want one of %v)", ErrBadPayload, m.Type, MediaTypes)
}

// ErrBadName is matched (errors.Is) by CheckName's errors.
var ErrBadName = errors.New("bad name")

// CheckName reports whether s can name a message, a chat, a sender, an
// idempotency key or a state key: valid UTF-8 without NUL or any other control
// character. Such names become journal keys in every backend (PostgreSQL's
// jsonb refuses NUL), so the host refuses them at admission and in host
// functions. what names the field in the error.
func CheckName(what, s string) error {
	if !utf8.ValidString(s) {
		return fmt.Errorf("%w: %s is not valid UTF-8", ErrBadName, what)
	}
	for i, r := range s {
		if unicode.IsControl(r) {
			return fmt.Errorf("%w: %s has a control character (%U) at byte %d: ids, chats and keys must be printable", ErrBadName, what, r, i)
		}
	}
	return nil
}

// ReservedKeySuffix ends the keys the host journals for itself beside a
// send (its botrun_after_send record): no send key may end with it.
const ReservedKeySuffix = "@after_send"

// CheckKey is CheckName for what becomes the end of an idempotency key (an
// explicit key, a broadcast's chat): it also refuses ReservedKeySuffix.
func CheckKey(what, s string) error {
	if strings.HasSuffix(s, ReservedKeySuffix) {
		return fmt.Errorf("%w: %s ends with %q, which the host reserves for its own records", ErrBadName, what, ReservedKeySuffix)
	}
	return CheckName(what, s)
}

// Names of the send hooks, in SendHook.Hook.
const (
	HookBeforeSend = "before_send"
	HookAfterSend  = "after_send"
)

// SendHook is what a send hook reads with event_read: one send of the
// module, before it is journaled (before_send) or after it was delivered
// (after_send, with Ref).
type SendHook struct {
	// Hook is HookBeforeSend or HookAfterSend.
	Hook string `json:"hook"`
	// Event is the id of the inbound event whose handler made the send.
	Event    string   `json:"event"`
	Provider string   `json:"provider"`
	Chat     string   `json:"chat"`
	Key      string   `json:"key"`
	Text     string   `json:"text"`
	Media    *Media   `json:"media"`
	Buttons  []Button `json:"buttons,omitempty"`
	List     *List    `json:"list,omitempty"`
	// At is an enqueued send's hold time (Unix ms), 0 for now.
	At int64 `json:"at,omitempty"`
	// Ref is the provider's message id of the send's first part
	// (after_send only; "" when the channel gives none).
	Ref string `json:"ref,omitempty"`
	// Time is the hook's clock (Unix ms): the event's received_at for
	// before_send, the delivery time for after_send.
	Time int64 `json:"time"`
}

// DecodeRewrite decodes the SendRequest a before_send hook passes to
// rewrite: a SendRequest without idempotency_key and at, which were chosen
// before the hook ran.
func DecodeRewrite(b []byte) (SendRequest, error) {
	req, err := DecodeSendRequest(b)
	if err != nil {
		return req, err
	}
	if req.IdempotencyKey != "" || req.At != 0 {
		return req, fmt.Errorf("%w: a rewrite cannot change \"idempotency_key\" or \"at\": the key and the time were chosen before before_send", ErrBadPayload)
	}
	return req, nil
}
