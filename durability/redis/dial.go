package redis

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/botrun/botrun/internal/netdial"
)

// dial opens the client the options name: a single node by URL, or a
// cluster by its seed addresses.
func dial(o Options) (goredis.UniversalClient, error) {
	switch {
	case o.URL != "" && len(o.Cluster) > 0:
		return nil, errors.New("redis: set durability.url (one node) or durability.cluster (a cluster's seed nodes), not both")
	case len(o.Cluster) > 0:
		opts, err := clusterOptions(o.Cluster)
		if err != nil {
			return nil, err
		}
		opts.ReadTimeout = max(opts.ReadTimeout, readTimeout(o))
		opts.Dialer = dialer(opts.DialTimeout, opts.TLSConfig)
		return goredis.NewClusterClient(opts), nil
	case o.URL != "":
		opts, err := goredis.ParseURL(o.URL)
		if err != nil {
			return nil, fmt.Errorf("redis: url: %w", err)
		}
		opts.ReadTimeout = max(opts.ReadTimeout, readTimeout(o))
		opts.Dialer = dialer(opts.DialTimeout, opts.TLSConfig)
		return goredis.NewClient(opts), nil
	}
	return nil, errors.New("redis: set durability.url or durability.cluster (or inject a client)")
}

// dialer is go-redis's dialer with netdial's timeout and keepalive: a TCP connection, in TLS
// when tlsConfig is set.
func dialer(timeout time.Duration, tlsConfig *tls.Config) func(ctx context.Context, network, addr string) (net.Conn, error) {
	d := netdial.Dialer(timeout)
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil || tlsConfig == nil {
			return c, err
		}
		return tls.Client(c, tlsConfig), nil
	}
}

// readTimeout is go-redis's default 3s, or longer when a WAIT in a commit's
// pipeline may block longer.
func readTimeout(o Options) time.Duration {
	return max(3*time.Second, o.WaitTimeout+2*time.Second)
}

// clusterOptions turns seed addresses ("host:port" or "redis://…" URLs) into
// cluster options; the first URL's credentials and TLS apply to every node.
func clusterOptions(seeds []string) (*goredis.ClusterOptions, error) {
	opts := &goredis.ClusterOptions{}
	for i, seed := range seeds {
		addr, err := seedAddr(seed)
		if err != nil {
			return nil, fmt.Errorf("redis: cluster[%d]: %w", i, err)
		}
		if strings.Contains(seed, "://") && opts.Username == "" && opts.Password == "" && opts.TLSConfig == nil {
			u, _ := goredis.ParseURL(seed) // seedAddr parsed it
			opts.Username, opts.Password, opts.TLSConfig = u.Username, u.Password, u.TLSConfig
		}
		opts.Addrs = append(opts.Addrs, addr)
	}
	return opts, nil
}

// seedAddr is the host:port of one seed: "host:port" or a redis:// or
// rediss:// URL without a database (a cluster has only database 0).
func seedAddr(seed string) (string, error) {
	addr := seed
	if strings.Contains(seed, "://") {
		u, err := goredis.ParseURL(seed)
		if err != nil {
			return "", fmt.Errorf("%q: %w", seed, err)
		}
		if u.DB != 0 {
			return "", fmt.Errorf("%q: a cluster has only database 0: drop the /%d", seed, u.DB)
		}
		addr = u.Addr
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return "", fmt.Errorf("%q is not host:port (e.g. \"10.0.0.1:6379\") or a redis:// URL", seed)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return "", fmt.Errorf("%q: port %q is not a number from 1 to 65535", seed, port)
	}
	return addr, nil
}
