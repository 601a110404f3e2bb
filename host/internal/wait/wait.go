// Package wait is how the host's tests wait for something to happen: they
// poll its condition with a generous deadline, never sleep a fixed time
// and hope (CI runs them on a loaded 2-core machine with -race).
//
// wait imports only the standard library.
package wait

import "time"

// For polls cond every 2ms until it holds or timeout passes; it reports
// whether cond held.
func For(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(2 * time.Millisecond)
	}
	return true
}
