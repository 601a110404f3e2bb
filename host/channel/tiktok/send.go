package tiktok

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/channel/httpkit"
)

// TikTok's answer codes botrun maps (every answer is HTTP 200).
const (
	// CodeRateLimited is a rate limit: the send is retried after
	// RateLimitWait.
	CodeRateLimited = 40100
	// CodeBadToken is an invalid or expired access token: permanent.
	CodeBadToken = 40105
	// CodeBadParameters is a parameter TikTok refuses (an unknown
	// conversation, an empty text, an unknown media): unsupported content.
	CodeBadParameters = 40002
)

// RateLimitWait is how long a rate-limited send waits: TikTok's answer
// names no wait.
const RateLimitWait = 10 * time.Second

// mapCode maps an answer's code other than 0 onto the taxonomy; an
// unknown code is retried.
func mapCode(code int, message string) error {
	if len(message) > 200 {
		message = message[:200]
	}
	cause := fmt.Errorf("code %d: %s", code, message)
	switch code {
	case CodeRateLimited:
		return &channel.RateLimitedError{RetryAfter: RateLimitWait, Err: cause}
	case CodeBadToken:
		return &channel.PermanentError{Err: fmt.Errorf("%w (is access_token valid and not expired?)", cause)}
	case CodeBadParameters:
		return fmt.Errorf("%w: %w", channel.ErrUnsupportedContent, cause)
	}
	return cause
}

// mapStatus maps an HTTP answer other than 2xx (a gateway's, not the API's).
func mapStatus(status int, header http.Header, body []byte) error {
	cause, _ := httpkit.ErrorAnswer(status, body)
	switch {
	case status == http.StatusTooManyRequests:
		return httpkit.RateLimited(header, RateLimitWait, cause)
	case status == http.StatusUnauthorized, status == http.StatusForbidden:
		return &channel.PermanentError{Err: fmt.Errorf("%w (is access_token right?)", cause)}
	case status == http.StatusRequestEntityTooLarge:
		return fmt.Errorf("%w: %w", channel.ErrPayloadTooLarge, cause)
	case status/100 == 4:
		return &channel.PermanentError{Err: cause}
	}
	return cause
}

// unsupported is a send refused before any request.
func unsupported(format string, args ...any) error {
	return fmt.Errorf("%w: tiktok: %s", channel.ErrUnsupportedContent, fmt.Sprintf(format, args...))
}

// Send implements channel.Provider: a text message
// {"business_id","recipient_type":"CONVERSATION","recipient":chat,
// "message_type":"TEXT","text":{"body"}}, at most 6,000 characters. An image
// is an IMAGE message of a media_id TikTok already has (Media.Ref: an
// inbound image's reference, or the media_id of an upload to TikTok); TikTok's image messages carry no caption, so a
// text with it goes as a second message after the image, and a failure of
// that second send resends both. Images by URL, other media, buttons and
// lists are refused before any request.
func (p *Provider) Send(ctx context.Context, msg channel.Outbound) (string, error) {
	if len(msg.Buttons) > 0 || msg.List != nil {
		return "", fmt.Errorf("tiktok %s: %w", p.cfg.ID, unsupported("TikTok's messages carry no buttons or lists"))
	}
	text := msg.Text
	if m := msg.Media; m != nil {
		if m.Type != "image" {
			return "", fmt.Errorf("tiktok %s: %w", p.cfg.ID, unsupported("cannot send media of type %q (images only)", m.Type))
		}
		id, err := p.mediaID(m)
		if err != nil {
			return "", fmt.Errorf("tiktok %s: %w", p.cfg.ID, err)
		}
		text = httpkit.CaptionText(m.Caption, text)
		if err := checkText(text, true); err != nil {
			return "", fmt.Errorf("tiktok %s: %w", p.cfg.ID, err)
		}
		ref, err := p.send(ctx, msg.Chat, "IMAGE", map[string]any{"image": map[string]string{"media_id": id}})
		if err != nil || strings.TrimSpace(text) == "" {
			return ref, err
		}
		if _, err := p.send(ctx, msg.Chat, "TEXT", map[string]any{"text": map[string]string{"body": text}}); err != nil {
			if httpkit.Permanent(err) {
				// The image went out: a retry would send it again.
				p.Log.Warn("tiktok: the text after an image was refused; the image was sent", "provider", p.cfg.ID, "err", err)
				return ref, nil
			}
			return "", err
		}
		return ref, nil
	}
	if err := checkText(text, false); err != nil {
		return "", fmt.Errorf("tiktok %s: %w", p.cfg.ID, err)
	}
	return p.send(ctx, msg.Chat, "TEXT", map[string]any{"text": map[string]string{"body": text}})
}

// mediaID is the media_id an outbound image is sent by: an inbound
// image's (its coordinates as the reference), or one TikTok gave an upload
// (the reference as it is). A URL or a sticker is refused.
func (p *Provider) mediaID(m *channel.Media) (string, error) {
	switch {
	case m.URL != "" || strings.Contains(m.Ref, "://") || (!strings.HasPrefix(m.Ref, "{") && !validID(m.Ref)):
		return "", unsupported("TikTok sends images by a TikTok media_id (an inbound image's, or an upload's), not by URL")
	case !strings.HasPrefix(m.Ref, "{"):
		return m.Ref, nil
	}
	co, _, err := p.ref(m.Ref)
	if err != nil {
		return "", unsupported("the image's reference is not a TikTok image's coordinates")
	}
	return co.MediaID, nil
}

// checkText refuses an empty text (unless optional) and one over TextLimit.
func checkText(text string, optional bool) error {
	switch n := utf8.RuneCountInString(text); {
	case n > TextLimit:
		return fmt.Errorf("%w: tiktok: a text of %d characters, TikTok allows %d", channel.ErrPayloadTooLarge, n, TextLimit)
	case strings.TrimSpace(text) == "" && !optional:
		return unsupported("the text is empty (TikTok requires one)")
	}
	return nil
}

// send makes one message/send call and returns TikTok's message id.
func (p *Provider) send(ctx context.Context, chat, typ string, fields map[string]any) (string, error) {
	body := map[string]any{"business_id": p.cfg.BusinessID, "recipient_type": "CONVERSATION", "recipient": chat, "message_type": typ}
	for k, v := range fields {
		body[k] = v
	}
	js, err := json.Marshal(body)
	if err != nil {
		return "", fmt.Errorf("tiktok %s: %w", p.cfg.ID, err)
	}
	var out struct {
		Message struct {
			MessageID string `json:"message_id"`
		} `json:"message"`
	}
	if err := p.call(ctx, SendPath, js, &out); err != nil {
		return "", fmt.Errorf("tiktok %s: %w", p.cfg.ID, err)
	}
	if out.Message.MessageID == "" {
		// TikTok took the message (code 0): sending it again would send it
		// twice, so it counts as sent, without a ref.
		p.Log.Warn("tiktok: a send accepted without data.message.message_id", "provider", p.cfg.ID)
	}
	return out.Message.MessageID, nil
}
