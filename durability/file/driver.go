package file

import (
	"context"
	"path/filepath"

	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/unit"
)

func init() {
	durability.Register(durability.Driver{Name: "file", Options: func() durability.DriverOptions {
		return &driverOptions{AppendLog: true, CompactEvery: 1000, CompactBytes: 4 << 20, Fsync: true}
	}})
}

// driverOptions are the file backend's [durability] keys.
type driverOptions struct {
	// Path is the journal file, relative to the config file.
	Path string `toml:"path"`
	// AppendLog appends each change to <path>.log (default true) instead of
	// rewriting the snapshot.
	AppendLog bool `toml:"append_log"`
	// CompactEvery folds the log after this many entries (default 1000).
	CompactEvery int `toml:"compact_every"`
	// CompactBytes folds the log at this size (default 4MiB).
	CompactBytes unit.Size `toml:"compact_bytes"`
	// Fsync forces writes to disk (default true).
	Fsync bool `toml:"fsync"`
}

func (o *driverOptions) Check(dir string, problem durability.Problem) {
	if o.Path == "" {
		problem("path", "missing: the file backend needs a file path, e.g. \"data/bot.journal\"")
	} else if !filepath.IsAbs(o.Path) {
		o.Path = filepath.Join(dir, o.Path)
	}
	if o.CompactEvery == 0 {
		o.CompactEvery = 1000
	}
	if o.CompactBytes == 0 {
		o.CompactBytes = 4 << 20
	}
	if o.CompactEvery < 1 {
		problem("compact_every", "%d must be at least 1", o.CompactEvery)
	}
}

func (o *driverOptions) Open(ctx context.Context) (durability.Backend, error) {
	return durability.Opened(Open(ctx, Options{Path: o.Path, AppendLog: o.AppendLog, CompactEvery: o.CompactEvery,
		CompactBytes: int64(o.CompactBytes), NoFsync: !o.Fsync}))
}
