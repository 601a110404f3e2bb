package gohighlevel

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/channel/httpkit"
)

// GoHighLevel's burst limit: Burst requests per Per, per location.
const (
	Burst = 100
	Per   = 10 * time.Second
)

// DefaultRetryAfter is the wait of a 429 without Retry-After: the burst
// window.
const DefaultRetryAfter = Per

// window keeps a location's sends at Burst in any Per: it remembers the
// times of the last Burst requests (GoHighLevel does not say whether its
// window slides, so botrun keeps to the stricter reading).
type window struct {
	mu   sync.Mutex
	sent [Burst]time.Time
	next int // the oldest of sent
}

// windows holds one window per location, shared by every entry of the
// location in the process (an SMS and a WhatsApp entry share the limit).
var windows sync.Map

func windowOf(location string) *window {
	w, _ := windows.LoadOrStore(location, &window{})
	return w.(*window)
}

// take counts a request at now; when Burst were made in the Per before now,
// it counts nothing and returns how long until one may be.
func (w *window) take(now time.Time) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	if oldest := w.sent[w.next]; !oldest.IsZero() && now.Sub(oldest) < Per {
		return oldest.Add(Per).Sub(now)
	}
	w.sent[w.next] = now
	w.next = (w.next + 1) % Burst
	return 0
}

// ErrRateLimited is the cause of a send the bucket held back.
var ErrRateLimited = fmt.Errorf("over GoHighLevel's %d requests per %s for the location", Burst, Per)

// Send implements channel.Provider: one message of message_type to the
// contact msg.Chat, its media as an attachment URL. Buttons and lists are
// refused (GoHighLevel has none), and so is a text over the type's limit,
// before any request.
func (p *Provider) Send(ctx context.Context, msg channel.Outbound) (string, error) {
	if len(msg.Buttons) > 0 || msg.List != nil {
		return "", fmt.Errorf("%w: gohighlevel %s: GoHighLevel's messages have no buttons or lists", channel.ErrUnsupportedContent, p.cfg.ID)
	}
	body := map[string]any{"type": p.cfg.MessageType, "contactId": msg.Chat}
	text := msg.Text
	if m := msg.Media; m != nil {
		switch m.Type {
		case "image", "video", "audio", "document":
		default:
			return "", fmt.Errorf("%w: gohighlevel %s: cannot send media of type %q (image, video, audio or document)", channel.ErrUnsupportedContent, p.cfg.ID, m.Type)
		}
		src := m.URL
		if src == "" {
			src = m.Ref
		}
		if u, err := url.Parse(src); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			return "", fmt.Errorf("%w: gohighlevel %s: attachments go by public URL; %q is not one", channel.ErrUnsupportedContent, p.cfg.ID, src)
		}
		body["attachments"] = []string{src}
		text = httpkit.CaptionText(m.Caption, text)
	}
	if n, limit := utf8.RuneCountInString(text), TextLimits[p.cfg.MessageType]; n > limit {
		return "", fmt.Errorf("%w: gohighlevel %s: a text of %d characters, %s allows %d", channel.ErrPayloadTooLarge, p.cfg.ID, n, p.cfg.MessageType, limit)
	}
	if text != "" {
		body["message"] = text
	}
	js, err := json.Marshal(body)
	if err != nil {
		return "", fmt.Errorf("gohighlevel %s: %w", p.cfg.ID, err)
	}
	if wait := p.window.take(p.now()); wait > 0 {
		return "", &channel.RateLimitedError{RetryAfter: wait, Err: fmt.Errorf("gohighlevel %s: %w", p.cfg.ID, ErrRateLimited)}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.API.String()+"/conversations/messages", bytes.NewReader(js))
	if err != nil {
		return "", fmt.Errorf("gohighlevel %s: %w", p.cfg.ID, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	req.Header.Set("Version", APIVersion)
	req.Header.Set("Authorization", "Bearer "+p.cfg.Token)
	var out struct {
		ConversationID string `json:"conversationId"`
		MessageID      string `json:"messageId"`
	}
	if err := httpkit.CallJSON(p.Client, req, &out, mapError); err != nil {
		return "", fmt.Errorf("gohighlevel %s: %w", p.cfg.ID, err)
	}
	if out.MessageID == "" {
		return "", fmt.Errorf("gohighlevel %s: the answer has no messageId", p.cfg.ID)
	}
	return out.MessageID, nil
}

// mapError maps a GoHighLevel error answer ({"statusCode","message"}, the
// message a string or a list of them) onto the taxonomy.
func mapError(status int, header http.Header, body []byte) error {
	cause, low := httpkit.ErrorAnswer(status, body)
	switch {
	case status == http.StatusTooManyRequests:
		return httpkit.RateLimited(header, DefaultRetryAfter, cause)
	case status == http.StatusUnauthorized:
		return &channel.PermanentError{Err: fmt.Errorf("%w (is token valid? location access tokens expire within a day; use a Private Integration token)", cause)}
	case status == http.StatusForbidden:
		return &channel.PermanentError{Err: fmt.Errorf("%w (does token have the conversations/message.write scope for location_id?)", cause)}
	case strings.Contains(low, "contact") && (strings.Contains(low, "not found") || strings.Contains(low, "invalid")),
		strings.Contains(low, "dnd"):
		return fmt.Errorf("%w: %w", channel.ErrRecipientUnreachable, cause)
	case status == http.StatusNotFound:
		return &channel.PermanentError{Err: cause}
	case status == http.StatusRequestEntityTooLarge:
		return fmt.Errorf("%w: %w", channel.ErrPayloadTooLarge, cause)
	case status == http.StatusBadRequest, status == http.StatusUnprocessableEntity:
		return fmt.Errorf("%w: %w", channel.ErrUnsupportedContent, cause)
	}
	return cause
}
