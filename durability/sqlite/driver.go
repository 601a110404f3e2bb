package sqlite

import (
	"context"
	"path/filepath"

	"github.com/botrun/botrun/durability"
)

func init() {
	durability.Register(durability.Driver{Name: "sqlite", Options: func() durability.DriverOptions {
		return &driverOptions{Synchronous: "full"}
	}})
}

// driverOptions are the sqlite backend's [durability] keys.
type driverOptions struct {
	// Path is the database file, relative to the config file.
	Path string `toml:"path"`
	// Synchronous is full (every commit fsynced) or normal.
	Synchronous string `toml:"synchronous"`
}

func (o *driverOptions) Check(dir string, problem durability.Problem) {
	if o.Path == "" {
		problem("path", "missing: the sqlite backend needs a file path, e.g. \"data/bot.db\"")
	} else if !filepath.IsAbs(o.Path) {
		o.Path = filepath.Join(dir, o.Path)
	}
	if o.Synchronous != "full" && o.Synchronous != "normal" {
		problem("synchronous", "unknown value %q (want full or normal)", o.Synchronous)
	}
}

func (o *driverOptions) Open(ctx context.Context) (durability.Backend, error) {
	return durability.Opened(Open(ctx, Options{Path: o.Path, Synchronous: o.Synchronous}))
}

// OpenReadOnly implements durability.ReadOnlyOpener: the database of a live
// bot, read from another process without a lock or a write.
func (o *driverOptions) OpenReadOnly(ctx context.Context) (durability.Backend, error) {
	return durability.Opened(Open(ctx, Options{Path: o.Path, Synchronous: o.Synchronous, ReadOnly: true}))
}
