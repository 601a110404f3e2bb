// Package faultnet is a TCP proxy for tests that breaks the link between a
// client and its server on demand, as a network does: Cut resets every
// connection and refuses new ones; Blackhole stops moving bytes without a
// word (no RST, no FIN: packets dropped), holding new connections silent
// too; Slow delays every chunk. Heal restores the link; bytes a blackhole
// held are delivered then, as TCP retransmits them, unless an end gave up
// meanwhile.
package faultnet

import (
	"net"
	"sync"
	"time"
)

// Mode is the state of the link.
type Mode int

// The link's states.
const (
	Up Mode = iota
	Cut
	Blackhole
	Slow
)

func (m Mode) String() string {
	switch m {
	case Up:
		return "up"
	case Cut:
		return "cut"
	case Blackhole:
		return "blackhole"
	case Slow:
		return "slow"
	}
	return "Mode(?)"
}

// Proxy forwards connections from its loopback address to a target.
type Proxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	mode    Mode
	delay   time.Duration
	changed chan struct{} // closed and replaced at every change of mode
	conns   map[net.Conn]struct{}
	wg      sync.WaitGroup
	closed  bool
}

// Start listens on a free loopback port and forwards to target
// ("host:port").
func Start(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, changed: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's "host:port": point the client at it.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Mode returns the link's state.
func (p *Proxy) Mode() Mode {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mode
}

func (p *Proxy) set(m Mode, delay time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mode, p.delay = m, delay
	close(p.changed)
	p.changed = make(chan struct{})
	if m == Cut {
		for c := range p.conns {
			reset(c)
		}
	}
}

// Cut resets every connection (RST) and refuses new ones until Heal.
func (p *Proxy) Cut() { p.set(Cut, 0) }

// Blackhole stops the link silently until Heal.
func (p *Proxy) Blackhole() { p.set(Blackhole, 0) }

// Slow delays every chunk of bytes, each way, by d until Heal.
func (p *Proxy) Slow(d time.Duration) { p.set(Slow, d) }

// Heal restores the link.
func (p *Proxy) Heal() { p.set(Up, 0) }

// Close stops the proxy and closes its connections.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		c.Close()
	}
	close(p.changed)
	p.changed = make(chan struct{})
	p.mu.Unlock()
	err := p.ln.Close()
	p.wg.Wait()
	return err
}

// reset closes c with an RST.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	c.Close()
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	c.Close()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

// wait blocks while the link is blackholed and returns the delay to apply
// to the next chunk, or false when it is cut or closed.
func (p *Proxy) wait() (time.Duration, bool) {
	for {
		p.mu.Lock()
		mode, delay, changed, closed := p.mode, p.delay, p.changed, p.closed
		p.mu.Unlock()
		switch {
		case closed || mode == Cut:
			return 0, false
		case mode == Blackhole:
			<-changed
		default:
			return delay, true
		}
	}
}

func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	if !p.track(client) {
		return
	}
	defer p.untrack(client)
	if _, ok := p.wait(); !ok {
		reset(client)
		return
	}
	server, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		reset(client)
		return
	}
	if !p.track(server) {
		return
	}
	defer p.untrack(server)
	done := make(chan struct{}, 2)
	go func() { p.pump(server, client); done <- struct{}{} }()
	go func() { p.pump(client, server); done <- struct{}{} }()
	<-done
	// One way ended (or the link was cut): end both.
	reset(client)
	reset(server)
	<-done
}

// pump copies from src to dst chunk by chunk, as the link allows.
func (p *Proxy) pump(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			delay, ok := p.wait()
			if !ok {
				return
			}
			if delay > 0 {
				time.Sleep(delay)
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
