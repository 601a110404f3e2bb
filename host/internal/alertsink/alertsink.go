// Package alertsink is the operator's [alerts] url: the Sink, a channel
// that delivers alerts as signed JSON POSTs, and the Forwarder, which
// journals each alert the bot emits (observe.Alerts.Out) in the outbox for
// the sink, like any send (so they are retried, and survive a restart),
// and posts it once straight to the sink when the journal is down.
//
// alertsink imports durability, host/channel, host/channel/httpkit and
// host/internal/{clock,observe,rules}; it never imports host. It reads time
// only through its clock.
package alertsink

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/channel/httpkit"
	"github.com/botrun/botrun/host/internal/clock"
	"github.com/botrun/botrun/host/internal/observe"
	"github.com/botrun/botrun/host/internal/rules"
)

// Sink delivers alerts as signed JSON POSTs, journaled in the outbox
// like any send (so they are retried, and survive a restart). The signature
// is the http channel's: X-Botrun-Timestamp (Unix seconds) and
// X-Botrun-Signature: sha256=<hex HMAC-SHA256 of "<timestamp>.<body>">.
type Sink struct {
	url    string
	secret []byte
	client *http.Client
	clock  clock.Clock
}

func NewSink(rawURL, secret string, c clock.Clock) (*Sink, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("alerts: url %q: %w", rawURL, err)
	}
	return &Sink{url: rawURL, secret: []byte(secret), client: httpkit.NewClient(30*time.Second, u, nil), clock: clock.Or(c)}, nil
}

// ID implements channel.Provider.
func (s *Sink) ID() string { return rules.AlertsChannel }

// Send implements channel.Provider: msg.Text is the alert's JSON.
func (s *Sink) Send(ctx context.Context, msg channel.Outbound) (string, error) {
	body := []byte(msg.Text)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url, bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	ts := strconv.FormatInt(s.clock.Now().Unix(), 10)
	mac := hmac.New(sha256.New, s.secret)
	mac.Write([]byte(ts + "."))
	mac.Write(body)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Botrun-Timestamp", ts)
	req.Header.Set("X-Botrun-Signature", "sha256="+hex.EncodeToString(mac.Sum(nil)))
	req.Header.Set("Idempotency-Key", msg.Key)
	resp, err := s.client.Do(req)
	if err != nil {
		return "", fmt.Errorf("alerts: %w", err)
	}
	defer resp.Body.Close()
	rb, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
	switch {
	case resp.StatusCode/100 == 2:
		return msg.Key, nil
	case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500:
		return "", fmt.Errorf("alerts: HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(rb)))
	}
	return "", &channel.PermanentError{Err: fmt.Errorf("alerts: HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(rb)))}
}

// Body is what an alert POST carries.
type Body struct {
	observe.Alert
	// Bot is the bot's scope; At the alert's time in Unix milliseconds.
	Bot string `json:"bot"`
	At  int64  `json:"at"`
}

// Forwarder journals the bot's alerts for the sink.
type Forwarder struct {
	// Bot is the bot's scope id, which each alert names.
	Bot string
	// Journal journals an alert's body under key in the outbox, for the
	// sink's chat "alerts".
	Journal func(ctx context.Context, key, body string) error
	// Sink posts an alert the journal could not take (nil: none).
	Sink channel.Channel
	// NewKey returns a fresh idempotency key's random part.
	NewKey func() string
	// Wake asks the sweeper to deliver a journaled alert now.
	Wake  func()
	Clock clock.Clock
	Log   *slog.Logger
}

// Run journals each alert of in for the sink until ctx ends. It runs beside
// the bot: an alert never waits on the journal in a turn.
func (f *Forwarder) Run(ctx context.Context, in <-chan observe.Alert) {
	c := clock.Or(f.Clock)
	for {
		select {
		case <-ctx.Done():
			return
		case al := <-in:
			body, _ := json.Marshal(Body{Alert: al, Bot: f.Bot, At: c.Now().UnixMilli()})
			key := "alert:" + f.NewKey()
			if err := f.Journal(ctx, key, string(body)); err != nil && ctx.Err() == nil {
				// The journal is down (the very alert may say so): post it
				// once without it, not retried.
				f.postUnjournaled(ctx, al, key, string(body), err)
				continue
			}
			f.Wake()
		}
	}
}

// postUnjournaled posts an alert the outbox could not journal (journalErr)
// straight to the sink, once: when the journal is down, the alert that
// says so still reaches the operator.
func (f *Forwarder) postUnjournaled(ctx context.Context, al observe.Alert, key, body string, journalErr error) {
	if f.Sink == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := f.Sink.Send(ctx, channel.Outbound{Chat: "alerts", Text: body, Key: key}); err != nil {
		f.Log.Error("alerts: journaling an alert failed, and posting it without the journal too; it is only in this log", "alert", al.Name, "journal_err", journalErr, "err", err)
	}
}

// SendAlerts tell the operator of the sender's dead and ambiguous sends
// (send.Alerts).
type SendAlerts struct{ A *observe.Alerts }

// Dead implements send.Alerts.
func (s SendAlerts) Dead(rec durability.OutboxRecord, why string) {
	s.A.Emit(observe.Alert{Name: observe.AlertDead, Kind: "outbox", ID: rec.Key, Key: rec.Key, Provider: rec.Provider, Chat: rec.Chat, Error: why})
}

// Ambiguous implements send.Alerts.
func (s SendAlerts) Ambiguous(rec durability.OutboxRecord) {
	s.A.Emit(observe.Alert{Name: observe.AlertAmbiguous, Key: rec.Key, Provider: rec.Provider, Chat: rec.Chat})
}
