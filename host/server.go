package host

import (
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/channel/httpkit"
)

// serverTimeouts bound the HTTP servers a bot runs, so a client that trickles
// a request or holds a connection open cannot keep it forever.
type serverTimeouts struct {
	// readHeader bounds reading the request line and headers; read the
	// whole request with its body; write the handler and its answer
	// (httpkit.MaxHandlerTime); idle a kept-alive connection
	// between requests.
	readHeader, read, write, idle time.Duration
}

// defaultTimeouts are the timeouts of every server botrun starts.
var defaultTimeouts = serverTimeouts{
	readHeader: 10 * time.Second,
	read:       30 * time.Second,
	write:      httpkit.MaxHandlerTime,
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

// checkExposure asks each channel that cares whether it may be served on
// addr (a webchat without allow_public refuses a non-loopback address).
func (b *Bot) checkExposure(addr net.Addr) error {
	for _, p := range b.ordered {
		if lc, ok := p.(channel.ListenChecker); ok {
			if err := lc.CheckListen(addr.String()); err != nil {
				return fmt.Errorf("%s: %w", b.cfg.File, err)
			}
		}
	}
	return nil
}
