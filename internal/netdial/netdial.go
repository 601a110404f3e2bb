// Package netdial is how botrun dials its servers (PostgreSQL, Redis): a
// bounded connect, and a TCP keepalive that finds a silent peer (a link
// that drops packets without a word: no RST, no FIN) on an idle connection
// within Silent, where nothing else would: a busy connection meets its
// operation's timeout first.
//
// netdial imports only the standard library.
package netdial

import (
	"net"
	"time"
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
