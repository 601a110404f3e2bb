package observe

import (
	"crypto/sha256"
	"encoding/hex"
	"math"
	"sync"
	"time"
)

// Minute is one minute of the bot's recent activity, for the console's
// charts (Prometheus keeps the long history; this is what a bot without a
// Prometheus server can still show).
type Minute struct {
	// At is the minute's start (Unix ms).
	At int64 `json:"at"`
	// Inbound counts the inbound messages journaled in the minute.
	Inbound int `json:"inbound"`
	// Turns counts the turns that ended in the minute.
	Turns int `json:"turns"`
	// TurnP50 and TurnP99 are the median and 99th percentile of those
	// turns' durations in seconds, estimated from the turn histogram's
	// buckets as Prometheus's histogram_quantile does; 0 without turns.
	TurnP50 float64 `json:"turn_p50"`
	TurnP99 float64 `json:"turn_p99"`
}

// hourMinutes is how many minutes the recent activity keeps.
const hourMinutes = 60

// minuteSlot is one minute's counts; bounds are the turn histogram's.
type minuteSlot struct {
	minute  int64 // Unix minutes; the slot is empty when it is not the one asked for
	inbound int
	turns   []int // per bucket of bounds, the last one +Inf
}

// lastHour keeps the recent activity a minute a slot, in a ring of
// hourMinutes slots reused as the minutes pass.
type lastHour struct {
	bounds []float64 // the turn buckets' upper bounds, seconds

	mu    sync.Mutex
	slots [hourMinutes]minuteSlot
}

func newLastHour(bounds []float64) *lastHour { return &lastHour{bounds: bounds} }

// slot is the slot of minute m, emptied if it held an older minute; the
// caller holds mu.
func (h *lastHour) slot(m int64) *minuteSlot {
	s := &h.slots[m%hourMinutes]
	if s.minute != m {
		*s = minuteSlot{minute: m, turns: s.turns[:0]}
		for range len(h.bounds) + 1 {
			s.turns = append(s.turns, 0)
		}
	}
	return s
}

func (h *lastHour) admitted(now time.Time) {
	h.mu.Lock()
	h.slot(now.Unix()/60).inbound++
	h.mu.Unlock()
}

func (h *lastHour) turned(now time.Time, seconds float64) {
	i := 0
	for i < len(h.bounds) && seconds > h.bounds[i] {
		i++
	}
	h.mu.Lock()
	h.slot(now.Unix() / 60).turns[i]++
	h.mu.Unlock()
}

// minutes is the last hour up to now's minute, oldest first.
func (h *lastHour) minutes(now time.Time) []Minute {
	cur := now.Unix() / 60
	out := make([]Minute, 0, hourMinutes)
	h.mu.Lock()
	defer h.mu.Unlock()
	for m := cur - hourMinutes + 1; m <= cur; m++ {
		row := Minute{At: m * 60 * 1000}
		if s := &h.slots[m%hourMinutes]; s.minute == m {
			row.Inbound = s.inbound
			for _, n := range s.turns {
				row.Turns += n
			}
			row.TurnP50 = h.quantile(s.turns, row.Turns, 0.5)
			row.TurnP99 = h.quantile(s.turns, row.Turns, 0.99)
		}
		out = append(out, row)
	}
	return out
}

// quantile estimates the q-quantile of the total observations counted per
// bucket, interpolating linearly inside the bucket it falls in; one past
// the last bound is reported as the last bound.
func (h *lastHour) quantile(counts []int, total int, q float64) float64 {
	if total == 0 {
		return 0
	}
	rank := q * float64(total)
	seen := 0.0
	for i, n := range counts {
		if n == 0 || seen+float64(n) < rank {
			seen += float64(n)
			continue
		}
		if i == len(h.bounds) {
			return h.bounds[len(h.bounds)-1]
		}
		lo := 0.0
		if i > 0 {
			lo = h.bounds[i-1]
		}
		return lo + (h.bounds[i]-lo)*(rank-seen)/float64(n)
	}
	return math.NaN() // not reached: the counts add up to total
}

// ModuleChange is one entry of the module's history: the first load, a
// hot reload that went live, or one that was refused.
type ModuleChange struct {
	// At is when it happened (Unix ms).
	At int64 `json:"at"`
	// Event is "loaded", "reloaded" or "refused".
	Event string `json:"event"`
	// Digest is the module's sha256 (of the refused file's bytes for a
	// refusal; empty when the file could not be read).
	Digest string `json:"digest,omitempty"`
	// Error says why a module was refused.
	Error string `json:"error,omitempty"`
}

// moduleHistoryCap bounds the module history: the oldest entries go first.
const moduleHistoryCap = 50

// ModuleHistory keeps the module's recent changes; the zero value is ready
// (its clock time.Now).
type ModuleHistory struct {
	// Now is the clock (nil: time.Now).
	Now     func() time.Time
	mu      sync.Mutex
	changes []ModuleChange
}

// Add notes a change: event ("loaded", "reloaded" or "refused"), the
// module's digest (computed from module's bytes when empty) and why it was
// refused.
func (h *ModuleHistory) Add(event string, module []byte, digest string, err error) {
	now := time.Now
	if h.Now != nil {
		now = h.Now
	}
	c := ModuleChange{At: now().UnixMilli(), Event: event, Digest: digest}
	if c.Digest == "" && module != nil {
		sum := sha256.Sum256(module)
		c.Digest = hex.EncodeToString(sum[:])
	}
	if err != nil {
		c.Error = err.Error()
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.changes = append(h.changes, c)
	if len(h.changes) > moduleHistoryCap {
		h.changes = append(h.changes[:0], h.changes[len(h.changes)-moduleHistoryCap:]...)
	}
}

// List is the history, oldest first.
func (h *ModuleHistory) List() []ModuleChange {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]ModuleChange(nil), h.changes...)
}
