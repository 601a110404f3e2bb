package redis

import (
	"context"

	"github.com/botrun/botrun/durability"
)

func init() {
	durability.Register(durability.Driver{Name: "redis", Shared: true, Coordination: true, Options: func() durability.DriverOptions {
		return &driverOptions{Prefix: "botrun"}
	}})
}

// driverOptions are the redis backend's [durability] keys.
type driverOptions struct {
	// URL is the connection URL (use ${ENV}).
	URL string `toml:"url"`
	// Prefix starts every key (default "botrun").
	Prefix string `toml:"prefix"`
}

func (o *driverOptions) Check(_ string, problem durability.Problem) {
	if o.URL == "" {
		problem("url", "missing: the redis backend needs a connection URL, e.g. \"redis://127.0.0.1:6379/0\"")
	}
}

func (o *driverOptions) Open(ctx context.Context) (durability.Backend, error) {
	return durability.Opened(Open(ctx, Options{URL: o.URL, Prefix: o.Prefix}))
}
