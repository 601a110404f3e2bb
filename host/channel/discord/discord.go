// Package discord is the Discord channel (type "discord"): a bot that reads
// chat messages over the Gateway (mode "gateway") or answers slash commands
// and component presses posted to its Interactions Endpoint URL (mode
// "interactions"), and sends through the REST API v10.
//
// Gateway. The Gateway is a small client of our own over
// github.com/coder/websocket, not discordgo: discordgo keeps its endpoints in
// package-level variables (one API URL for every provider in the process,
// which tests and several Discord entries cannot share), sends with its own
// HTTP client and rate limiter (neither the address guard of
// httpkit.NewClient nor the provider error taxonomy), and hands events to
// handlers after it has already counted them received, so a resume could
// not replay a message the journal refused. The client here speaks Hello
// (op 10), Identify (op 2) with the GUILD_MESSAGES, DIRECT_MESSAGES and
// MESSAGE_CONTENT intents, heartbeats (op 1, acknowledged by op 11; a missed
// acknowledgement is a dead connection), dispatches (op 0), Reconnect (op
// 7), Invalid Session (op 9) and Resume (op 6). The sequence number it
// resumes from is that of the last dispatch it handled, and a
// MESSAGE_CREATE is handled only once the host admitted (journaled) it: after
// a drop, Discord replays everything from there, and a message the journal
// refused makes the client drop the connection and resume, so it comes back.
// Admission deduplicates on the message id, so a replay is never handled
// twice. Messages from bots (author.bot) and webhooks are ignored.
//
// Interactions. POST /webhooks/<id> is verified with Ed25519
// (X-Signature-Ed25519 over X-Signature-Timestamp + the raw body, with
// public_key, the timestamp within SignatureWindow of now): 401 otherwise. PING is answered {"type":1}. A slash command
// (APPLICATION_COMMAND) or a component press (MESSAGE_COMPONENT) is
// journaled, then answered with a deferred response (type 5 for a command,
// type 6 for a press) within Discord's 3 seconds. A command is a text message
// (its options' values, or "/name" when it has none; an attachment option is
// its media); a press is an interaction. The interaction token, needed for the
// reply, is kept in the backend's Kv for its 15 minutes (see interactions.go):
// a handler's reply to an interaction goes out as its follow-up, and any other
// send as a channel message.
//
// Sends: POST /api/v10/channels/{chat}/messages with "Authorization: Bot",
// 2,000 characters, nonce + enforce_nonce derived from the send's key, 429s
// and the per-route buckets honoured (internal/ratelimit). Buttons and lists are
// message components (internal/wire). Media references are the attachment
// URLs, accepted only on cdn.discordapp.com and media.discordapp.net
// (MediaHosts; media_ref_hosts replaces the list) or the api_url's own
// origin; they expire after about 24 hours (media.go).
package discord

import (
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/channel/discord/internal/ratelimit"
	"github.com/botrun/botrun/host/channel/discord/internal/wire"
	"github.com/botrun/botrun/host/channel/httpkit"
	"github.com/botrun/botrun/host/channel/internal/urlmedia"
)

// DefaultAPI is Discord's API origin; api_url replaces it (tests).
const DefaultAPI = "https://discord.com"

// apiPath is the versioned API every REST call goes to.
const apiPath = "/api/v10"

// MaxBody is the largest interaction webhook body accepted.
const MaxBody = 1 << 20

// TextLimit is Discord's longest message content, in characters.
const TextLimit = wire.TextLimit

// The Gateway intents botrun identifies with.
const (
	IntentGuildMessages  = 1 << 9
	IntentDirectMessages = 1 << 12
	IntentMessageContent = 1 << 15
	// Intents is what botrun asks for: messages in guilds and DMs, with
	// their content (a privileged intent, enabled in the Developer Portal).
	Intents = IntentGuildMessages | IntentDirectMessages | IntentMessageContent
)

// The modes.
const (
	ModeGateway      = "gateway"
	ModeInteractions = "interactions"
)

func init() {
	channel.Register(channel.Type{Name: "discord", Config: func() channel.Config { return &Config{Mode: ModeGateway} }})
}

// Config is a [[channels]] entry of type "discord": one Discord application
// and its bot user.
type Config struct {
	// ID is the entry's id.
	ID string `toml:"id"`
	// APIURL is the API origin (default https://discord.com).
	APIURL string `toml:"api_url"`
	// Token is the bot token (use ${ENV}).
	Token string `toml:"token"`
	// ApplicationID is the application's id (follow-ups are sent as it).
	ApplicationID string `toml:"application_id"`
	// PublicKey is the application's Ed25519 public key, in hex: it
	// verifies the interactions webhook.
	PublicKey string `toml:"public_key"`
	// Mode is gateway (default: messages over the Gateway websocket) or
	// interactions (slash commands and presses posted to /webhooks/<id>).
	Mode string `toml:"mode"`
	// GatewayURL is the Gateway's URL; empty asks GET /api/v10/gateway/bot.
	GatewayURL string `toml:"gateway_url"`
	// MediaRefHosts replaces MediaHosts.
	MediaRefHosts []string `toml:"media_ref_hosts"`
}

// Check implements channel.Config.
func (c *Config) Check(_ channel.Setting, problem channel.Problem) {
	httpkit.Required(problem, "token", c.Token, "the bot token from the Developer Portal (Bot > Reset Token; use ${ENV} to keep it out of the file)")
	httpkit.Required(problem, "application_id", c.ApplicationID, "the application id from the Developer Portal (General Information)")
	if c.ApplicationID != "" && !wire.Snowflake(c.ApplicationID) {
		problem("application_id", "%q is not a Discord id (a number)", c.ApplicationID)
	}
	if c.Mode == "" {
		c.Mode = ModeGateway
	}
	switch c.Mode {
	case ModeGateway:
	case ModeInteractions:
		httpkit.Required(problem, "public_key", c.PublicKey, "interactions mode verifies every request with the application's public key (General Information, 64 hex digits)")
	default:
		problem("mode", "%q: want gateway or interactions", c.Mode)
	}
	if c.PublicKey != "" {
		if _, err := publicKey(c.PublicKey); err != nil {
			problem("public_key", "%v", err)
		}
	}
	if c.GatewayURL != "" {
		if _, err := gatewayURL(c.GatewayURL); err != nil {
			problem("gateway_url", "%v", err)
		}
	}
	httpkit.CheckAPIURL(c.APIURL, problem)
	urlmedia.CheckHosts(problem, "media_ref_hosts", c.MediaRefHosts)
}

// ReplayWindow implements channel.Replayable: with public_key set the
// interactions webhook is served, and a signed timestamp may be
// SignatureWindow either way, so a captured interaction passes for twice
// SignatureWindow. Without it there is no webhook (the Gateway only).
func (c *Config) ReplayWindow() time.Duration {
	if c.PublicKey == "" {
		return 0
	}
	return 2 * SignatureWindow
}

// Open implements channel.Config.
func (c *Config) Open(env channel.Env) (channel.Channel, error) {
	return httpkit.Opened(Open(*c, env))
}

// publicKey decodes a hex Ed25519 public key.
func publicKey(s string) (ed25519.PublicKey, error) {
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("the public key must be %d hex digits (General Information > Public Key)", 2*ed25519.PublicKeySize)
	}
	return ed25519.PublicKey(b), nil
}

// gatewayURL checks a Gateway URL: wss, or plain ws on loopback only (the
// token travels in Identify).
func gatewayURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	switch {
	case err != nil || u.Host == "" || u.User != nil || (u.Scheme != "wss" && u.Scheme != "ws"):
		return nil, fmt.Errorf("%q must be a wss:// URL", raw)
	case u.Scheme == "ws" && !httpkit.LoopbackHost(u.Hostname()):
		return nil, fmt.Errorf("%q is plain ws to another machine: the token would cross the network in clear; use wss (plain ws is allowed on loopback only)", raw)
	}
	return u, nil
}

// Provider is one Discord application.
type Provider struct {
	httpkit.Base
	cfg Config
	// guard recovers a panic on an event (channel.Env.Guard).
	guard  func(what string, f func() error) error
	media  *http.Client // attachments: redirects to Discord's CDN only
	pub    ed25519.PublicKey
	limits *ratelimit.Limiter
	ix     *tokens
	gw     *gateway
	now    func() time.Time
	// mediaHosts are the hosts attachment URLs are accepted from.
	mediaHosts []string
	// kv and kvPrefix keep the Gateway session across restarts (nil kv:
	// a backend without one; a restart identifies anew).
	kv       durability.Kv
	kvPrefix string

	mu       sync.Mutex
	followUp map[string]followUpRef // sent follow-up message id → its interaction
}

// Open returns the channel cfg describes; in gateway mode, Run connects.
func Open(cfg Config, env channel.Env) (*Provider, error) {
	if cfg.Mode == "" {
		cfg.Mode = ModeGateway
	}
	p := &Provider{guard: env.Guard, now: env.Clock(), followUp: map[string]followUpRef{}, mediaHosts: cfg.MediaRefHosts}
	if err := p.Open("discord", cfg.ID, env, cfg.APIURL, DefaultAPI); err != nil {
		return nil, err
	}
	cfg.ID, cfg.APIURL = p.ID(), strings.TrimRight(p.API.String(), "/")
	p.cfg = cfg
	var err error
	if p.mediaHosts == nil {
		p.mediaHosts = MediaHosts
	}
	if cfg.PublicKey != "" {
		if p.pub, err = publicKey(cfg.PublicKey); err != nil {
			return nil, fmt.Errorf("discord %s: public_key: %w", cfg.ID, err)
		}
	}
	if cfg.Mode == ModeInteractions && p.pub == nil {
		return nil, fmt.Errorf("discord %s: interactions mode needs public_key", cfg.ID)
	}
	p.Dial(30*time.Second, nil) // the API: no redirects
	p.media = httpkit.NewClient(60*time.Second, p.API, p.mediaAllowed)
	p.limits = ratelimit.New()
	p.ix = newTokens(env.Kv, env.KeyPrefix+"discord/"+cfg.ID+"/ix/")
	p.kv, p.kvPrefix = env.Kv, env.KeyPrefix
	if cfg.Mode == ModeGateway {
		if p.gw, err = newGateway(p); err != nil {
			return nil, fmt.Errorf("discord %s: %w", cfg.ID, err)
		}
	}
	return p, nil
}

// What the channel implements beyond Send.
var (
	_ channel.Router        = (*Provider)(nil)
	_ channel.Runner        = (*Provider)(nil)
	_ channel.Limiter       = (*Provider)(nil)
	_ channel.MediaRefCodec = (*Provider)(nil)
	_ channel.MediaLoader   = (*Provider)(nil)
	_ channel.Editor        = (*Provider)(nil)
	_ channel.Typist        = (*Provider)(nil)
)

// TextLimits implements channel.Limiter.
func (p *Provider) TextLimits(channel.Outbound) (chars, bytes int) { return TextLimit, 0 }

// Routes implements channel.Router: the interactions webhook, served
// whenever public_key is set (in gateway mode too, for an application whose
// Interactions Endpoint URL points here).
func (p *Provider) Routes(mux *http.ServeMux) {
	if p.pub != nil {
		mux.HandleFunc("POST /webhooks/"+p.cfg.ID, p.webhook)
	}
}

// housekeeping is how often expired interaction tokens are purged.
const housekeeping = time.Minute

// Run implements channel.Runner: the Gateway in gateway mode, and in every
// mode the purge of expired interaction tokens, until ctx ends.
func (p *Provider) Run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Go(func() {
		httpkit.Every(ctx, housekeeping, func() {
			p.guard("purging expired interaction tokens", func() error {
				p.ix.purge(ctx, p.now())
				p.purgeFollowUps(p.now())
				return nil
			})
		})
	})
	if p.gw != nil {
		p.gw.run(ctx)
	}
	wg.Wait()
}

// redact removes the bot token and an interaction token from a transport
// error (a URL that holds the interaction token is in it).
func (p *Provider) redact(err error, tokens ...string) string {
	s := err.Error()
	for _, t := range append(tokens, p.cfg.Token) {
		if t != "" {
			s = strings.ReplaceAll(s, t, "<token>")
		}
	}
	return s
}
