// Package netdialtest checks, in a driver's tests, that its connections
// carry netdial's keepalive (Check, on Linux, where the socket options are
// read).
//
// netdialtest imports netdial and golang.org/x/sys/unix.
package netdialtest
