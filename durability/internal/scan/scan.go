// Package scan holds the bound on how many index entries one scan of a Kv
// journal reads (a ClaimDue, a List or a Purge step). It is its own package
// so that the conformance suite (durability/durabilitytest) can lower it: its
// state-list case must bury more settled records than one scan reads, and at
// the production bound that is 21,000 records on every backend under -race.
// It imports nothing of botrun.
package scan

import "sync/atomic"

// Default is the bound production runs with.
const Default = 20000

var budget atomic.Int64

// Budget is how many index entries one scan reads: Default unless SetBudget
// lowered it.
func Budget() int {
	if b := budget.Load(); b > 0 {
		return int(b)
	}
	return Default
}

// SetBudget sets the bound for this process (n <= 0: Default). Only the
// conformance suite calls it.
func SetBudget(n int) { budget.Store(int64(n)) }
