// Package twilio is the Twilio Messages API channel (type "twilio", SMS and
// WhatsApp): form-encoded webhooks verified by X-Twilio-Signature over the
// configured public URL and the sorted parameters; sends through
// POST {api_url}/2010-04-01/Accounts/{AccountSid}/Messages.json with the
// Twilio error codes mapped onto the provider taxonomy; 1600-character bodies;
// media URLs as durable references, accepted only over https on a twilio.com
// host or on the configured API's own origin.
package twilio

import (
	"context"
	"crypto/hmac"
	"crypto/sha1"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/channel/httpkit"
)

// DefaultAPI is Twilio's REST API; api_url replaces it (tests).
const DefaultAPI = "https://api.twilio.com"

// MaxBody is the largest webhook body accepted.
const MaxBody = 256 << 10

// TextLimit is the longest message Body (error 21617 beyond).
const TextLimit = 1600

// SignatureHeader carries the webhook signature.
const SignatureHeader = "X-Twilio-Signature"

func init() {
	channel.Register(channel.Type{Name: "twilio", Config: func() channel.Config { return &Config{} }})
}

// Config is a [[channels]] entry of type "twilio": SMS or WhatsApp through
// Twilio.
type Config struct {
	// ID is the entry's id.
	ID string `toml:"id"`
	// AccountSID is the account (AC…).
	AccountSID string `toml:"account_sid"`
	// AuthToken signs webhooks and authenticates sends (use ${ENV}).
	AuthToken string `toml:"auth_token"`
	// From is the sender: +E164, whatsapp:+E164, or a Messaging Service SID
	// (MG…).
	From string `toml:"from"`
	// PublicURL is the webhook URL exactly as configured in Twilio's
	// console: the URL Twilio signs.
	PublicURL string `toml:"public_url"`
	// APIURL is the REST API base URL (default https://api.twilio.com).
	APIURL string `toml:"api_url"`
}

var accountSID = regexp.MustCompile(`^AC[0-9a-fA-F]{32}$`)

// Check implements channel.Config.
func (c *Config) Check(_ channel.Setting, problem channel.Problem) {
	if !accountSID.MatchString(c.AccountSID) {
		problem("account_sid", "%q: want the account SID from Twilio's console (AC and 32 hex digits)", c.AccountSID)
	}
	httpkit.Required(problem, "auth_token", c.AuthToken, "the account's auth token, which signs every webhook (use ${ENV})")
	httpkit.Required(problem, "from", c.From, "the sender: +E164, whatsapp:+E164 or a Messaging Service SID (MG…)")
	httpkit.CheckHTTPURL(problem, "public_url", c.PublicURL, "want the webhook URL exactly as entered in Twilio's console (Twilio signs it)")
	httpkit.CheckAPIURL(c.APIURL, problem)
}

// Open implements channel.Config.
func (c *Config) Open(env channel.Env) (channel.Channel, error) {
	return httpkit.Opened(Open(*c, env))
}

// Provider is one Twilio sender.
type Provider struct {
	httpkit.Base
	cfg     Config
	choices *choices
}

// Open returns the channel cfg describes.
func Open(cfg Config, env channel.Env) (*Provider, error) {
	p := &Provider{}
	if err := p.Open("twilio", cfg.ID, env, cfg.APIURL, DefaultAPI); err != nil {
		return nil, err
	}
	cfg.ID, cfg.APIURL = p.ID(), p.API.String()
	p.cfg = cfg
	p.choices = &choices{kv: env.Kv, prefix: env.KeyPrefix + "twilio/" + cfg.ID + "/choices/"}
	// Media URLs redirect to Twilio's storage: mms.twiliocdn.com, or
	// s3-external-1.amazonaws.com for media without HTTP auth. The Basic
	// credentials never follow to another host.
	p.Dial(60*time.Second, func(u *url.URL) bool {
		return httpkit.CredentialsAllowed(u, p.API, "twilio.com", "twiliocdn.com", "s3-external-1.amazonaws.com")
	})
	return p, nil
}

// TextLimits implements channel.Limiter: the numbered lines of a message's
// choices go in the same Body, so its text keeps the room they leave.
func (p *Provider) TextLimits(msg channel.Outbound) (chars, bytes int) {
	if len(msg.Buttons) == 0 && msg.List == nil {
		return TextLimit, 0
	}
	lines, _ := withChoices(msg)
	return min(max(TextLimit-utf8.RuneCountInString(lines)-1, 1), TextLimit), 0
}

// Sign returns the X-Twilio-Signature of a POST to fullURL with params:
// base64(HMAC-SHA1(authToken, fullURL + each key and value, keys sorted)).
func Sign(authToken, fullURL string, params url.Values) string {
	keys := make([]string, 0, len(params))
	for k := range params {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString(fullURL)
	for _, k := range keys {
		vs := append([]string(nil), params[k]...)
		sort.Strings(vs)
		for _, v := range vs {
			b.WriteString(k)
			b.WriteString(v)
		}
	}
	m := hmac.New(sha1.New, []byte(authToken))
	m.Write([]byte(b.String()))
	return base64.StdEncoding.EncodeToString(m.Sum(nil))
}

// ErrBadWebhook is wrapped by every DecodeWebhook error.
var ErrBadWebhook = errors.New("bad webhook")

// DecodeWebhook parses a form-encoded webhook body from untrusted bytes.
func DecodeWebhook(body []byte) (url.Values, error) {
	v, err := url.ParseQuery(string(body))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadWebhook, err)
	}
	return v, nil
}

// Inbound turns webhook parameters into a message; ok is false for status
// callbacks and messages without a MessageSid.
func Inbound(v url.Values) (channel.Message, bool, error) {
	if v.Get("MessageStatus") != "" || (v.Get("SmsStatus") != "" && v.Get("SmsStatus") != "received") {
		return channel.Message{}, false, nil
	}
	sid := v.Get("MessageSid")
	if sid == "" {
		sid = v.Get("SmsMessageSid")
	}
	if sid == "" || v.Get("From") == "" {
		return channel.Message{}, false, fmt.Errorf("%w: no MessageSid or From", ErrBadWebhook)
	}
	msg := channel.Message{ID: sid, Chat: v.Get("From"), From: v.Get("From"), Text: v.Get("Body")}
	n, _ := strconv.Atoi(v.Get("NumMedia"))
	if n < 0 || n > 10 {
		return channel.Message{}, false, fmt.Errorf("%w: NumMedia %d", ErrBadWebhook, n)
	}
	for i := 0; i < n; i++ {
		u := v.Get("MediaUrl" + strconv.Itoa(i))
		if u == "" {
			continue
		}
		mime := v.Get("MediaContentType" + strconv.Itoa(i))
		msg.Media = append(msg.Media, channel.Media{Type: mediaType(mime), Ref: u, MIME: mime})
	}
	return msg, msg.Text != "" || len(msg.Media) > 0, nil
}

func mediaType(mime string) string {
	switch {
	case strings.HasPrefix(mime, "image/"):
		return "image"
	case strings.HasPrefix(mime, "audio/"):
		return "audio"
	case strings.HasPrefix(mime, "video/"):
		return "video"
	}
	return "document"
}

// Routes implements channel.Router: the webhook.
func (p *Provider) Routes(mux *http.ServeMux) {
	mux.HandleFunc("POST /webhooks/"+p.cfg.ID, p.webhook)
}

// signedURL is the URL Twilio signed: public_url, with the request's query
// when public_url has none.
func (p *Provider) signedURL(r *http.Request) string {
	if r.URL.RawQuery != "" && !strings.Contains(p.cfg.PublicURL, "?") {
		return p.cfg.PublicURL + "?" + r.URL.RawQuery
	}
	return p.cfg.PublicURL
}

func (p *Provider) webhook(w http.ResponseWriter, r *http.Request) {
	body, ok := httpkit.ReadWebhook(w, r, MaxBody)
	if !ok {
		return
	}
	params, err := DecodeWebhook(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	sig := r.Header.Get(SignatureHeader)
	if sig == "" {
		http.Error(w, "missing "+SignatureHeader, http.StatusUnauthorized)
		return
	}
	if p.cfg.AuthToken == "" || !hmac.Equal([]byte(sig), []byte(Sign(p.cfg.AuthToken, p.signedURL(r), params))) {
		http.Error(w, "bad "+SignatureHeader+" (is public_url exactly the URL in Twilio's console?)", http.StatusForbidden)
		return
	}
	if sid := params.Get("AccountSid"); sid != "" && sid != p.cfg.AccountSID {
		http.Error(w, "AccountSid is not this channel's account_sid", http.StatusForbidden)
		return
	}
	msg, ok, err := Inbound(params)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if ok {
		if err := p.pressOf(r.Context(), &msg); err != nil {
			httpkit.NotAdmitted(w.Header(), err)
			http.Error(w, "not admitted: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		if _, err := p.Admitter.Admit(r.Context(), p.cfg.ID, msg); err != nil && !errors.Is(err, channel.ErrInvalidMessage) {
			httpkit.NotAdmitted(w.Header(), err)
			http.Error(w, "not admitted: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
	}
	w.Header().Set("Content-Type", "text/xml")
	io.WriteString(w, "<Response/>")
}

// apiError is Twilio's error body.
type apiError struct {
	Code     int    `json:"code"`
	Message  string `json:"message"`
	MoreInfo string `json:"more_info"`
	Status   int    `json:"status"`
}

// mapError maps a Twilio error answer onto the taxonomy; Send names the
// channel.
func mapError(status int, header http.Header, body []byte) error {
	var e apiError
	json.Unmarshal(body, &e)
	cause := fmt.Errorf("HTTP %d: code %d: %s", status, e.Code, e.Message)
	switch {
	case status == http.StatusTooManyRequests || e.Code == 20429:
		return httpkit.RateLimited(header, time.Second, cause)
	case e.Code == 21211, e.Code == 21614, e.Code == 21610:
		return fmt.Errorf("%w: %w", channel.ErrRecipientUnreachable, cause)
	case e.Code == 21617:
		return fmt.Errorf("%w: %w", channel.ErrPayloadTooLarge, cause)
	case e.Code == 63016:
		return fmt.Errorf("%w: %w", channel.ErrOutsideSessionWindow, cause)
	case status == http.StatusUnauthorized, status == http.StatusForbidden, status == http.StatusNotFound:
		return &channel.PermanentError{Err: cause}
	case status == http.StatusBadRequest:
		return fmt.Errorf("%w: %w", channel.ErrUnsupportedContent, cause)
	}
	return cause
}

// Send implements channel.Provider.
func (p *Provider) Send(ctx context.Context, msg channel.Outbound) (string, error) {
	form := url.Values{"To": {msg.Chat}}
	if strings.HasPrefix(p.cfg.From, "MG") {
		form.Set("MessagingServiceSid", p.cfg.From)
	} else {
		form.Set("From", p.cfg.From)
	}
	body, cs := withChoices(msg)
	if body != msg.Text && utf8.RuneCountInString(body) > TextLimit {
		return "", fmt.Errorf("%w: the text with its %d numbered choices is %d characters, over Twilio's %d", channel.ErrUnsupportedContent, len(cs), utf8.RuneCountInString(body), TextLimit)
	}
	// Remembered before the send, as a reply can come at once; a send
	// without choices forgets the chat's earlier ones, so a number answers
	// the latest message only.
	if err := p.choices.set(ctx, msg.Chat, cs); err != nil {
		return "", fmt.Errorf("twilio %s: remembering the choices: %w", p.cfg.ID, err)
	}
	if body != "" {
		form.Set("Body", body)
	}
	if m := msg.Media; m != nil {
		u := m.URL
		if u == "" {
			u = m.Ref
		}
		if pu, err := url.Parse(u); err != nil || (pu.Scheme != "https" && pu.Scheme != "http") {
			return "", fmt.Errorf("%w: twilio sends media by public URL; %q is not one", channel.ErrUnsupportedContent, u)
		}
		form.Set("MediaUrl", u)
		if msg.Text == "" && m.Caption != "" {
			form.Set("Body", m.Caption)
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost,
		p.cfg.APIURL+"/2010-04-01/Accounts/"+url.PathEscape(p.cfg.AccountSID)+"/Messages.json", strings.NewReader(form.Encode()))
	if err != nil {
		return "", fmt.Errorf("twilio %s: %w", p.cfg.ID, err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth(p.cfg.AccountSID, p.cfg.AuthToken)
	var out struct {
		SID string `json:"sid"`
	}
	if err := httpkit.CallJSON(p.Client, req, &out, mapError); err != nil {
		return "", fmt.Errorf("twilio %s: %w", p.cfg.ID, err)
	}
	if out.SID == "" {
		return "", fmt.Errorf("twilio %s: the answer has no message sid", p.cfg.ID)
	}
	return out.SID, nil
}

// mediaAllowed reports whether u may be journaled and fetched with the
// account's credentials: https on a twilio.com host, or the configured API's
// own origin.
func (p *Provider) mediaAllowed(raw string) bool {
	u, err := url.Parse(raw)
	return err == nil && len(raw) <= 2048 && httpkit.CredentialsAllowed(u, p.API, "twilio.com")
}

// SerializeMediaRef implements channel.MediaRefCodec: the media URL (no
// credentials: they are added at download), when it is on an allowed host.
func (p *Provider) SerializeMediaRef(m channel.Media) (channel.StoredRef, bool) {
	if !p.mediaAllowed(m.Ref) {
		return channel.StoredRef{}, false
	}
	return httpkit.StoreURL(m.Ref), true
}

// RehydrateMediaRef implements channel.MediaRefCodec: the URL is checked
// against the allowed hosts again.
func (p *Provider) RehydrateMediaRef(s channel.StoredRef) (channel.Media, error) {
	u, err := httpkit.StoredURL(s, p.mediaAllowed)
	if err != nil {
		return channel.Media{}, fmt.Errorf("twilio: %w", err)
	}
	return channel.Media{Ref: u}, nil
}

// LoadMedia implements channel.MediaLoader: GET the media URL with HTTP
// Basic, following the redirect (the credentials are not sent to another
// host).
func (p *Provider) LoadMedia(ctx context.Context, m channel.Media, max int64) ([]byte, error) {
	if !p.mediaAllowed(m.Ref) {
		return nil, fmt.Errorf("%w: twilio %s: media URL is not https on a twilio.com host or on api_url", channel.ErrMediaUnavailable, p.cfg.ID)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, m.Ref, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: twilio %s: %v", channel.ErrMediaUnavailable, p.cfg.ID, err)
	}
	req.SetBasicAuth(p.cfg.AccountSID, p.cfg.AuthToken)
	return httpkit.Download(p.Client, req, max, func(err error) string { return err.Error() })
}
