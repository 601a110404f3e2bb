package netdial

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestKeepaliveFindsASilentPeer connects through Dialer to a listener in a
// network namespace of its own (a veth pair), then makes the peer silent:
// a blackhole route in the namespace drops everything it would send back,
// so the client's packets still leave and nothing answers, no RST, no FIN,
// as when a link or a NAT drops a connection. A read that waits forever
// on an idle connection (nothing else bounds it) ends with ETIMEDOUT once
// the keepalive's probes go unanswered, within Silent. Seen to fail
// without the keepalive (the read still waits at the deadline).
func TestKeepaliveFindsASilentPeer(t *testing.T) {
	t.Parallel()
	ns := silentNamespace(t)
	ln := ns.listen(t)
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			accepted <- c
		}
	}()
	conn, err := Dialer(0).Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	peer := <-accepted
	defer peer.Close()
	// The link works: a byte each way.
	if _, err := peer.Write([]byte{1}); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Read(make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	ns.silence(t)
	start := time.Now()
	read := make(chan error, 1)
	go func() {
		_, err := conn.Read(make([]byte, 1))
		read <- err
	}()
	// Generous: the kernel's timers on a loaded machine, beyond Silent.
	limit := 3 * Silent
	select {
	case err := <-read:
		took := time.Since(start)
		t.Logf("the silent peer was given up after %s (keepalive: %s idle, %d probes %s apart): %v", took.Round(100*time.Millisecond), KeepIdle, KeepCount, KeepInterval, err)
		if !errors.Is(err, syscall.ETIMEDOUT) {
			t.Errorf("the read ended with %v, want ETIMEDOUT (the keepalive's verdict)", err)
		}
		if took < KeepIdle {
			t.Errorf("given up after %s, before the first probe was due (%s): not the keepalive", took, KeepIdle)
		}
	case <-time.After(limit):
		t.Fatalf("the read on a connection to a silent peer still waits after %s (keepalive should give it up after %s)", limit, Silent)
	}
}

// namespace is a network namespace joined to this one by a veth pair:
// host is this side's address, peer the namespace's.
type namespace struct {
	name, link string
	host, peer string
}

// silentNamespace makes a namespace (root and ip(8) needed: under CI=true
// their absence fails the test, elsewhere it skips it), removed when t
// ends.
func silentNamespace(t *testing.T) *namespace {
	t.Helper()
	if _, err := exec.LookPath("ip"); err != nil || os.Geteuid() != 0 {
		msg := "needs root and ip(8) (apt-get install iproute2) to make a network namespace"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	pid := os.Getpid()
	n := &namespace{name: fmt.Sprintf("botrun-ka-%d", pid), link: fmt.Sprintf("bka%d", pid),
		host: fmt.Sprintf("10.231.%d.1", pid%250), peer: fmt.Sprintf("10.231.%d.2", pid%250)}
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v\n%s", args, err, out)
		}
	}
	// What runs killed before their cleanup left (their process gone).
	left, _ := filepath.Glob("/run/netns/botrun-ka-*")
	for _, path := range left {
		var old int
		if _, err := fmt.Sscanf(filepath.Base(path), "botrun-ka-%d", &old); err != nil {
			continue
		}
		if old == pid || syscall.Kill(old, 0) == syscall.ESRCH {
			exec.Command("ip", "link", "del", fmt.Sprintf("bka%dh", old)).Run()
			exec.Command("ip", "netns", "del", filepath.Base(path)).Run()
		}
	}
	run("netns", "add", n.name)
	t.Cleanup(func() {
		exec.Command("ip", "link", "del", n.link+"h").Run()
		exec.Command("ip", "netns", "del", n.name).Run()
	})
	run("link", "add", n.link+"h", "type", "veth", "peer", "name", n.link+"n")
	run("link", "set", n.link+"n", "netns", n.name)
	run("addr", "add", n.host+"/30", "dev", n.link+"h")
	run("link", "set", n.link+"h", "up")
	run("netns", "exec", n.name, "ip", "addr", "add", n.peer+"/30", "dev", n.link+"n")
	run("netns", "exec", n.name, "ip", "link", "set", n.link+"n", "up")
	return n
}

// listen listens on the namespace's address, from a thread moved into the
// namespace for the call (the socket stays in it).
func (n *namespace) listen(t *testing.T) net.Listener {
	t.Helper()
	type result struct {
		ln  net.Listener
		err error
	}
	done := make(chan result, 1)
	go func() {
		// The thread is left locked: it ends with the goroutine, so a
		// failed return to our namespace never leaks into other work.
		runtime.LockOSThread()
		fd, err := unix.Open("/run/netns/"+n.name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			done <- result{err: err}
			return
		}
		defer unix.Close(fd)
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			done <- result{err: fmt.Errorf("setns: %w", err)}
			return
		}
		ln, err := net.Listen("tcp", n.peer+":0")
		done <- result{ln, err}
	}()
	r := <-done
	if r.err != nil {
		t.Fatalf("listening in namespace %s: %v", n.name, r.err)
	}
	return r.ln
}

// silence drops, in the namespace, everything addressed back to this side.
func (n *namespace) silence(t *testing.T) {
	t.Helper()
	if out, err := exec.Command("ip", "netns", "exec", n.name, "ip", "route", "add", "blackhole", n.host+"/32").CombinedOutput(); err != nil {
		t.Fatalf("blackholing the way back: %v\n%s", err, out)
	}
}
