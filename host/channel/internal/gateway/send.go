package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"path"
	"strings"
	"unicode/utf8"

	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/channel/httpkit"
)

// Outgoing is a send a gateway can make: a text, or a media by its public
// URL with a caption.
type Outgoing struct {
	// Text is the text; with Media, the caption (the media's caption, a
	// blank line, the text: httpkit.CaptionText).
	Text string
	// Media is the attachment, nil for a text.
	Media *channel.Media
	// URL is the media's public http(s) URL, which the gateway fetches; or
	// Ref, when URL is empty, the id of an inbound message whose media goes
	// out again (Resend).
	URL, Ref string
}

// MaxResend is the largest inbound media a send takes back from the gateway
// to send again: WhatsApp's limit for images, videos and audio.
const MaxResend = 16 << 20

// Resend loads the media of the inbound message id, for a send that
// carries it again: its bytes and MIME type. A media the gateway no longer
// has fails the send for good (unsupported content), and so does one over
// MaxResend (payload too large); other failures are worth a retry.
func (c *Channel) Resend(ctx context.Context, id string) ([]byte, string, error) {
	b, mime, err := c.load(ctx, id, MaxResend)
	switch {
	case errors.Is(err, channel.ErrMediaTooLarge):
		return nil, "", fmt.Errorf("%w: %w", channel.ErrPayloadTooLarge, err)
	case httpkit.MediaGone(err):
		return nil, "", fmt.Errorf("%w: the media of message %q cannot be had to send again: %w", channel.ErrUnsupportedContent, id, err)
	case err != nil:
		return nil, "", err
	}
	return b, mime, nil
}

// Unsupported is a send refused before any request.
func (c *Channel) Unsupported(format string, args ...any) error {
	return fmt.Errorf("%w: %s %s: %s", channel.ErrUnsupportedContent, c.spec.Type, c.spec.ID, fmt.Sprintf(format, args...))
}

// FileName is the name a document sent from u goes by: the last segment of
// its path, or "file".
func FileName(u string) string {
	if p, err := url.Parse(u); err == nil {
		if name := path.Base(p.Path); name != "." && name != "/" {
			return name
		}
	}
	return "file"
}

// Prepare checks msg against what the gateways can send, before any
// request: no buttons or lists (WhatsApp shows those only to the Business
// Platform, not to a WhatsApp Web account), a text that is not empty and
// fits TextLimit, media of type image, video, audio or document by a public
// URL (the gateway downloads it) or by an inbound message's id (Resend), no
// caption under an audio.
func (c *Channel) Prepare(msg channel.Outbound) (Outgoing, error) {
	if len(msg.Buttons) > 0 || msg.List != nil {
		return Outgoing{}, c.Unsupported("buttons and lists are shown by the WhatsApp Business Platform (Cloud API) only, not to a WhatsApp Web account behind a gateway")
	}
	out := Outgoing{Text: msg.Text}
	if m := msg.Media; m != nil {
		switch m.Type {
		case "image", "video", "audio", "document":
		default:
			return Outgoing{}, c.Unsupported("cannot send media of type %q (image, video, audio or document)", m.Type)
		}
		out.Media, out.URL, out.Text = m, m.URL, httpkit.CaptionText(m.Caption, msg.Text)
		if out.URL == "" {
			out.URL = m.Ref
		}
		if !strings.HasPrefix(out.URL, "https://") && !strings.HasPrefix(out.URL, "http://") {
			if !ValidID(out.URL) {
				return Outgoing{}, c.Unsupported("the gateway sends media by a public URL or an inbound message's id, and %q is neither", out.URL)
			}
			out.URL, out.Ref = "", out.URL
		}
		if m.Type == "audio" && out.Text != "" {
			return Outgoing{}, c.Unsupported("WhatsApp shows no caption under an audio: send the text on its own")
		}
	} else if strings.TrimSpace(msg.Text) == "" {
		return Outgoing{}, c.Unsupported("the text is empty")
	}
	if n := utf8.RuneCountInString(out.Text); n > TextLimit {
		return Outgoing{}, fmt.Errorf("%w: %s %s: %d characters, over the %d of one WhatsApp message", channel.ErrPayloadTooLarge, c.spec.Type, c.spec.ID, n, TextLimit)
	}
	return out, nil
}
