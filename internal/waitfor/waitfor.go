// Package waitfor is how tests wait for a condition: poll it at a short
// period until it holds or a generous deadline passes. A test never sleeps
// a fixed time hoping that something happened; it waits for it, so that it
// is as fast as the machine allows and as patient as a loaded CI needs.
package waitfor

import "time"

// Period is how often True polls its condition.
const Period = 10 * time.Millisecond

// True polls cond every Period until it returns true, and reports whether
// it did before timeout passed. The caller fails its test with what it
// waited for (and whatever shows why not) when it did not.
func True(timeout time.Duration, cond func() bool) bool {
	return Every(Period, timeout, cond)
}

// Every is True polling every period: a condition that is costly to check
// (a process started, a whole journal listed) is checked less often.
func Every(period, timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(period)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		<-tick.C
	}
	return true
}
