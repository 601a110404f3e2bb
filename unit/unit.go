// Package unit holds the value types of bot.toml and of the plug-ins' own keys:
// durations ("15s", "7d") and byte sizes ("64MiB").
package unit

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Duration is a bot.toml duration: a string such as "15s", "1h30m" or "7d", or
// an integer number of milliseconds.
type Duration time.Duration

// D returns the duration as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// UnmarshalTOML accepts a string or integer milliseconds.
func (d *Duration) UnmarshalTOML(v any) error {
	switch v := v.(type) {
	case int64:
		if v < 0 {
			return fmt.Errorf("duration %d is negative", v)
		}
		*d = Duration(time.Duration(v) * time.Millisecond)
		return nil
	case string:
		p, err := ParseDuration(v)
		if err != nil {
			return err
		}
		*d = Duration(p)
		return nil
	}
	return fmt.Errorf("duration must be a string like \"15s\" or integer milliseconds, not %T", v)
}

// ParseDuration parses Go durations plus a days suffix ("7d", "1d12h").
func ParseDuration(s string) (time.Duration, error) {
	in := strings.TrimSpace(s)
	if in == "0" {
		return 0, nil
	}
	var days time.Duration
	if i := strings.IndexByte(in, 'd'); i > 0 {
		n, err := strconv.ParseUint(in[:i], 10, 32)
		if err != nil {
			return 0, fmt.Errorf("invalid duration %q (use e.g. \"15s\", \"10m\", \"7d\")", s)
		}
		days = time.Duration(n) * 24 * time.Hour
		in = in[i+1:]
		if in == "" {
			return days, nil
		}
	}
	p, err := time.ParseDuration(in)
	if err != nil || p < 0 {
		return 0, fmt.Errorf("invalid duration %q (use e.g. \"15s\", \"10m\", \"7d\")", s)
	}
	return days + p, nil
}

// Size is a bot.toml byte size: a string such as "64MiB", "512KiB", "1GB", or
// an integer number of bytes.
type Size int64

// UnmarshalTOML accepts a string with a unit or integer bytes.
func (z *Size) UnmarshalTOML(v any) error {
	switch v := v.(type) {
	case int64:
		if v < 0 {
			return fmt.Errorf("size %d is negative", v)
		}
		*z = Size(v)
		return nil
	case string:
		n, err := ParseSize(v)
		if err != nil {
			return err
		}
		*z = Size(n)
		return nil
	}
	return fmt.Errorf("size must be a string like \"64MiB\" or integer bytes, not %T", v)
}

var sizeUnits = []struct {
	suffix string
	mult   int64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30},
	{"KB", 1000}, {"MB", 1000 * 1000}, {"GB", 1000 * 1000 * 1000},
	{"B", 1},
}

// ParseSize parses "64MiB", "1GB", "512" and the like.
func ParseSize(s string) (int64, error) {
	in := strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range sizeUnits {
		if strings.HasSuffix(in, u.suffix) {
			in, mult = strings.TrimSpace(strings.TrimSuffix(in, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(in, 10, 64)
	if err != nil || n < 0 || n > (1<<62)/mult {
		return 0, fmt.Errorf("invalid size %q (use e.g. \"64MiB\", \"1GiB\", or bytes)", s)
	}
	return n * mult, nil
}
