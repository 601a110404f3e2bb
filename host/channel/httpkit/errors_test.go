package httpkit_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/channel/httpkit"
)

type flaky struct{ retry bool }

func (f flaky) Error() string   { return "flaky" }
func (f flaky) Retryable() bool { return f.retry }

func TestTaxonomy(t *testing.T) {
	for _, tt := range []struct {
		err       error
		permanent bool
		after     time.Duration
	}{
		{fmt.Errorf("telegram 400: %w", channel.ErrUnsupportedContent), true, 0},
		{fmt.Errorf("x: %w", channel.ErrPayloadTooLarge), true, 0},
		{fmt.Errorf("x: %w", channel.ErrOutsideSessionWindow), true, 0},
		{fmt.Errorf("x: %w", channel.ErrRecipientUnreachable), true, 0},
		{flaky{retry: false}, true, 0},
		{fmt.Errorf("wrapped: %w", flaky{retry: false}), true, 0},
		{flaky{retry: true}, false, 0},
		{errors.New("503"), false, 0},
		{&channel.RateLimitedError{RetryAfter: 3 * time.Second, Err: errors.New("429")}, false, 3 * time.Second},
	} {
		if got := httpkit.Permanent(tt.err); got != tt.permanent {
			t.Errorf("Permanent(%v) = %v", tt.err, got)
		}
		if got := httpkit.RetryAfter(tt.err); got != tt.after {
			t.Errorf("RetryAfter(%v) = %v", tt.err, got)
		}
	}
}
