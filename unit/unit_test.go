package unit

import (
	"testing"
	"time"
)

func TestDurations(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]time.Duration{
		"15s": 15 * time.Second, "7d": 7 * 24 * time.Hour, "1d12h": 36 * time.Hour,
		"500ms": 500 * time.Millisecond, "0": 0, "1h30m": 90 * time.Minute,
	} {
		got, err := ParseDuration(in)
		if err != nil || got != want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "d", "7", "-1s", "xd", "1d-1h", "forever"} {
		if _, err := ParseDuration(in); err == nil {
			t.Errorf("ParseDuration(%q) accepted", in)
		}
	}
}

func TestSizes(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]int64{
		"64MiB": 64 << 20, "1GiB": 1 << 30, "512KiB": 512 << 10, "1MB": 1e6, "100": 100, "10 B": 10,
	} {
		got, err := ParseSize(in)
		if err != nil || got != want {
			t.Errorf("ParseSize(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "MiB", "-1", "1.5MiB", "9999999999GiB", "64 mb"} {
		if _, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) accepted", in)
		}
	}
}
