package durability

import (
	"context"
	"fmt"
	"slices"
	"sync"
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

// Problem reports what is wrong with one key and how to fix it.
type Problem func(key, format string, args ...any)

var drivers = struct {
	sync.RWMutex
	m map[string]Driver
}{m: map[string]Driver{}}

// Register makes a backend available under d.Name. It panics when the name
// is taken or d is incomplete: both are programming errors.
func Register(d Driver) {
	drivers.Lock()
	defer drivers.Unlock()
	if d.Name == "" || d.Options == nil {
		panic("durability: Register needs a name and an Options constructor")
	}
	if _, dup := drivers.m[d.Name]; dup {
		panic(fmt.Sprintf("durability: backend %q is registered twice", d.Name))
	}
	drivers.m[d.Name] = d
}

// LookupDriver returns the registered backend called name.
func LookupDriver(name string) (Driver, bool) {
	drivers.RLock()
	defer drivers.RUnlock()
	d, ok := drivers.m[name]
	return d, ok
}

// Drivers lists the registered backends' names in order.
func Drivers() []string {
	drivers.RLock()
	defer drivers.RUnlock()
	names := make([]string, 0, len(drivers.m))
	for n := range drivers.m {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}
