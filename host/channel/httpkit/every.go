package httpkit

import (
	"context"
	"time"
)

// Every calls f every d, the first time d after the call, until ctx ends:
// a channel's housekeeping (purging what expired) in its Run.
func Every(ctx context.Context, d time.Duration, f func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			f()
		}
	}
}
