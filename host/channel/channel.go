// Package channel is the channel SPI: the small Channel interface every
// channel implements, the optional interfaces a channel may add, the types
// that cross it (Message, Outbound, Media, Env, Admission), the registry of
// channel types (Register, Lookup, Types) and the error taxonomy of a send
// (the permanent sentinels, RateLimitedError, PermanentError; the toolkit's
// Permanent, MediaGone and RetryAfter read them). It holds
// nothing else: the helpers channels share are the toolkit
// host/channel/httpkit, the bases only some channels share live under
// host/channel/internal, and the contract suite is host/channel/channeltest.
//
// A channel type registers itself (Register) with its config struct, its
// checks and its constructor; the host builds every [[channels]] entry
// through that registry and knows no channel by name. The guide to adding a
// channel is docs/adding-a-channel.md.
//
// channel imports the standard library, abi (the choices a message
// carries), durability's Kv and Write (a channel's own store) and
// internal/registry: channels know nothing of the journals or the WASM
// engine, and the SPI imports no channel and no toolkit.
package channel

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/durability"
)

// Message is one inbound message as a channel parsed it.
type Message struct {
	// ID is the channel's message id, unique within the provider; admission
	// deduplicates on it. Empty means the channel has none: the host makes one.
	ID string
	// Chat is the conversation the message belongs to.
	Chat string
	// From is the sender.
	From string
	// Text is the message text.
	Text string
	// Media are the attachments.
	Media []Media
	// ReceivedAt is when the channel received it; zero means now.
	ReceivedAt time.Time
	// Interaction is set for the press of a button or a list row the bot
	// sent (Text may be empty: the host puts the title there).
	Interaction *abi.Interaction
}

// Media is an attachment: a channel reference inbound; a reference or a public
// URL outbound.
type Media struct {
	Type    string
	Ref     string
	URL     string
	MIME    string
	Caption string
}

// Outbound is one message to send.
type Outbound struct {
	Chat  string
	Text  string
	Media *Media
	// Key is the send's idempotency key as the outbox journals it (a long
	// text's later parts are "<key>#2", …). A channel that can deduplicate
	// on it passes it along (a header, a nonce); the others ignore it.
	Key string
	// Buttons and List are the choices under the message (abi.SendRequest's,
	// checked against the ABI's rules). A channel shows them as it can, and
	// refuses with ErrUnsupportedContent what it cannot show (never a
	// silent cut).
	Buttons []abi.Button
	List    *abi.List
}

// Channel sends messages on one channel. Send must be safe for concurrent use.
type Channel interface {
	// ID is the provider's id from bot.toml.
	ID() string
	// Send delivers msg and returns the channel's message id.
	Send(ctx context.Context, msg Outbound) (ref string, err error)
}

// The ambiguous window: a send is ambiguous when the process dies after the
// channel accepted it and before the outbox recorded it. A channel closes
// that window with one of these optional interfaces; the host then settles
// an ambiguous send itself, whatever durability.outbox.on_ambiguous says.

// Idempotent is implemented by a channel whose sends can be idempotent under
// their Outbound.Key: when IdempotentSends is true, sending one key twice
// delivers it once (a gateway that deduplicates, a nonce the API enforces),
// so the host resends an ambiguous send under the same key.
type Idempotent interface {
	IdempotentSends() bool
}

// Reconciler is implemented by a channel that can look up what it sent: the
// host asks it whether an ambiguous send was delivered, and records it sent,
// or sends it again, before any policy applies. An error leaves the send
// ambiguous to be asked again later.
type Reconciler interface {
	Reconcile(ctx context.Context, msg Outbound) (delivered bool, err error)
}

// Transactional is implemented by a channel whose delivery is a write to the
// host's own store (webchat's transcript in the backend's Kv): the host
// commits PrepareSend's writes in the same commit that records the send
// sent, so a send is delivered and recorded together or not at all, and a
// send a crash left in flight was never delivered. PrepareSend returns
// ErrNotTransactional when it cannot deliver by writes (no Kv): the host
// calls Send. retry is true when the writes of an earlier PrepareSend
// conflicted. Delivered is called after the writes committed.
type Transactional interface {
	PrepareSend(ctx context.Context, msg Outbound, retry bool) (ref string, writes []durability.Write, err error)
	Delivered(msg Outbound, ref string)
}

// ErrNotTransactional is returned by PrepareSend when the channel cannot
// deliver this send by writes.
var ErrNotTransactional = errors.New("the channel cannot deliver by writes")

// Editor is implemented by a channel that can change the text of a message it
// sent: ref is the id its Send returned. Edits are not journaled (an edit is
// idempotent); an error reaches the guest and the event goes on.
type Editor interface {
	Edit(ctx context.Context, chat, ref, text string) error
}

// Typist is implemented by a channel that can show "typing…" in a chat.
// replyTo is the channel's id of the message being answered (WhatsApp's
// indicator needs it). It is transient and not journaled.
type Typist interface {
	Typing(ctx context.Context, chat, replyTo string) error
}

// Admission is the host's answer to an inbound message.
type Admission struct {
	// ID is the inbound record id ("<provider id>:<message id>").
	ID string
	// Duplicate is true when the message id was already admitted; it is not
	// processed again.
	Duplicate bool
}

// Admitter is the host side of inbound: a channel calls Admit for each parsed
// message and answers its transport only after Admit returns without error.
// An error matching ErrInvalidMessage is final: redelivering the message
// cannot make it valid, so the channel acknowledges (or refuses with 400)
// instead of asking for a redelivery.
type Admitter interface {
	Admit(ctx context.Context, provider string, msg Message) (Admission, error)
}

// ErrInvalidMessage is matched by an Admit error for a message botrun will
// never accept: an id, chat or sender with a NUL or another control character.
var ErrInvalidMessage = errors.New("invalid message")

// Router is implemented by a provider that serves HTTP (webhooks, pages). Its
// routes are mounted on the [http] listen address.
type Router interface {
	Routes(mux *http.ServeMux)
}

// StoredRef is a provider's durable, versioned media reference as the inbox
// journals it. It never holds credentials: those are added again at download.
type StoredRef struct {
	V    int             `json:"v"`
	Data json.RawMessage `json:"data"`
}

// MediaRefCodec is implemented by a provider whose live media references
// cannot be journaled as they are. SerializeMediaRef returns the stored form,
// or false when the media cannot be made durable; RehydrateMediaRef validates a
// stored form (unknown version, bad or tampered data is an error) and rebuilds
// the reference, without needing the transport connected.
type MediaRefCodec interface {
	SerializeMediaRef(m Media) (StoredRef, bool)
	RehydrateMediaRef(s StoredRef) (Media, error)
}

// MediaLoader is implemented by a provider that downloads inbound media: the
// bytes of m (its Ref as the channel gave it, or as RehydrateMediaRef rebuilt
// it), at most max bytes. An error wrapping ErrMediaUnavailable, or a
// permanent one (httpkit.MediaGone tells), is final: the channel no longer
// has the file, or the reference is refused; any other error is worth a
// retry.
type MediaLoader interface {
	LoadMedia(ctx context.Context, m Media, max int64) ([]byte, error)
}
