//go:build linux

package netdialtest

import (
	"cmp"
	"fmt"
	"net"
	"time"

	"golang.org/x/sys/unix"

	"github.com/botrun/botrun/internal/netdial"
)

// Check reports an error unless c, a TCP connection (or a TLS connection
// over one), has the keepalive netdial.Dialer sets: a driver's tests check
// the connections it dials with it.
func Check(c net.Conn) error {
	if tc, ok := c.(interface{ NetConn() net.Conn }); ok {
		c = tc.NetConn()
	}
	tcp, ok := c.(*net.TCPConn)
	if !ok {
		return fmt.Errorf("netdial: a %T, not a TCP connection", c)
	}
	raw, err := tcp.SyscallConn()
	if err != nil {
		return fmt.Errorf("netdial: %w", err)
	}
	var on, idle, intvl, cnt int
	var serr error
	if err := raw.Control(func(fd uintptr) {
		get := func(level, opt int) int {
			v, err := unix.GetsockoptInt(int(fd), level, opt)
			serr = cmp.Or(serr, err)
			return v
		}
		on = get(unix.SOL_SOCKET, unix.SO_KEEPALIVE)
		idle = get(unix.IPPROTO_TCP, unix.TCP_KEEPIDLE)
		intvl = get(unix.IPPROTO_TCP, unix.TCP_KEEPINTVL)
		cnt = get(unix.IPPROTO_TCP, unix.TCP_KEEPCNT)
	}); err != nil {
		return fmt.Errorf("netdial: %w", err)
	}
	if serr != nil {
		return fmt.Errorf("netdial: getsockopt: %w", serr)
	}
	if on == 0 || time.Duration(idle)*time.Second != netdial.KeepIdle || time.Duration(intvl)*time.Second != netdial.KeepInterval || cnt != netdial.KeepCount {
		return fmt.Errorf("netdial: keepalive on=%d idle=%ds interval=%ds count=%d, want on, %s, %s, %d", on, idle, intvl, cnt, netdial.KeepIdle, netdial.KeepInterval, netdial.KeepCount)
	}
	return nil
}
