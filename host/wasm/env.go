package wasm

import "github.com/botrun/botrun/host/wasm/internal/hostfuncs"

// Env answers the host calls a guest makes while it handles one event. The
// host's send path implements it; errors returned by Env are host failures
// (HOST_ERROR to the guest, and the event's attempt fails), except
// ErrTooLarge, ErrNoMedia, ErrMediaTooLarge, ErrStateTooLarge and
// ErrUnsupported, which answer the guest with a status. Its methods are
// documented in internal/hostfuncs, with the host functions that call them.
type Env = hostfuncs.Env

// Broadcaster is implemented by an Env that can broadcast (the ABI's
// broadcast host function; without it the guest gets UNSUPPORTED).
type Broadcaster = hostfuncs.Broadcaster

// Editor is implemented by an Env that can edit a sent message and show
// "typing…" (the ABI's edit and typing; without it the guest gets
// UNSUPPORTED).
type Editor = hostfuncs.Editor

// Fetcher is implemented by an Env that can call the configured APIs (the
// ABI's fetch; without it the guest gets UNSUPPORTED).
type Fetcher = hostfuncs.Fetcher

// The errors an Env returns to answer the guest with a status rather than
// fail the event.
var (
	// ErrTooLarge refuses a request over a host limit: TOO_LARGE.
	ErrTooLarge = hostfuncs.ErrTooLarge
	// ErrNoMedia is Env.LoadMedia's for an index the event does not have:
	// NOT_FOUND.
	ErrNoMedia = hostfuncs.ErrNoMedia
	// ErrMediaTooLarge is Env.LoadMedia's for a file over abi.MaxMedia:
	// TOO_LARGE.
	ErrMediaTooLarge = hostfuncs.ErrMediaTooLarge
	// ErrStateTooLarge refuses a state write over the host's state limits:
	// TOO_LARGE, and nothing is buffered.
	ErrStateTooLarge = hostfuncs.ErrStateTooLarge
	// ErrUnsupported is an Env's for a function it does not offer:
	// UNSUPPORTED.
	ErrUnsupported = hostfuncs.ErrUnsupported
	// ErrNoAPI is Fetcher.Fetch's for an API no [[apis]] entry names:
	// NOT_FOUND.
	ErrNoAPI = hostfuncs.ErrNoAPI
)
