package postgres

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/botrun/botrun/internal/netdial/netdialtest"
	"github.com/botrun/botrun/internal/testserver"
)

// TestConnectionsKeepAlive: the connections of a pool the store opens
// carry netdial's keepalive, which finds a silent peer on an idle
// connection (netdial's TestKeepaliveFindsASilentPeer shows it doing so).
func TestConnectionsKeepAlive(t *testing.T) {
	s, err := OpenStore(context.Background(), Options{URL: testserver.Postgres(t), TablePrefix: fmt.Sprintf("ka%d_", os.Getpid())})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c, err := s.pool.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	if err := netdialtest.Check(c.Conn().PgConn().Conn()); err != nil {
		t.Error(err)
	}
}
