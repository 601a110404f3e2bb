package host

import (
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/botrun/botrun/host/config"
	"github.com/botrun/botrun/host/provider/webchat"
)

// serverTimeouts bound the HTTP servers a bot runs, so a client that trickles
// a request or holds a connection open cannot keep it forever.
type serverTimeouts struct {
	// readHeader bounds reading the request line and headers; read the
	// whole request with its body; write the handler and its answer (above
	// the webchat long-poll's longest wait); idle a kept-alive connection
	// between requests.
	readHeader, read, write, idle time.Duration
}

// defaultTimeouts are the timeouts of every server botrun starts.
var defaultTimeouts = serverTimeouts{
	readHeader: 10 * time.Second,
	read:       30 * time.Second,
	write:      webchat.MaxWait + 30*time.Second,
	idle:       2 * time.Minute,
}

func (t serverTimeouts) server(h http.Handler) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: t.readHeader, ReadTimeout: t.read, WriteTimeout: t.write, IdleTimeout: t.idle}
}

// served is one more address Run serves.
type served struct {
	ln      net.Listener
	handler http.Handler
}

// AddListener makes Run serve h on ln too, with the same timeouts, and shut it
// down with the bot (the admin API on its own address). Call it before Run.
func (b *Bot) AddListener(ln net.Listener, h http.Handler) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.servedAlso = append(b.servedAlso, served{ln, h})
}

// checkExposure refuses to serve a webchat, which has no authentication, on
// an address other machines reach, unless its entry says allow_public.
func (b *Bot) checkExposure(addr net.Addr) error {
	host, _, err := net.SplitHostPort(addr.String())
	if err != nil || config.LoopbackHost(host) {
		return nil
	}
	for _, pc := range b.cfg.Providers {
		wc, ok := pc.(*config.Webchat)
		if _, served := b.providers[pc.Common().ID].(*webchat.Provider); !ok || !served || wc.AllowPublic {
			continue
		}
		return fmt.Errorf("%s: webchat %q has no authentication and the server listens on %s, which is not loopback: listen on 127.0.0.1, or set allow_public = true in its [[providers]] entry to expose it on purpose", b.cfg.File, wc.ID, addr)
	}
	return nil
}
