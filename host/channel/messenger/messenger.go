// Package messenger is the Facebook Messenger channel (type "messenger"): one
// Facebook Page on the Messenger Platform. Webhooks are verified by the
// hub.challenge handshake and the X-Hub-Signature-256 HMAC of the raw body
// (package graph); sends go to POST {api_url}/me/messages with the page
// token as a Bearer header and messaging_type RESPONSE; texts hold 2,000
// characters; attachment URLs on fbcdn.net and fbsbx.com (media_ref_hosts)
// are the durable media references.
//
// What the channel does with messages, buttons, interactions, typing and
// media is the Messenger Platform's, shared with Instagram: see package
// host/channel/graph/messaging. In short: up to 3 buttons go as a button
// template (reply buttons as postback buttons, URL buttons as web_url
// buttons, a text of at most 640 characters), more reply buttons (up to 13)
// and lists (up to 13 rows) as quick replies; postback and quick-reply
// presses arrive as interactions; typing is mark_seen then typing_on;
// Messenger has no edit.
package messenger

import (
	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/channel/graph"
	"github.com/botrun/botrun/host/channel/graph/messaging"
	"github.com/botrun/botrun/host/channel/httpkit"
)

// DefaultAPI is the Graph API with the version botrun speaks; api_url
// replaces it (tests, a newer version).
const DefaultAPI = "https://graph.facebook.com/v21.0"

// TextLimit is Messenger's longest text message, in characters.
const TextLimit = 2000

// SignatureHeader carries the HMAC-SHA256 of the raw body.
const SignatureHeader = graph.SignatureHeader

// MaxBody is the largest webhook body accepted.
const MaxBody = messaging.MaxBody

// MediaHosts are the hosts whose attachment URLs are journaled and
// downloaded, unless media_ref_hosts replaces them.
var MediaHosts = []string{"fbcdn.net", "fbsbx.com"}

func init() {
	channel.Register(channel.Type{Name: "messenger", Config: func() channel.Config { return &Config{} }})
}

// Config is a [[channels]] entry of type "messenger": the keys shared with
// Instagram (id, app_secret, verify_token, api_url, default
// https://graph.facebook.com/v21.0, media_ref_hosts) and Messenger's own.
type Config struct {
	messaging.Config
	// PageToken is the Page access token (use ${ENV}).
	PageToken string `toml:"page_token"`
	// PageID is the Page's id: webhooks of other pages are ignored.
	PageID string `toml:"page_id"`
}

// Check implements channel.Config.
func (c *Config) Check(_ channel.Setting, problem channel.Problem) {
	httpkit.Required(problem, "page_token", c.PageToken, "the Page access token from Messenger > Messenger API Settings (use ${ENV} to keep it out of the file)")
	c.Config.Check(problem, "the Meta app's secret (App settings > Basic), which signs every webhook (use ${ENV})", func() {
		httpkit.Required(problem, "page_id", c.PageID, "the Facebook Page's id (GET /me with the page token answers it)")
	})
}

// Open implements channel.Config.
func (c *Config) Open(env channel.Env) (channel.Channel, error) {
	return httpkit.Opened(Open(*c, env))
}

// Provider is one Facebook Page on Messenger.
type Provider struct {
	*messaging.Channel
}

// Open returns the channel cfg describes.
func Open(cfg Config, env channel.Env) (*Provider, error) {
	ch, err := messaging.New(messaging.Spec{
		Type: "messenger", ID: cfg.ID, Object: "page", Owner: cfg.PageID,
		AppSecret: cfg.AppSecret, VerifyToken: cfg.VerifyToken, Token: cfg.PageToken,
		APIURL: cfg.APIURL, DefaultAPI: DefaultAPI, SendPath: "/me/messages",
		MediaHosts: cfg.MediaRefHosts, DefaultMediaHosts: MediaHosts, TextChars: TextLimit,
	}, env)
	if err != nil {
		return nil, err
	}
	return &Provider{ch}, nil
}

// Sign returns the X-Hub-Signature-256 value of body: "sha256=<hex>".
func Sign(appSecret string, body []byte) string { return graph.Sign(appSecret, body) }
