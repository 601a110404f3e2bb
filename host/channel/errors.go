package channel

import (
	"errors"
	"fmt"
	"time"
)

// Permanent errors: a send that fails with one of these (errors.Is) goes
// straight to the dead-letter queue, without retries.
var (
	ErrUnsupportedContent   = errors.New("unsupported content")
	ErrPayloadTooLarge      = errors.New("payload too large")
	ErrOutsideSessionWindow = errors.New("outside the session window")
	ErrRecipientUnreachable = errors.New("recipient unreachable")
)

// ErrMediaUnavailable is wrapped by a MediaLoader error that no retry can
// mend: the channel does not have the file (any more), or the reference is
// not one botrun may fetch.
var ErrMediaUnavailable = errors.New("media unavailable")

// ErrMediaTooLarge is wrapped by a MediaLoader error for a file over the
// size limit; it is an ErrMediaUnavailable too.
var ErrMediaTooLarge = fmt.Errorf("%w: larger than the size limit", ErrMediaUnavailable)

// RateLimitedError asks the caller to wait at least RetryAfter before the next
// attempt.
type RateLimitedError struct {
	RetryAfter time.Duration
	Err        error
}

func (e *RateLimitedError) Error() string {
	return fmt.Sprintf("rate limited (retry after %s): %v", e.RetryAfter, e.Err)
}

// Unwrap returns the channel's error.
func (e *RateLimitedError) Unwrap() error { return e.Err }

// PermanentError is a channel error no retry can mend that none of the
// sentinels names (a revoked token, a locked account, a policy block).
type PermanentError struct{ Err error }

func (e *PermanentError) Error() string { return e.Err.Error() }

// Unwrap returns the channel's error.
func (e *PermanentError) Unwrap() error { return e.Err }

// Retryable reports that no retry can mend e: never (httpkit.Permanent
// reads it).
func (e *PermanentError) Retryable() bool { return false }
