package durability

import (
	"context"
	"fmt"

	"github.com/botrun/botrun/internal/registry"
)

// Driver is a backend type that bot.toml's [durability] backend can name. A
// backend package registers its driver in an init function; a program
// includes the backends it wants by importing their packages (cmd/botrun
// imports the built-in set).
type Driver struct {
	// Name is the value of [durability] backend.
	Name string
	// Shared is true for a backend several processes use at once (a
	// database server): each process then needs its own instance id.
	Shared bool
	// Coordination is true for a shared backend whose Backend implements
	// Coordinator and that replicas on several hosts can share: it accepts
	// [durability] coordination = true.
	Coordination bool
	// Options returns a new options value filled with the backend's
	// defaults. Its toml-tagged fields are the backend's own keys in the
	// [durability] table, decoded over those defaults.
	Options func() DriverOptions
}

// DriverOptions are one backend's decoded [durability] keys.
type DriverOptions interface {
	// Check completes the options and reports each problem under its key
	// (e.g. "path"); dir is the config file's directory, against which
	// relative paths resolve.
	Check(dir string, problem Problem)
	// Open opens the backend the options describe.
	Open(ctx context.Context) (Backend, error)
}

// ReadOnlyOpener is implemented by DriverOptions that can open the backend
// for reading only, beside a live bot in another process, taking no lock and
// writing nothing: SQLite (mode=ro) and PostgreSQL (no schema creation or
// migration). Other backends are opened as the bot opens them: Redis is a
// server a reader only reads; the file backend (and a non-shared events
// file) takes its lock, so it cannot be opened while the bot runs, and
// folds its log into its snapshot when closed.
type ReadOnlyOpener interface {
	OpenReadOnly(ctx context.Context) (Backend, error)
}

// Sharing is implemented by DriverOptions whose keys say whether several
// processes use the backend at once (the events backend's shared = true); it
// overrides Driver.Shared.
type Sharing interface {
	Shared() bool
}

// Problem reports what is wrong with one key and how to fix it.
type Problem func(key, format string, args ...any)

var drivers = registry.New[Driver]("backend")

// Register makes a backend available under d.Name. It panics when the name
// is taken or d is incomplete: both are programming errors.
func Register(d Driver) {
	if d.Options == nil {
		panic(fmt.Sprintf("durability: backend %q has no Options constructor", d.Name))
	}
	drivers.Register(d.Name, d)
}

// LookupDriver returns the registered backend called name.
func LookupDriver(name string) (Driver, bool) { return drivers.Lookup(name) }

// Drivers lists the registered backends' names in order.
func Drivers() []string { return drivers.Names() }

// Opened returns what a backend constructor returned as a Backend, with a nil
// interface (not a nil pointer) on error: DriverOptions.Open's usual body is
// "return durability.Opened(Open(ctx, opts))".
func Opened[B Backend](b B, err error) (Backend, error) {
	if err != nil {
		return nil, err
	}
	return b, nil
}
