package channel

import (
	"errors"
	"fmt"
	"testing"
	"time"
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
		{fmt.Errorf("telegram 400: %w", ErrUnsupportedContent), true, 0},
		{fmt.Errorf("x: %w", ErrPayloadTooLarge), true, 0},
		{fmt.Errorf("x: %w", ErrOutsideSessionWindow), true, 0},
		{fmt.Errorf("x: %w", ErrRecipientUnreachable), true, 0},
		{flaky{retry: false}, true, 0},
		{fmt.Errorf("wrapped: %w", flaky{retry: false}), true, 0},
		{flaky{retry: true}, false, 0},
		{errors.New("503"), false, 0},
		{&RateLimitedError{RetryAfter: 3 * time.Second, Err: errors.New("429")}, false, 3 * time.Second},
	} {
		if got := Permanent(tt.err); got != tt.permanent {
			t.Errorf("Permanent(%v) = %v", tt.err, got)
		}
		if got := RetryAfter(tt.err); got != tt.after {
			t.Errorf("RetryAfter(%v) = %v", tt.err, got)
		}
	}
}
