//go:build botrun_testchannels

package main

import "github.com/botrun/botrun/host/channel/leadertest"

// Test channels, built in only with -tags botrun_testchannels: the tests of
// leader-only sessions with real processes build botrun so. A release
// never has them.
func init() { leadertest.Register() }
