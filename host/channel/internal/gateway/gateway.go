// Package gateway is what botrun's self-hosted WhatsApp gateway channels
// share: Evolution API (host/channel/evolution) and WPPConnect server
// (host/channel/wppconnect). Both are a JSON API at a configured URL that
// takes its credential in a header, speak for one WhatsApp Web account (an
// Evolution instance, a WPPConnect session), reference an inbound media by
// its message's id and answer its bytes later as base64 in JSON, and cannot
// show buttons or lists. Package gateway holds those: the API client, the
// webhook once authenticated (read, decode, the instance's events only,
// admit), the durable media references ({"owner","id"}) and their base64
// download, an inbound media sent again, the checks of a send, the
// timestamps, and the chats botrun answers. Each channel keeps its own
// credentials, wire format and error table.
//
// gateway is internal to host/channel: only Evolution and WPPConnect use
// it. It embeds httpkit.Base, and imports the standard library, the SPI
// (host/channel) and the toolkit (host/channel/httpkit).
package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/channel/httpkit"
)

// TextLimit is the longest text botrun sends in one WhatsApp message, in
// characters: the Cloud API's documented limit (WhatsApp Web takes longer
// ones, but the gateways document none); longer texts go in parts.
const TextLimit = 4096

// MaxBody is the largest webhook body a gateway channel accepts. A gateway
// told to put a media's base64 in its webhooks (Evolution's webhook_base64,
// WPPConnect's autoDownload) sends bodies as large as the media: turn that
// off, botrun asks for the bytes when a handler loads them.
const MaxBody = 4 << 20

// Spec is what a gateway channel tells the shared code.
type Spec struct {
	// Type is the channel's type name, for errors and logs.
	Type string
	// ID is the provider's id.
	ID string
	// APIURL is the gateway's base URL (required: the gateways are
	// self-hosted).
	APIURL string
	// Owner is the instance or session the channel speaks for: its media
	// references are refused for any other.
	Owner string
	// Auth sets the channel's credential on a request's header.
	Auth func(h http.Header)
	// MapError maps an answer that is not 2xx onto the taxonomy.
	MapError func(status int, h http.Header, body []byte) error
	// Media is the request that answers the media of the message id as
	// {"base64","mimetype"}: its method, API path and JSON body (nil: none).
	Media func(id string) (method, path string, body any)
	// Decode parses a webhook body (untrusted bytes) once its request is
	// authenticated: an error is answered 400, or a Refusal's status.
	Decode func(body []byte) (Event, error)
}

// ErrBadWebhook is wrapped by every error of DecodeEnvelope (and of a
// channel's own decoding of a webhook body).
var ErrBadWebhook = errors.New("bad webhook")

// DecodeEnvelope parses a webhook body from untrusted bytes as W, the
// channel's event envelope, whose name (event) must not be empty.
func DecodeEnvelope[W any](b []byte, event func(W) string) (W, error) {
	var wh W
	if err := json.Unmarshal(b, &wh); err != nil {
		return wh, fmt.Errorf("%w: %v", ErrBadWebhook, err)
	}
	if event(wh) == "" {
		return wh, fmt.Errorf("%w: no event", ErrBadWebhook)
	}
	return wh, nil
}

// Event is what a channel decoded of a webhook.
type Event struct {
	// Owner is the instance or session the event is of.
	Owner string
	// Messages are what botrun admits of it.
	Messages []channel.Message
}

// Refusal is a Decode error answered with its own status: a credential the
// body carries, missing (401) or wrong (403).
type Refusal struct {
	Status int
	Reason string
}

func (r *Refusal) Error() string { return r.Reason }

// Channel is the half of a gateway provider the gateways share.
type Channel struct {
	httpkit.Base
	spec Spec
}

// New returns the channel s describes, for the host's env; the entry's id is
// env's when s has none. The client follows no redirect: the gateway answers
// everything itself.
func New(s Spec, env channel.Env) (*Channel, error) {
	if s.ID == "" {
		s.ID = env.ID
	}
	if s.APIURL == "" {
		return nil, fmt.Errorf("%s %s: api_url is required (the gateway's own URL)", s.Type, s.ID)
	}
	c := &Channel{spec: s}
	if err := c.Open(s.Type, s.ID, env, s.APIURL, ""); err != nil {
		return nil, err
	}
	c.Dial(60*time.Second, nil)
	return c, nil
}

// TextLimits implements channel.Limiter.
func (c *Channel) TextLimits(channel.Outbound) (chars, bytes int) { return TextLimit, 0 }

// Serve answers a webhook whose credential (in a header or the URL) the
// channel checked: the body is read (at most MaxBody) and decoded
// (Spec.Decode), an event of another instance or session is acknowledged
// and ignored, and the messages are admitted (httpkit.AdmitAndAnswer).
func (c *Channel) Serve(w http.ResponseWriter, r *http.Request) {
	body, ok := httpkit.ReadWebhook(w, r, MaxBody)
	if !ok {
		return
	}
	ev, err := c.spec.Decode(body)
	var refusal *Refusal
	switch {
	case errors.As(err, &refusal):
		http.Error(w, refusal.Reason, refusal.Status)
		return
	case err != nil:
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	case ev.Owner != c.spec.Owner:
		c.Log.Warn(c.spec.Type+": an event of another instance or session ignored", "provider", c.spec.ID, "of", ev.Owner)
		w.WriteHeader(http.StatusOK)
		return
	}
	c.Answer(w, r, ev.Messages...)
}

// Path is an API path of escaped segments: Path("message", "sendText",
// instance) is "/message/sendText/<instance>".
func Path(segments ...string) string {
	var b strings.Builder
	for _, s := range segments {
		b.WriteByte('/')
		b.WriteString(url.PathEscape(s))
	}
	return b.String()
}

// Errorf is an error of this channel: "<type> <id>: …".
func (c *Channel) Errorf(format string, args ...any) error {
	return fmt.Errorf("%s %s: %w", c.spec.Type, c.spec.ID, fmt.Errorf(format, args...))
}

// Call sends in (nil: no body) as JSON to the API path with the channel's
// credential and decodes a 2xx answer into out; other answers go through
// Spec.MapError.
func (c *Channel) Call(ctx context.Context, method, path string, in, out any) error {
	req, err := c.request(ctx, method, path, in)
	if err != nil {
		return c.Errorf("%w", err)
	}
	if err := httpkit.CallJSON(c.Client, req, out, c.spec.MapError); err != nil {
		return c.Errorf("%w", err)
	}
	return nil
}

func (c *Channel) request(ctx context.Context, method, path string, in any) (*http.Request, error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.API.String()+path, body)
	if err != nil {
		return nil, err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	c.spec.Auth(req.Header)
	return req, nil
}

// Timestamp is a message's time in seconds since the epoch, as the gateways
// write it: a number, a string, or protobuf.js's Long ({"low","high"}).
// What is none of those is 0.
type Timestamp int64

// UnmarshalJSON implements json.Unmarshaler; it never fails.
func (t *Timestamp) UnmarshalJSON(b []byte) error {
	*t = 0
	var long struct {
		Low  uint32 `json:"low"`
		High int32  `json:"high"`
	}
	var n json.Number
	switch {
	case json.Unmarshal(b, &n) == nil:
	case json.Unmarshal(b, &long) == nil:
		n = json.Number(fmt.Sprint(int64(long.High)<<32 | int64(long.Low)))
	default:
		return nil
	}
	if v, err := n.Int64(); err == nil && v > 0 && v < 1<<40 {
		*t = Timestamp(v)
	}
	return nil
}

// Time is t as a time, zero when unknown.
func (t Timestamp) Time() time.Time {
	if t <= 0 {
		return time.Time{}
	}
	return time.Unix(int64(t), 0)
}

// Conversational reports whether botrun answers a chat: a person or a group,
// not a status broadcast or a channel (newsletter).
func Conversational(jid string) bool {
	return jid != "" && !strings.HasSuffix(jid, "@broadcast") && !strings.HasSuffix(jid, "@newsletter")
}
