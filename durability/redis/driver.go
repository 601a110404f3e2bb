package redis

import (
	"context"

	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/unit"
)

func init() {
	durability.Register(durability.Driver{Name: "redis", Shared: true, Coordination: true, Options: func() durability.DriverOptions {
		return &driverOptions{Prefix: "botrun"}
	}})
}

// driverOptions are the redis backend's [durability] keys.
type driverOptions struct {
	// URL is a single node's connection URL (use ${ENV}).
	URL string `toml:"url"`
	// Cluster are a Redis Cluster's seed nodes: "host:port" or redis:// URLs.
	Cluster []string `toml:"cluster"`
	// Prefix starts every key (default "botrun").
	Prefix string `toml:"prefix"`
	// WaitReplicas is how many replicas each group commit waits for
	// (default 1 on a cluster, 0 on a single node).
	WaitReplicas *int `toml:"wait_replicas"`
	// WaitTimeout bounds that wait (default 1s).
	WaitTimeout unit.Duration `toml:"wait_timeout"`
}

func (o *driverOptions) Check(_ string, problem durability.Problem) {
	switch {
	case o.URL != "" && o.Cluster != nil:
		problem("cluster", "set with url: use url for one Redis node or cluster for a Redis Cluster's seed nodes, not both")
	case o.Cluster != nil && len(o.Cluster) == 0:
		problem("cluster", "empty: list at least one seed node, e.g. [\"10.0.0.1:6379\", \"10.0.0.2:6379\"]")
	case o.Cluster != nil:
		for _, seed := range o.Cluster {
			if _, err := seedAddr(seed); err != nil {
				problem("cluster", "%v", err)
			}
		}
	case o.URL == "":
		problem("url", "missing: the redis backend needs a connection URL, e.g. \"redis://127.0.0.1:6379/0\", or cluster = [\"host:port\", …] for a Redis Cluster")
	}
	if o.WaitReplicas != nil && *o.WaitReplicas < 0 {
		problem("wait_replicas", "%d is negative: use 0 not to wait, or the number of replicas to wait for", *o.WaitReplicas)
	}
	if o.WaitTimeout < 0 {
		problem("wait_timeout", "%s is negative", o.WaitTimeout.D())
	}
}

func (o *driverOptions) Open(ctx context.Context) (durability.Backend, error) {
	opts := Options{URL: o.URL, Cluster: o.Cluster, Prefix: o.Prefix, WaitTimeout: o.WaitTimeout.D()}
	if o.WaitReplicas != nil {
		opts.WaitReplicas = *o.WaitReplicas
		if opts.WaitReplicas == 0 {
			opts.WaitReplicas = -1 // said 0: never wait
		}
	}
	return durability.Opened(Open(ctx, opts))
}
