// Package registry is the name-to-plug-in table that channel types
// (host/channel) and durability backends (durability) register into.
package registry

import (
	"fmt"
	"slices"
	"sync"
)

// Of maps names to registered plug-ins of one kind. The zero value is empty
// and ready.
type Of[T any] struct {
	// kind names the plug-ins in panics ("channel type", "backend").
	kind string
	mu   sync.RWMutex
	m    map[string]T
}

// New returns an empty registry of plug-ins of the named kind.
func New[T any](kind string) *Of[T] { return &Of[T]{kind: kind, m: map[string]T{}} }

// Register adds v under name. It panics when the name is empty or taken:
// both are programming errors, found at init.
func (r *Of[T]) Register(name string, v T) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if name == "" {
		panic(fmt.Sprintf("registering a %s without a name", r.kind))
	}
	if _, dup := r.m[name]; dup {
		panic(fmt.Sprintf("%s %q is registered twice", r.kind, name))
	}
	r.m[name] = v
}

// Lookup returns the plug-in registered under name.
func (r *Of[T]) Lookup(name string) (T, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	v, ok := r.m[name]
	return v, ok
}

// Names lists the registered names in order.
func (r *Of[T]) Names() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	names := make([]string, 0, len(r.m))
	for n := range r.m {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}
