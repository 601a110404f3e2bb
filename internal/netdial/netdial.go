// Package netdial is how botrun dials its servers (PostgreSQL, Redis): a
// bounded connect, and a TCP keepalive that finds a silent peer (a link
// that drops packets without a word: no RST, no FIN) on an idle connection
// within Silent, where nothing else would: a busy connection meets its
// operation's timeout first.
//
// netdial imports the standard library and golang.org/x/sys/unix.
package netdial

import (
	"cmp"
	"fmt"
	"net"
	"time"

	"golang.org/x/sys/unix"
)

// The defaults: how long a connect may take, and the keepalive (the first
// probe after KeepIdle of silence, then one every KeepInterval, the
// connection given up after KeepCount unanswered).
const (
	ConnectTimeout = 5 * time.Second
	KeepIdle       = 5 * time.Second
	KeepInterval   = 5 * time.Second
	KeepCount      = 3
)

// Silent is how long an idle connection to a silent peer lives before the
// kernel gives it up (ETIMEDOUT): KeepIdle + KeepCount × KeepInterval.
const Silent = KeepIdle + KeepCount*KeepInterval

// Dialer returns a dialer with the keepalive, whose connects take at most
// timeout (ConnectTimeout when timeout ≤ 0).
func Dialer(timeout time.Duration) *net.Dialer {
	if timeout <= 0 {
		timeout = ConnectTimeout
	}
	return &net.Dialer{Timeout: timeout, KeepAliveConfig: net.KeepAliveConfig{Enable: true, Idle: KeepIdle, Interval: KeepInterval, Count: KeepCount}}
}

// Check reports an error unless c, a TCP connection (or a TLS connection
// over one), has the keepalive Dialer sets: a driver's tests check the
// connections it dials with it.
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
	if on == 0 || time.Duration(idle)*time.Second != KeepIdle || time.Duration(intvl)*time.Second != KeepInterval || cnt != KeepCount {
		return fmt.Errorf("netdial: keepalive on=%d idle=%ds interval=%ds count=%d, want on, %s, %s, %d", on, idle, intvl, cnt, KeepIdle, KeepInterval, KeepCount)
	}
	return nil
}
