// Package soak is the randomness of make soak: a test that runs a random
// schedule of faults under it draws from Rand, whose seed it prints with the
// command that replays it (BOTRUN_SEED). Outside make soak (no BOTRUN_SOAK,
// no BOTRUN_SEED) such a test runs its short fixed schedule.
//
// soak imports only the standard library.
package soak

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"
)

// On reports whether the test runs under make soak (BOTRUN_SOAK set), or
// replays a seed (BOTRUN_SEED set).
func On() bool { return os.Getenv("BOTRUN_SOAK") != "" || os.Getenv("BOTRUN_SEED") != "" }

// Rand returns a generator seeded by BOTRUN_SEED, or by the time; it prints
// the seed and how to replay it (pkg is the test's package path, as go test
// takes it).
func Rand(t testing.TB, pkg string) *rand.Rand {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("BOTRUN_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("BOTRUN_SEED=%q is not a seed (an unsigned integer, as a soak run printed it)", s)
		}
		seed = n
	}
	msg := fmt.Sprintf("%s: seed %d (replay: BOTRUN_SEED=%d go test -run '^%s$' %s)", t.Name(), seed, seed, rootName(t.Name()), pkg)
	fmt.Println(msg)
	t.Log(msg)
	return rand.New(rand.NewPCG(seed, seed>>32^0x9e3779b97f4a7c15))
}

// rootName is a (sub)test name's top-level test.
func rootName(name string) string {
	for i := range len(name) {
		if name[i] == '/' {
			return name[:i]
		}
	}
	return name
}
