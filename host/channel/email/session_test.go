package email

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/channel/channeltest"
	"github.com/botrun/botrun/host/channel/email/emailtest"
	"github.com/botrun/botrun/host/channel/internal/fakekit"
)

// afterCounting is a context, never done, that counts the functions
// context.AfterFunc registers on it and the ones stopped again. It is no
// context package type, so that AfterFunc uses its AfterFunc method.
type afterCounting struct {
	mu                  sync.Mutex
	registered, stopped int
}

func (c *afterCounting) Deadline() (time.Time, bool) { return time.Time{}, false }
func (c *afterCounting) Done() <-chan struct{}       { return make(chan struct{}) }
func (c *afterCounting) Err() error                  { return nil }
func (c *afterCounting) Value(any) any               { return nil }

// AfterFunc never calls f (the context never ends) and counts.
func (c *afterCounting) AfterFunc(f func()) func() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.registered++
	var once sync.Once
	return func() bool {
		stopped := false
		once.Do(func() {
			c.mu.Lock()
			c.stopped++
			c.mu.Unlock()
			stopped = true
		})
		return stopped
	}
}

func (c *afterCounting) counts() (registered, stopped int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.registered, c.stopped
}

// A session that ends (here the server goes away) lets go of its context:
// Run's context lives as long as the process, and a session per reconnect
// must not pile up on it.
func TestASessionReleasesItsContext(t *testing.T) {
	s, err := emailtest.Start(emailtest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	p, err := Open(Config{ID: "mail", IMAPURL: "imaps://" + s.IMAPAddr, SMTPURL: "smtps://" + s.SMTPAddr,
		Username: emailtest.Username, Password: emailtest.Password, From: "bot@example.test",
		Mailbox: "INBOX", TLSInsecure: true, Timeout: 30 * time.Second},
		channel.Env{ID: "mail", Admitter: channeltest.NewJournal(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx := &afterCounting{}
	done := make(chan error, 1)
	go func() { done <- p.session(ctx) }()
	// The first drain saves the cursor; then the session waits in IDLE.
	fakekit.WaitFor(t, "the first drain", func() bool {
		_, known, _ := p.store.cursor(context.Background())
		return known
	})
	s.Close()
	select {
	case err := <-done:
		t.Logf("the session ended: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the session did not end when the server went away")
	}
	if registered, stopped := ctx.counts(); registered == 0 || stopped != registered {
		t.Errorf("the session registered %d functions on its context and stopped %d", registered, stopped)
	}
}
