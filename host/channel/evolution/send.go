package evolution

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/channel/httpkit"
	"github.com/botrun/botrun/host/channel/internal/gateway"
)

// Send implements channel.Provider: a text by sendText, a media by
// sendMedia with the text as its caption (by its URL, or an inbound media
// fetched from Evolution and sent again as base64); the chat (a number or a
// JID) is the number. Returns the message's key.id.
func (p *Provider) Send(ctx context.Context, msg channel.Outbound) (string, error) {
	out, err := p.Prepare(msg)
	if err != nil {
		return "", err
	}
	var ans struct {
		Key struct {
			ID string `json:"id"`
		} `json:"key"`
	}
	if m := out.Media; m == nil {
		err = p.Call(ctx, http.MethodPost, gateway.Path("message", "sendText", p.cfg.Instance),
			map[string]any{"number": msg.Chat, "text": out.Text}, &ans)
	} else {
		body := map[string]any{"number": msg.Chat, "mediatype": m.Type, "media": out.URL}
		if out.Ref != "" { // an inbound media, sent again as base64
			b, mime, err := p.Resend(ctx, out.Ref)
			if err != nil {
				return "", err
			}
			body["media"], body["mimetype"] = base64.StdEncoding.EncodeToString(b), mime
		}
		if out.Text != "" {
			body["caption"] = out.Text
		}
		if m.MIME != "" {
			body["mimetype"] = m.MIME
		}
		if m.Type == "document" {
			body["fileName"] = gateway.FileName(out.URL)
		}
		err = p.Call(ctx, http.MethodPost, gateway.Path("message", "sendMedia", p.cfg.Instance), body, &ans)
	}
	if err != nil {
		return "", err
	}
	if ans.Key.ID == "" {
		return "", p.Errorf("the answer has no key.id")
	}
	return ans.Key.ID, nil
}

// media is the gateway's Spec.Media: POST
// /chat/getBase64FromMediaMessage/{instance} with the message's key.id.
// Evolution finds the message in its own store
// (DATABASE_SAVE_DATA_NEW_MESSAGE).
func (p *Provider) media(id string) (method, path string, body any) {
	return http.MethodPost, gateway.Path("chat", "getBase64FromMediaMessage", p.cfg.Instance),
		map[string]any{"message": map[string]any{"key": map[string]any{"id": id}}, "convertToMp4": false}
}

// apiError is Evolution's error body: {"status","error","response":{"message"}},
// the message a string, or a list of strings and objects.
type apiError struct {
	Status   int    `json:"status"`
	Error    string `json:"error"`
	Response struct {
		Message json.RawMessage `json:"message"`
	} `json:"response"`
}

// disconnected are the words of a send refused because the instance is not
// connected to WhatsApp right now (Baileys' errors, answered 400): a retry
// after it reconnects succeeds.
var disconnected = []string{"connection closed", "connection lost", "connection failure", "timed out", "not connected"}

// mapError maps an Evolution error answer onto the taxonomy.
func mapError(status int, h http.Header, body []byte) error {
	var e apiError
	json.Unmarshal(body, &e)
	text := string(e.Response.Message)
	if len(text) > 300 {
		text = text[:300] + "…"
	}
	cause := fmt.Errorf("HTTP %d: %s %s", status, e.Error, text)
	lower := strings.ToLower(text)
	switch {
	case status == http.StatusTooManyRequests:
		return httpkit.RateLimited(h, 5*time.Second, cause)
	case status == http.StatusRequestEntityTooLarge:
		return fmt.Errorf("%w: %w", channel.ErrPayloadTooLarge, cause)
	case status == http.StatusUnauthorized, status == http.StatusForbidden:
		return &channel.PermanentError{Err: fmt.Errorf("%w (is api_key the instance's token or the server's key?)", cause)}
	case status == http.StatusNotFound:
		return &channel.PermanentError{Err: fmt.Errorf("%w (does the instance exist?)", cause)}
	case status != http.StatusBadRequest:
		return cause
	case notOnWhatsApp(e.Response.Message):
		return fmt.Errorf("%w: %w", channel.ErrRecipientUnreachable, cause)
	}
	for _, d := range disconnected {
		if strings.Contains(lower, d) {
			return cause
		}
	}
	return fmt.Errorf("%w: %w", channel.ErrUnsupportedContent, cause)
}

// notOnWhatsApp reports whether an error message says the number has no
// WhatsApp: [{"exists":false,"jid":…,"number":…}].
func notOnWhatsApp(msg json.RawMessage) bool {
	var items []json.RawMessage
	if json.Unmarshal(msg, &items) != nil {
		return false
	}
	for _, it := range items {
		var n struct {
			Exists *bool `json:"exists"`
		}
		if json.Unmarshal(it, &n) == nil && n.Exists != nil && !*n.Exists {
			return true
		}
	}
	return false
}
