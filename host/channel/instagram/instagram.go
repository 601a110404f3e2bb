// Package instagram is the Instagram channel (type "instagram"): one
// Instagram professional account on the Instagram API with Instagram Login.
// Webhooks are verified as Messenger's (the hub.challenge handshake and the
// X-Hub-Signature-256 HMAC of the raw body, package graph); sends go to
// POST {api_url}/{account_id}/messages with the token as a Bearer header;
// a text holds 1,000 bytes of UTF-8 (the host splits longer ones on
// character boundaries); attachment URLs on cdninstagram.com, fbcdn.net and
// fbsbx.com (media_ref_hosts) are the durable media references.
//
// What the channel does with messages, buttons, interactions, typing and
// media is the Messenger Platform's, shared with Messenger: see package
// host/channel/graph/messaging. Instagram shows button templates and quick
// replies in its mobile apps only (not on the web or desktop); it has no
// edit.
package instagram

import (
	"net/url"
	"strings"

	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/channel/graph"
	"github.com/botrun/botrun/host/channel/graph/messaging"
	"github.com/botrun/botrun/host/channel/httpkit"
)

// DefaultAPI is the Instagram Graph API with the version botrun speaks;
// api_url replaces it (tests, a newer version).
const DefaultAPI = "https://graph.instagram.com/v21.0"

// TextByteLimit is Instagram's longest text message, in bytes of UTF-8.
const TextByteLimit = 1000

// SignatureHeader carries the HMAC-SHA256 of the raw body.
const SignatureHeader = graph.SignatureHeader

// MaxBody is the largest webhook body accepted.
const MaxBody = messaging.MaxBody

// MediaHosts are the hosts whose attachment URLs are journaled and
// downloaded, unless media_ref_hosts replaces them.
var MediaHosts = []string{"cdninstagram.com", "fbcdn.net", "fbsbx.com"}

func init() {
	channel.Register(channel.Type{Name: "instagram", Config: func() channel.Config { return &Config{} }})
}

// Config is a [[channels]] entry of type "instagram": the keys shared with
// Messenger (id, app_secret, verify_token, api_url, default
// https://graph.instagram.com/v21.0, media_ref_hosts) and Instagram's own.
type Config struct {
	messaging.Config
	// Token is the Instagram user access token (use ${ENV}).
	Token string `toml:"token"`
	// AccountID is the professional account's id (IG_ID): the path of the
	// Send API, and the entry id of the webhooks this channel handles.
	AccountID string `toml:"account_id"`
}

// Check implements channel.Config.
func (c *Config) Check(_ channel.Setting, problem channel.Problem) {
	httpkit.Required(problem, "token", c.Token, "the Instagram user access token from the Meta app's Instagram > API setup with Instagram login (use ${ENV} to keep it out of the file)")
	c.Config.Check(problem, "the Instagram app secret (Instagram > API setup with Instagram login > Business login settings), which signs every webhook (use ${ENV})", func() {
		httpkit.Required(problem, "account_id", c.AccountID, "the professional account's id: user_id from GET /me?fields=user_id with the token")
		if c.AccountID != "" && strings.Trim(c.AccountID, "0123456789") != "" {
			problem("account_id", "%q is not an account id (digits only)", c.AccountID)
		}
	})
}

// Open implements channel.Config.
func (c *Config) Open(env channel.Env) (channel.Channel, error) {
	return httpkit.Opened(Open(*c, env))
}

// Provider is one Instagram professional account.
type Provider struct {
	*messaging.Channel
}

// Open returns the channel cfg describes.
func Open(cfg Config, env channel.Env) (*Provider, error) {
	ch, err := messaging.New(messaging.Spec{
		Type: "instagram", ID: cfg.ID, Object: "instagram", Owner: cfg.AccountID,
		AppSecret: cfg.AppSecret, VerifyToken: cfg.VerifyToken, Token: cfg.Token,
		APIURL: cfg.APIURL, DefaultAPI: DefaultAPI, SendPath: "/" + url.PathEscape(cfg.AccountID) + "/messages",
		MediaHosts: cfg.MediaRefHosts, DefaultMediaHosts: MediaHosts, TextBytes: TextByteLimit,
	}, env)
	if err != nil {
		return nil, err
	}
	return &Provider{ch}, nil
}

// Sign returns the X-Hub-Signature-256 value of body: "sha256=<hex>".
func Sign(appSecret string, body []byte) string { return graph.Sign(appSecret, body) }
