package wppconnect

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

// recipient is the part of a send that names the chat: phone, and isGroup
// or isLid by the JID's server (WPPConnect rebuilds the JID from the digits
// and those flags).
func recipient(chat string) map[string]any {
	r := map[string]any{"phone": chat, "isGroup": strings.HasSuffix(chat, "@g.us")}
	if strings.HasSuffix(chat, "@lid") {
		r["isLid"] = true
	}
	return r
}

// Send implements channel.Provider: a text by send-message, an image by
// send-image, other media by send-file, the text as the media's caption; a
// media by its URL (path), or an inbound one fetched from WPPConnect and
// sent again as a data: URI (base64). Returns the sent message's id.
func (p *Provider) Send(ctx context.Context, msg channel.Outbound) (string, error) {
	out, err := p.Prepare(msg)
	if err != nil {
		return "", err
	}
	body, action := recipient(msg.Chat), "send-message"
	if m := out.Media; m == nil {
		body["message"] = out.Text
	} else {
		action = "send-file"
		if m.Type == "image" {
			action = "send-image"
		}
		body["path"], body["filename"] = out.URL, gateway.FileName(out.URL)
		if out.Ref != "" { // an inbound media, sent again as a data: URI
			b, mime, err := p.Resend(ctx, out.Ref)
			if err != nil {
				return "", err
			}
			if m.MIME != "" {
				mime = m.MIME
			}
			delete(body, "path")
			body["base64"] = "data:" + mime + ";base64," + base64.StdEncoding.EncodeToString(b)
		}
		if out.Text != "" {
			body["caption"] = out.Text
		}
	}
	var ans struct {
		Response []struct {
			ID JID `json:"id"`
		} `json:"response"`
	}
	if err := p.Call(ctx, http.MethodPost, gateway.Path("api", p.cfg.Session, action), body, &ans); err != nil {
		return "", err
	}
	if n := len(ans.Response); n == 0 || ans.Response[n-1].ID == "" {
		return "", p.Errorf("the answer has no response[].id")
	}
	return string(ans.Response[len(ans.Response)-1].ID), nil
}

// Typing implements channel.Typist: POST /api/{session}/typing, which
// shows "typing…" in the chat until the next message.
func (p *Provider) Typing(ctx context.Context, chat, _ string) error {
	body := recipient(chat)
	body["value"] = true
	var ans struct {
		Status string `json:"status"`
	}
	return p.Call(ctx, http.MethodPost, gateway.Path("api", p.cfg.Session, "typing"), body, &ans)
}

// media is the gateway's Spec.Media: GET
// /api/{session}/get-media-by-message/{messageId}.
func (p *Provider) media(id string) (method, path string, body any) {
	return http.MethodGet, gateway.Path("api", p.cfg.Session, "get-media-by-message", id), nil
}

// mapError maps a WPPConnect error answer onto the taxonomy. Its bodies vary
// by route: {"status","message"}, {"error"}, {"response":null,"status","message"}.
func mapError(status int, h http.Header, body []byte) error {
	var e map[string]any
	json.Unmarshal(body, &e)
	state, _ := e["status"].(string)
	text := ""
	if m := e["message"]; m != nil {
		text = fmt.Sprint(m)
	}
	if s, ok := e["error"].(string); ok {
		text = s
	}
	if len(text) > 300 {
		text = text[:300] + "…"
	}
	cause := fmt.Errorf("HTTP %d: %s %s", status, state, text)
	switch {
	case status == http.StatusTooManyRequests:
		return httpkit.RateLimited(h, 5*time.Second, cause)
	case status == http.StatusRequestEntityTooLarge:
		return fmt.Errorf("%w: %w", channel.ErrPayloadTooLarge, cause)
	case status == http.StatusNotFound && state == "Disconnected":
		// The session is not connected to WhatsApp (its QR code to scan):
		// a retry once it is succeeds.
		return cause
	case status == http.StatusUnauthorized, status == http.StatusForbidden:
		return &channel.PermanentError{Err: fmt.Errorf("%w (is token the session's, from generate-token?)", cause)}
	case status == http.StatusNotFound:
		return &channel.PermanentError{Err: cause}
	case status == http.StatusBadRequest && state == "Connected":
		// The session checked the number: it has no WhatsApp.
		return fmt.Errorf("%w: %w", channel.ErrRecipientUnreachable, cause)
	case status == http.StatusBadRequest, status == http.StatusNotImplemented:
		return fmt.Errorf("%w: %w", channel.ErrUnsupportedContent, cause)
	}
	return cause
}
