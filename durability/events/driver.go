package events

import (
	"context"
	"fmt"
	"path/filepath"
	"regexp"

	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/durability/postgres"
	evj "github.com/botrun/botrun/eventjournal"
	"github.com/botrun/botrun/unit"
)

func init() {
	durability.Register(durability.Driver{Name: "events", Options: func() durability.DriverOptions {
		return &driverOptions{AppendLog: true, CompactEvery: 1000, CompactBytes: 4 << 20, Fsync: true,
			StaleLock: unit.Duration(30e9), OutboxTablePrefix: "botrun_"}
	}})
}

// driverOptions are the events backend's [durability] keys.
type driverOptions struct {
	// Path is the events journal file, relative to the config file.
	Path string `toml:"path"`
	// Shared opens a SharedFileEventJournal (several processes of one
	// host); false, a FileEventJournal with its lock.
	SharedFile bool `toml:"shared"`
	// AppendLog, CompactEvery, CompactBytes and Fsync are the file
	// backend's.
	AppendLog    bool      `toml:"append_log"`
	CompactEvery int       `toml:"compact_every"`
	CompactBytes unit.Size `toml:"compact_bytes"`
	Fsync        bool      `toml:"fsync"`
	// StaleLock and Heartbeat tune the shared journal's mutex.
	StaleLock unit.Duration `toml:"stale_lock"`
	Heartbeat unit.Duration `toml:"heartbeat"`
	// OutboxBackend "postgres" keeps the outbox in PostgreSQL at OutboxURL
	// (table <OutboxTablePrefix>durable); empty keeps it in the file.
	OutboxBackend     string `toml:"outbox_backend"`
	OutboxURL         string `toml:"outbox_url"`
	OutboxTablePrefix string `toml:"outbox_table_prefix"`
}

var prefixRE = regexp.MustCompile(`^[A-Za-z0-9_]*$`)

func (o *driverOptions) Check(dir string, problem durability.Problem) {
	if o.Path == "" {
		problem("path", "missing: the events backend needs the events journal's file, e.g. \"data/events.json\"")
	} else if !filepath.IsAbs(o.Path) {
		o.Path = filepath.Join(dir, o.Path)
	}
	if o.CompactEvery < 1 {
		problem("compact_every", "%d must be at least 1", o.CompactEvery)
	}
	if o.CompactBytes < 1 {
		problem("compact_bytes", "%d must be at least 1 byte", o.CompactBytes)
	}
	if o.StaleLock.D() < 1e9 {
		problem("stale_lock", "%s is below 1s: keep it far above the slowest write", o.StaleLock.D())
	}
	if o.Heartbeat.D() < 0 || (o.Heartbeat != 0 && o.Heartbeat.D() >= o.StaleLock.D()) {
		problem("heartbeat", "%s must be below stale_lock (%s); 0 is a third of it", o.Heartbeat.D(), o.StaleLock.D())
	}
	switch o.OutboxBackend {
	case "":
		if o.OutboxURL != "" {
			problem("outbox_url", "set without outbox_backend: add outbox_backend = \"postgres\" or remove it")
		}
	case "postgres":
		if o.OutboxURL == "" {
			problem("outbox_url", "missing: outbox_backend = \"postgres\" needs a connection URL, e.g. \"${DATABASE_URL}\"")
		}
		if !prefixRE.MatchString(o.OutboxTablePrefix) {
			problem("outbox_table_prefix", "%q: use letters, digits and '_'", o.OutboxTablePrefix)
		}
	default:
		problem("outbox_backend", "unknown value %q (want postgres, or leave it out to keep the outbox in the file)", o.OutboxBackend)
	}
}

// Shared reports whether several processes use the backend at once (each
// then needs its own instance id).
func (o *driverOptions) Shared() bool { return o.SharedFile }

func (o *driverOptions) Open(ctx context.Context) (durability.Backend, error) {
	var j Journal
	var err error
	if o.SharedFile {
		j, err = evj.OpenShared(o.Path, &evj.SharedOptions{AppendLog: o.AppendLog, CompactEvery: o.CompactEvery,
			CompactBytes: int64(o.CompactBytes), NoFsync: !o.Fsync, StaleLock: o.StaleLock.D(), Heartbeat: o.Heartbeat.D()})
	} else {
		j, err = evj.OpenFile(o.Path, &evj.FileOptions{Lock: true, AppendLog: o.AppendLog, CompactEvery: o.CompactEvery,
			CompactBytes: int64(o.CompactBytes), NoFsync: !o.Fsync})
	}
	if err != nil {
		return nil, err
	}
	var outbox durability.Kv
	if o.OutboxBackend == "postgres" {
		s, err := postgres.OpenStore(ctx, postgres.Options{URL: o.OutboxURL, TablePrefix: o.OutboxTablePrefix})
		if err != nil {
			j.Close()
			return nil, fmt.Errorf("events durability: outbox: %w", err)
		}
		outbox = s
	}
	return durability.Opened(New(j, outbox))
}
