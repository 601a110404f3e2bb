package postgres

import (
	"context"

	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/unit"
)

func init() {
	durability.Register(durability.Driver{Name: "postgres", Shared: true, Coordination: true, Options: func() durability.DriverOptions {
		return &driverOptions{TablePrefix: "botrun_"}
	}})
}

// driverOptions are the postgres backend's [durability] keys.
type driverOptions struct {
	// URL is the connection URL (use ${ENV}).
	URL string `toml:"url"`
	// TablePrefix prefixes the table (default "botrun_").
	TablePrefix string `toml:"table_prefix"`
	// OpTimeout bounds each try of a query or commit (default 5s).
	OpTimeout unit.Duration `toml:"op_timeout"`
}

func (o *driverOptions) Check(_ string, problem durability.Problem) {
	if o.URL == "" {
		problem("url", "missing: the postgres backend needs a connection URL, e.g. \"${DATABASE_URL}\"")
	}
	if !prefixRE.MatchString(o.TablePrefix) {
		problem("table_prefix", "%q: use letters, digits and '_'", o.TablePrefix)
	}
	if o.OpTimeout < 0 {
		problem("op_timeout", "%s is negative: use e.g. \"5s\"", o.OpTimeout.D())
	}
}

func (o *driverOptions) Open(ctx context.Context) (durability.Backend, error) {
	return durability.Opened(Open(ctx, Options{URL: o.URL, TablePrefix: o.TablePrefix, OpTimeout: o.OpTimeout.D()}))
}

// OpenReadOnly implements durability.ReadOnlyOpener: the schema must be in
// place (it is not created or migrated).
func (o *driverOptions) OpenReadOnly(ctx context.Context) (durability.Backend, error) {
	return durability.Opened(Open(ctx, Options{URL: o.URL, TablePrefix: o.TablePrefix, OpTimeout: o.OpTimeout.D(), ReadOnly: true}))
}
