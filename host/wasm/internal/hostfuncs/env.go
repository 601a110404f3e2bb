package hostfuncs

import (
	"context"
	"errors"

	"github.com/botrun/botrun/abi"
)

// Env answers the host calls a guest makes while it handles one event. The
// host's send path implements it; errors returned by Env are host failures
// (HOST_ERROR to the guest, and the event's attempt fails).
type Env interface {
	// Send delivers req through the outbox and reports the outcome.
	Send(ctx context.Context, req abi.SendRequest) (abi.SendResult, error)
	// Enqueue journals req for the sweeper and returns at once.
	Enqueue(ctx context.Context, req abi.SendRequest) (abi.SendResult, error)
	// Post numbers and keys req and returns at once (status queued); the
	// host makes the send when the handler returns, so the wait for the
	// journal and the channel holds no instance.
	Post(ctx context.Context, req abi.SendRequest) (abi.SendResult, error)
	// StateGet reads a conversation state value; ok is false when absent.
	StateGet(ctx context.Context, key string) (value []byte, ok bool, err error)
	// StateSet buffers a state write; ErrStateTooLarge refuses it (the
	// guest sees TOO_LARGE).
	StateSet(ctx context.Context, key string, value []byte) error
	// StateDelete buffers a state delete; ErrStateTooLarge refuses it.
	StateDelete(ctx context.Context, key string) error
	// LoadMedia downloads the bytes of the event's media[index]. An
	// *abi.MediaUnavailableError reaches the guest with its reason; ErrNoMedia
	// is NOT_FOUND, ErrMediaTooLarge TOO_LARGE, ErrUnsupported UNSUPPORTED,
	// any other error a host failure.
	LoadMedia(ctx context.Context, index int) ([]byte, error)
}

// Broadcaster is implemented by an Env that can broadcast (the ABI's
// broadcast host function; without it the guest gets UNSUPPORTED).
// ErrTooLarge refuses a broadcast over the host's limit (TOO_LARGE).
type Broadcaster interface {
	Broadcast(ctx context.Context, req abi.BroadcastRequest) (abi.BroadcastResult, error)
}

// Editor is implemented by an Env that can edit a sent message and show
// "typing…" (the ABI's edit and typing; without it the guest gets
// UNSUPPORTED). ErrUnsupported says the channel cannot; any other error is
// the channel's failure: the guest gets CHANNEL_FAILED and the event goes
// on.
type Editor interface {
	Edit(ctx context.Context, req abi.EditRequest) error
	Typing(ctx context.Context, req abi.TypingRequest) error
}

// Fetcher is implemented by an Env that can call the configured APIs (the
// ABI's fetch; without it the guest gets UNSUPPORTED). ErrNoAPI answers an
// API the config does not name (NOT_FOUND), ErrTooLarge a call past
// bot.max_fetches (TOO_LARGE), an *abi.FetchError a call that got no
// response (FETCH_FAILED), an error wrapping abi.ErrBadPayload a request
// the host refuses (BAD_PAYLOAD); any other error is a host failure.
type Fetcher interface {
	Fetch(ctx context.Context, req abi.FetchRequest) (abi.FetchResponse, error)
}

// ErrNoAPI is returned by Fetcher.Fetch for an API no [[apis]] entry names.
var ErrNoAPI = errors.New("no [[apis]] entry has that name")

// ErrTooLarge is returned by Env calls for a request over a host limit (a
// broadcast to more chats than bot.max_broadcast, a send or broadcast past
// bot.max_event_bytes); the guest sees TOO_LARGE.
var ErrTooLarge = errors.New("the request is over the host's limit")

// ErrNoMedia is returned by Env.LoadMedia for an index the event does not have.
var ErrNoMedia = errors.New("the event has no media at that index")

// ErrMediaTooLarge is returned by Env.LoadMedia for a file over abi.MaxMedia;
// the guest sees TOO_LARGE.
var ErrMediaTooLarge = errors.New("the media file is larger than the ABI's limit")

// ErrStateTooLarge is returned by Env.StateSet and Env.StateDelete for a
// write over the host's state limits (per event, or the chat's quota); the
// guest sees TOO_LARGE and nothing is buffered.
var ErrStateTooLarge = errors.New("the state write is over the host's state limits")

// ErrUnsupported is returned by an Env that does not offer a function yet; the
// guest sees UNSUPPORTED.
var ErrUnsupported = errors.New("unsupported by this host")
