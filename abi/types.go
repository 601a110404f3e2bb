package abi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
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
}

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
	if len(b) > MaxPayload {
		return r, fmt.Errorf("%w: send request is %d bytes (limit %d)", ErrBadPayload, len(b), MaxPayload)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return SendRequest{}, fmt.Errorf("%w: send request: %v", ErrBadPayload, err)
	}
	if dec.More() {
		return SendRequest{}, fmt.Errorf("%w: send request: trailing data after the JSON object", ErrBadPayload)
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
	if err := CheckName("\"idempotency_key\"", r.IdempotencyKey); err != nil {
		return SendRequest{}, fmt.Errorf("%w: send request: %w", ErrBadPayload, err)
	}
	if r.Media != nil {
		if err := r.Media.validate(); err != nil {
			return SendRequest{}, err
		}
	}
	return r, nil
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
}

// DecodeBroadcastRequest parses and validates a broadcast request from
// untrusted bytes. Every error wraps ErrBadPayload.
func DecodeBroadcastRequest(b []byte) (BroadcastRequest, error) {
	var r BroadcastRequest
	if len(b) > MaxPayload {
		return r, fmt.Errorf("%w: broadcast request is %d bytes (limit %d)", ErrBadPayload, len(b), MaxPayload)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return BroadcastRequest{}, fmt.Errorf("%w: broadcast request: %v", ErrBadPayload, err)
	}
	if dec.More() {
		return BroadcastRequest{}, fmt.Errorf("%w: broadcast request: trailing data after the JSON object", ErrBadPayload)
	}
	switch {
	case len(r.Chats) == 0:
		return BroadcastRequest{}, fmt.Errorf("%w: broadcast request: \"chats\" is required", ErrBadPayload)
	case r.KeyPrefix == "":
		return BroadcastRequest{}, fmt.Errorf("%w: broadcast request: \"key_prefix\" is required (the keys are <key_prefix>:<chat>)", ErrBadPayload)
	case r.Text == "" && r.Media == nil:
		return BroadcastRequest{}, fmt.Errorf("%w: broadcast request: \"text\" or \"media\" is required", ErrBadPayload)
	case r.At < 0:
		return BroadcastRequest{}, fmt.Errorf("%w: broadcast request: \"at\" %d is negative", ErrBadPayload, r.At)
	}
	if err := CheckName("\"key_prefix\"", r.KeyPrefix); err != nil {
		return BroadcastRequest{}, fmt.Errorf("%w: broadcast request: %w", ErrBadPayload, err)
	}
	for i, c := range r.Chats {
		if c == "" {
			return BroadcastRequest{}, fmt.Errorf("%w: broadcast request: chats[%d] is empty", ErrBadPayload, i)
		}
		if err := CheckName(fmt.Sprintf("chats[%d]", i), c); err != nil {
			return BroadcastRequest{}, fmt.Errorf("%w: broadcast request: %w", ErrBadPayload, err)
		}
	}
	if r.Media != nil {
		if err := r.Media.validate(); err != nil {
			return BroadcastRequest{}, err
		}
	}
	return r, nil
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
