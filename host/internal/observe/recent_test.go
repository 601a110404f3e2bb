package observe

import (
	"fmt"
	"math"
	"testing"
	"time"
)

func TestLastHourCountsAndQuantiles(t *testing.T) {
	h := newLastHour([]float64{0.01, 0.1, 1})
	t0 := time.Unix(1_800_000_000, 0) // a minute's start
	for range 98 {
		h.turned(t0, 0.005) // bucket (0, 0.01]
	}
	h.turned(t0, 0.5) // (0.1, 1]
	h.turned(t0, 7)   // past the last bound
	h.admitted(t0)
	h.admitted(t0.Add(61 * time.Second))

	got := h.minutes(t0.Add(61 * time.Second))
	if len(got) != hourMinutes {
		t.Fatalf("%d minutes, want %d", len(got), hourMinutes)
	}
	prev, cur := got[len(got)-2], got[len(got)-1]
	if cur.At != t0.Add(60*time.Second).UnixMilli() || prev.At != t0.UnixMilli() {
		t.Fatalf("minutes start at %d and %d, want %d and %d", prev.At, cur.At, t0.UnixMilli(), t0.Add(time.Minute).UnixMilli())
	}
	if prev.Inbound != 1 || prev.Turns != 100 || cur.Inbound != 1 || cur.Turns != 0 {
		t.Fatalf("counts: %+v then %+v", prev, cur)
	}
	// Rank 50 of 100 is inside the first bucket, 98 observations: 50/98 of
	// the way to its bound. Rank 99 is the 0.5 s turn's bucket, (0.1, 1].
	if want := 0.01 * 50 / 98; math.Abs(prev.TurnP50-want) > 1e-12 {
		t.Fatalf("p50 %v, want %v", prev.TurnP50, want)
	}
	if want := 1.0; math.Abs(prev.TurnP99-want) > 1e-12 {
		t.Fatalf("p99 %v, want %v", prev.TurnP99, want)
	}
	if cur.TurnP50 != 0 || cur.TurnP99 != 0 {
		t.Fatalf("a minute without turns has quantiles %v/%v", cur.TurnP50, cur.TurnP99)
	}

	// An hour later the ring's slots are reused: the old minute is gone.
	later := t0.Add(time.Hour)
	h.turned(later, 0.05)
	got = h.minutes(later)
	if first := got[0]; first.At != t0.Add(time.Minute).UnixMilli() || first.Inbound != 1 {
		t.Fatalf("the oldest minute kept: %+v", first)
	}
	for _, m := range got[:len(got)-1] {
		if m.Turns != 0 {
			t.Fatalf("minute %d kept turns of an hour ago: %+v", m.At, m)
		}
	}
	if last := got[len(got)-1]; last.Turns != 1 || last.Inbound != 0 || last.TurnP99 <= 0.01 || last.TurnP99 > 0.1 {
		t.Fatalf("the reused slot: %+v", last)
	}
}

func TestModuleHistoryKeepsTheLast(t *testing.T) {
	var h ModuleHistory
	h.Add("loaded", nil, "aaa", nil)
	h.Add("refused", []byte("not wasm"), "", errString("bad magic"))
	got := h.List()
	if len(got) != 2 || got[0].Event != "loaded" || got[0].Digest != "aaa" || got[1].Event != "refused" ||
		got[1].Digest != "dc0cbbe931352caad7a936203e1d540bb96efc8aaafbf760fb94774364aeac06" || got[1].Error != "bad magic" {
		t.Fatalf("history: %+v", got)
	}
	for i := range moduleHistoryCap + 5 {
		h.Add("reloaded", nil, fmt.Sprint(i), nil)
	}
	if got := h.List(); len(got) != moduleHistoryCap || got[0].Digest != "5" || got[len(got)-1].Digest != fmt.Sprint(moduleHistoryCap+4) {
		t.Fatalf("after %d more: %d entries, first %+v", moduleHistoryCap+5, len(got), got[0])
	}
}

type errString string

func (e errString) Error() string { return string(e) }
