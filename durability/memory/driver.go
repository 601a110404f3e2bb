package memory

import (
	"context"

	"github.com/botrun/botrun/durability"
)

func init() {
	durability.Register(durability.Driver{Name: "memory", Options: func() durability.DriverOptions { return &driverOptions{} }})
}

// driverOptions are the memory backend's [durability] keys: none.
type driverOptions struct{}

func (*driverOptions) Check(string, durability.Problem) {}

func (*driverOptions) Open(ctx context.Context) (durability.Backend, error) {
	return Open(ctx, Options{})
}
