package faultnet

import (
	"bufio"
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"
)

// echoServer echoes each line back.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go io.Copy(c, c)
		}
	}()
	return ln.Addr().String()
}

func roundTrip(c net.Conn, r *bufio.Reader, deadline time.Duration) (string, error) {
	c.SetDeadline(time.Now().Add(deadline))
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return "", err
	}
	return r.ReadString('\n')
}

func TestCutBlackholeHeal(t *testing.T) {
	p, err := Start(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(c)
	if got, err := roundTrip(c, r, 10*time.Second); err != nil || got != "ping\n" {
		t.Fatalf("up: %q, %v", got, err)
	}

	// Blackhole: no answer and no error, until healed; then the held
	// bytes arrive, as TCP retransmits them.
	p.Blackhole()
	_, err = roundTrip(c, r, 200*time.Millisecond)
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("blackholed: want a timeout (no RST, no FIN), got %v", err)
	}
	p.Heal()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if got, err := r.ReadString('\n'); err != nil || got != "ping\n" {
		t.Fatalf("after healing, the held bytes: %q, %v", got, err)
	}

	// Cut: the connection is reset, and a new one too.
	p.Cut()
	if _, err := roundTrip(c, r, 10*time.Second); !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, io.EOF) {
		t.Fatalf("cut: want a reset, got %v", err)
	}
	if c2, err := net.Dial("tcp", p.Addr()); err == nil {
		_, err = roundTrip(c2, bufio.NewReader(c2), 10*time.Second)
		c2.Close()
		if err == nil {
			t.Fatal("cut: a new connection went through")
		}
	}
	p.Heal()
	c3, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()
	if got, err := roundTrip(c3, bufio.NewReader(c3), 10*time.Second); err != nil || got != "ping\n" {
		t.Fatalf("healed: %q, %v", got, err)
	}
}
