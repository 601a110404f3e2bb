// Package devstore is where a whatsapp-web channel's device keys live:
// whatsmeow's container (its whatsmeow_* tables) in the bot's own SQL
// database, a SQLite file or a PostgreSQL database, and, in the backend's
// Kv, which of its devices is the channel's.
//
// devstore may import the standard library, whatsmeow's store and
// durability with its sqlite and postgres backends; it knows nothing of the
// channel SPI.
package devstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"go.mau.fi/whatsmeow/store"
	"go.mau.fi/whatsmeow/store/sqlstore"
	"go.mau.fi/whatsmeow/types"
	waLog "go.mau.fi/whatsmeow/util/log"

	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/durability/postgres"
	"github.com/botrun/botrun/durability/sqlite"
)

// Store is where the device keys live: whatsmeow's container (its
// whatsmeow_* tables) and, in the Kv, which of its devices is this
// provider's.
type Store struct {
	db        *sql.DB
	container *sqlstore.Container
	kv        durability.Kv
	key       string
}

// Open opens the session's database (where: "" for the backend's own, a
// postgres:// URL, or a SQLite file path) and creates or upgrades
// whatsmeow's tables in it; kv (nil without one) records which device is
// the provider's under key.
func Open(ctx context.Context, where string, kv durability.Kv, key string, log waLog.Logger) (*Store, error) {
	var db *sql.DB
	var dialect string
	var err error
	switch s := where; {
	case s == "":
		sdb, ok := kv.(durability.SQLDatabase)
		if !ok {
			return nil, errors.New("the backend keeps no SQL tables")
		}
		db, dialect, err = sdb.OpenSQL()
	case IsPostgresURL(s):
		db, err = postgres.OpenDB(s)
		dialect = "postgres"
	default:
		db, err = sqlite.OpenDB(s)
		dialect = "sqlite"
	}
	if err != nil {
		return nil, err
	}
	c := sqlstore.NewWithDB(db, dialect, log)
	if err := c.Upgrade(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("creating whatsmeow's tables: %w", err)
	}
	return &Store{db: db, container: c, kv: kv, key: key}, nil
}

// Close closes the session's database.
func (s *Store) Close() error { return s.db.Close() }

// NewDevice is a new device to pair, in the store.
func (s *Store) NewDevice() *store.Device { return s.container.NewDevice() }

// Device returns the provider's paired device, or nil when the session is
// not paired (never, or logged out since: whatsmeow deletes a logged-out
// device).
func (s *Store) Device(ctx context.Context) (*store.Device, error) {
	if s.kv != nil {
		b, v, err := s.kv.Get(ctx, s.key)
		if err != nil || v == 0 {
			return nil, err
		}
		jid, err := types.ParseJID(string(b))
		if err != nil {
			return nil, fmt.Errorf("the recorded device %q: %w", b, err)
		}
		return s.container.GetDevice(ctx, jid)
	}
	devs, err := s.container.GetAllDevices(ctx)
	switch {
	case err != nil:
		return nil, err
	case len(devs) > 1:
		return nil, fmt.Errorf("the session holds %d devices: give each whatsapp-web provider a session of its own", len(devs))
	case len(devs) == 1:
		return devs[0], nil
	}
	return nil, nil
}

// Forget drops dev, logged out: whatsmeow deletes a logged-out device
// itself, but perhaps not before the next session looks.
func (s *Store) Forget(ctx context.Context, jid types.JID) error {
	if err := s.container.DeleteDevice(ctx, &store.Device{ID: &jid}); err != nil {
		return err
	}
	if s.kv == nil {
		return nil
	}
	return s.kv.Commit(ctx, []durability.Write{{Key: s.key, Version: durability.AnyVersion, Delete: true}})
}

// Paired records dev as the provider's device.
func (s *Store) Paired(ctx context.Context, dev *store.Device) error {
	if s.kv == nil {
		return nil
	}
	return s.kv.Commit(ctx, []durability.Write{{Key: s.key, Version: durability.AnyVersion, Value: []byte(dev.ID.String())}})
}

// IsPostgresURL reports whether s, a store setting, names a PostgreSQL
// database.
func IsPostgresURL(s string) bool {
	return strings.HasPrefix(s, "postgres://") || strings.HasPrefix(s, "postgresql://")
}
