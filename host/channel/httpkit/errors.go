package httpkit

import (
	"errors"
	"time"

	"github.com/botrun/botrun/host/channel"
)

// The classification of a channel's errors, as the host and the channels
// read them: which no retry can mend (Permanent), which mean the media
// cannot be had (MediaGone), and how long a rate limit asks to wait
// (RetryAfter).

// MediaGone reports whether a MediaLoader error means the media cannot be
// had at all: channel.ErrMediaUnavailable, or a permanent channel error (the API
// refused the reference). Any other error is worth a retry.
func MediaGone(err error) bool {
	return errors.Is(err, channel.ErrMediaUnavailable) || Permanent(err)
}

// retryable is implemented by an error that knows whether a retry can
// succeed (a Retryable() bool method); Retryable() == false sends the record
// to the dead-letter queue.
type retryable interface {
	Retryable() bool
}

// Permanent reports whether err can never succeed on a retry: one of the
// permanent sentinels, or an error in err's chain with a Retryable() bool
// method that answers false (channel.PermanentError, or an error type of the
// channel's or the host's own).
func Permanent(err error) bool {
	for _, p := range []error{channel.ErrUnsupportedContent, channel.ErrPayloadTooLarge, channel.ErrOutsideSessionWindow, channel.ErrRecipientUnreachable} {
		if errors.Is(err, p) {
			return true
		}
	}
	var r retryable
	return errors.As(err, &r) && !r.Retryable()
}

// RetryAfter returns the wait a channel.RateLimitedError asks for, or 0.
func RetryAfter(err error) time.Duration {
	var rl *channel.RateLimitedError
	if errors.As(err, &rl) {
		return rl.RetryAfter
	}
	return 0
}
