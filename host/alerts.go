package host

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/channel/httpkit"
	"github.com/botrun/botrun/host/internal/observe"
	"github.com/botrun/botrun/host/internal/rules"
)

// alertSink delivers alerts as signed JSON POSTs, journaled in the outbox
// like any send (so they are retried, and survive a restart). The signature
// is the http channel's: X-Botrun-Timestamp (Unix seconds) and
// X-Botrun-Signature: sha256=<hex HMAC-SHA256 of "<timestamp>.<body>">.
type alertSink struct {
	url    string
	secret []byte
	client *http.Client
}

func newAlertSink(rawURL, secret string) (*alertSink, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("alerts: url %q: %w", rawURL, err)
	}
	return &alertSink{url: rawURL, secret: []byte(secret), client: httpkit.NewClient(30*time.Second, u, nil)}, nil
}

// ID implements channel.Provider.
func (s *alertSink) ID() string { return rules.AlertsChannel }

// Send implements channel.Provider: msg.Text is the alert's JSON.
func (s *alertSink) Send(ctx context.Context, msg channel.Outbound) (string, error) {
	body := []byte(msg.Text)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url, bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	ts := strconv.FormatInt(time.Now().Unix(), 10)
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

// alertBody is what an alert POST carries.
type alertBody struct {
	Alert
	// Bot is the bot's scope; At the alert's time in Unix milliseconds.
	Bot string `json:"bot"`
	At  int64  `json:"at"`
}

// forwardAlerts journals each alert for the alert sink until ctx ends. It
// runs beside the bot: an alert never waits on the journal in a turn.
func (b *Bot) forwardAlerts(ctx context.Context, in <-chan Alert) {
	for {
		select {
		case <-ctx.Done():
			return
		case al := <-in:
			body, _ := json.Marshal(alertBody{Alert: al, Bot: Scope(b.cfg).ID(), At: time.Now().UnixMilli()})
			key := "alert:" + randomID()
			if _, err := enqueue(ctx, b.outbox, rules.AlertsChannel, "alerts", string(body), key, 0); err != nil && ctx.Err() == nil {
				// The journal is down (the very alert may say so): post it
				// once without it, not retried.
				b.postUnjournaled(ctx, al, key, string(body), err)
				continue
			}
			b.wakeSweeper()
		}
	}
}

// postUnjournaled posts an alert the outbox could not journal (journalErr)
// straight to [alerts] url, once: when the journal is down, the alert that
// says so still reaches the operator.
func (b *Bot) postUnjournaled(ctx context.Context, al Alert, key, body string, journalErr error) {
	sink, ok := b.providers[rules.AlertsChannel]
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := sink.Send(ctx, channel.Outbound{Chat: "alerts", Text: body, Key: key}); err != nil {
		b.log.Error("alerts: journaling an alert failed, and posting it without the journal too; it is only in this log", "alert", al.Name, "journal_err", journalErr, "err", err)
	}
}

// sendAlerts tell the operator of the sender's dead and ambiguous sends.
type sendAlerts struct{ a *observe.Alerts }

// Dead implements send.Alerts.
func (s sendAlerts) Dead(rec durability.OutboxRecord, why string) {
	s.a.Emit(Alert{Name: AlertDead, Kind: "outbox", ID: rec.Key, Key: rec.Key, Provider: rec.Provider, Chat: rec.Chat, Error: why})
}

// Ambiguous implements send.Alerts.
func (s sendAlerts) Ambiguous(rec durability.OutboxRecord) {
	s.a.Emit(Alert{Name: AlertAmbiguous, Key: rec.Key, Provider: rec.Provider, Chat: rec.Chat})
}
