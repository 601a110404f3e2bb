package redis

import (
	"context"
	"net"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/botrun/botrun/internal/netdial/netdialtest"
	"github.com/botrun/botrun/internal/testserver"
)

// TestConnectionsKeepAlive: the clients dial opens, on one node and on a
// cluster, dial with netdial's keepalive, which finds a silent peer on an
// idle connection (netdial's TestKeepaliveFindsASilentPeer shows it doing
// so).
func TestConnectionsKeepAlive(t *testing.T) {
	single, err := dial(Options{URL: testserver.Redis(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer single.Close()
	cluster, err := dial(Options{Cluster: testserver.RedisCluster(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	opts := single.(*goredis.Client).Options()
	copts := cluster.(*goredis.ClusterClient).Options()
	for name, d := range map[string]struct {
		dial func(context.Context, string, string) (net.Conn, error)
		addr string
	}{"node": {opts.Dialer, opts.Addr}, "cluster": {copts.Dialer, copts.Addrs[0]}} {
		if d.dial == nil {
			t.Errorf("%s: no dialer of ours", name)
			continue
		}
		c, err := d.dial(context.Background(), "tcp", d.addr)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := netdialtest.Check(c); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		c.Close()
	}
}
