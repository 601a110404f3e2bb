// Package whatsappweb is the WhatsApp Web channel (type "whatsapp-web"): a
// linked device of a WhatsApp account on the multi-device protocol, through
// go.mau.fi/whatsmeow. botrun writes no protocol code of its own.
//
// The device's keys live in whatsmeow's tables (whatsmeow_*) in the bot's
// own SQLite file or PostgreSQL database, or where store names. The device
// is linked once with `botrun whatsapp pair` (a QR code, or a pairing code
// for pair_phone); an unpaired session is logged with that command and the
// bot runs its other channels. One process at a time holds a session: the
// type is channel.Type.LeaderOnly, so the host runs the session
// (channel.SessionRunner) only on the replica it elected leader, under a
// lease with a fencing token, and another replica takes it over when the
// leader stops. The fence is checked right before each message is journaled
// and each send; whatsmeow's own writes to the device store (keys, sessions,
// contacts) are not fenced by it, so for them the lease is advisory.
//
// Inbound messages are journaled inside whatsmeow's event handler, which
// acknowledges a message to WhatsApp only after the handler returned
// (SynchronousAck): one the journal refused is not acknowledged, and
// WhatsApp delivers it again. Texts, media (image, audio, video, document,
// sticker), replies and button or list responses (as interactions) are
// admitted; the bot's own messages, status broadcasts, newsletters, edits
// and (unless groups) group messages are acknowledged and ignored. Media are
// journaled as their download fields and message key, never their bytes; a
// download the CDN refuses (expired) asks the sender's phone to upload it
// again (whatsmeow's media retry).
//
// Everything that touches the network goes through Client, a small interface
// that *whatsmeow.Client implements and whatsappwebtest fakes.
package whatsappweb

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"go.mau.fi/whatsmeow/types"

	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/channel/httpkit"
	"github.com/botrun/botrun/host/channel/whatsappweb/internal/devstore"
	"github.com/botrun/botrun/host/channel/whatsappweb/internal/wamsg"
)

// Type is the channel's type name in bot.toml.
const Type = "whatsapp-web"

// TextLimit is the longest text WhatsApp delivers in one message.
const TextLimit = 65536

// Alert names the channel raises (Env.Alert).
const (
	// AlertLoggedOut: the device was unlinked (from the phone, or by
	// WhatsApp): pair again.
	AlertLoggedOut = "channel:logged_out"
	// AlertReplaced: another connection took the session over.
	AlertReplaced = "channel:session_replaced"
	// AlertBanned: WhatsApp banned the account for a while, or refuses this
	// client's version.
	AlertBanned = "channel:banned"
)

func init() {
	channel.Register(channel.Type{Name: Type, Config: func() channel.Config { return &Config{} }, LeaderOnly: true})
}

// Config is a [[channels]] entry of type "whatsapp-web".
type Config struct {
	// ID is the entry's id.
	ID string `toml:"id"`
	// Store is where the device keys live: empty for the bot's own
	// backend (SQLite or PostgreSQL, in whatsmeow's own tables), a
	// PostgreSQL URL, or a SQLite file's path (relative to the config file).
	Store string `toml:"store"`
	// Session is the entry's session mode, which the host reads ("leader",
	// the default; "every" is refused). The channel only refuses here a
	// device store's location, which this key named before store did.
	Session string `toml:"session"`
	// PairPhone is the account's phone number in international format: the
	// pairing command then shows a code to type on the phone instead of a
	// QR code.
	PairPhone string `toml:"pair_phone"`
	// Groups admits messages of groups too.
	Groups bool `toml:"groups"`
	// DurableViewOnce admits view-once media with their references, which
	// are journaled (by default they are admitted without one: nothing
	// carrying their media key is written down, and the bot cannot load
	// them).
	DurableViewOnce bool `toml:"durable_view_once"`

	// NewClient builds the network client (default NewWhatsmeow; tests
	// pass a fake).
	NewClient NewClientFunc `toml:"-"`
	// UnpairedPoll is how often an unpaired session is looked at again, so
	// a device paired meanwhile connects without a restart (default 30 s).
	UnpairedPoll time.Duration `toml:"-"`
	// MediaRetryWait is how long a download waits for the sender's phone to
	// upload expired media again (default 60 s).
	MediaRetryWait time.Duration `toml:"-"`
	// RedeliverAfter is how long after a message the journal refused the
	// session reconnects, so WhatsApp delivers it again (default 5 s).
	RedeliverAfter time.Duration `toml:"-"`
	// HTTPClient fetches outbound media given by URL (default: a client
	// that refuses internal addresses).
	HTTPClient *http.Client `toml:"-"`
}

// Check implements channel.Config.
func (c *Config) Check(in channel.Setting, problem channel.Problem) {
	switch s := c.Session; s {
	case "", "leader", "every":
		// The host's session modes (config.SessionLeader and
		// SessionEvery: this package cannot import the host's config):
		// it refuses "every" for this type.
	default:
		if strings.Contains(s, "://") {
			s = redactURL(s)
		}
		problem("session", "%q: the device keys' location is the key store now (session says which replicas run the channel, %q by default): write store = %q", s, "leader", s)
	}
	switch s := c.Store; {
	case s == "":
	case devstore.IsPostgresURL(s):
	case strings.Contains(s, "://"):
		problem("store", "%q: want a SQLite file path or a postgres:// URL (empty: the bot's own backend)", redactURL(s))
	case strings.ContainsAny(s, "?#"):
		problem("store", "the SQLite path %q may not contain '?' or '#'", s)
	case !filepath.IsAbs(s) && in.Dir != "":
		c.Store = filepath.Join(in.Dir, s)
	}
	if c.PairPhone != "" {
		if _, err := wamsg.PhoneDigits(c.PairPhone); err != nil {
			problem("pair_phone", "%v", err)
		}
	}
}

// Open implements channel.Config.
func (c *Config) Open(env channel.Env) (channel.Channel, error) {
	return httpkit.Opened(Open(*c, env))
}

// redactURL names a URL by its scheme alone: it may hold a password.
func redactURL(s string) string {
	scheme, _, _ := strings.Cut(s, "://")
	return scheme + "://…"
}

// Provider is one linked device of a WhatsApp account.
type Provider struct {
	cfg   Config
	env   channel.Env
	admit channel.Admitter
	log   *slog.Logger
	// scope makes the message ids derived from send keys differ between
	// bots sharing an account.
	scope string
	http  *http.Client

	mu sync.Mutex
	// fence is the hold on the session RunSession was given (nil before).
	fence channel.Fence
	cli   Client // the connected session's client, nil between sessions
	// onWhatsApp caches recipients checked with IsOnWhatsApp (and chats
	// seen inbound): chat → the JID to send to.
	onWhatsApp map[string]types.JID
	// unread are the admitted messages of each chat not yet marked read:
	// marked after the bot's next send there (or its typing).
	unread map[string][]unreadMessage
	// available is set once the device told WhatsApp it is online (for
	// the typing indicator).
	available bool
	// retries wait for the answers to media retry requests, by message id.
	retries map[types.MessageID]chan mediaRetryAnswer
	// rehosted are the new direct paths media retries gave, by message id.
	rehosted map[types.MessageID]string
}

type unreadMessage struct {
	id     types.MessageID
	sender types.JID
}

// Open returns the channel cfg describes. It connects nothing: RunSession
// does.
func Open(cfg Config, env channel.Env) (*Provider, error) {
	if cfg.ID == "" {
		cfg.ID = env.ID
	}
	if cfg.Store == "" {
		if _, ok := env.Kv.(durability.SQLDatabase); !ok {
			return nil, fmt.Errorf("whatsapp-web %s: store: this durability backend keeps no SQL tables for the device keys: use the sqlite or postgres backend, or set store to a SQLite file path or a postgres:// URL", cfg.ID)
		}
	}
	if cfg.NewClient == nil {
		cfg.NewClient = NewWhatsmeow
	}
	if cfg.UnpairedPoll <= 0 {
		cfg.UnpairedPoll = 30 * time.Second
	}
	if cfg.RedeliverAfter <= 0 {
		cfg.RedeliverAfter = 5 * time.Second
	}
	if cfg.MediaRetryWait <= 0 {
		cfg.MediaRetryWait = 60 * time.Second
	}
	p := &Provider{cfg: cfg, env: env, admit: env.Admitter, log: env.Log(), scope: env.KeyPrefix, http: cfg.HTTPClient,
		onWhatsApp: map[string]types.JID{}, unread: map[string][]unreadMessage{},
		retries: map[types.MessageID]chan mediaRetryAnswer{}, rehosted: map[types.MessageID]string{}}
	if p.http == nil {
		p.http = mediaFetcher()
	}
	return p, nil
}

// mediaFetcher is the default client for outbound media URLs: it refuses
// internal addresses, and uses no proxy (HTTP_PROXY and the like are
// ignored), because through a proxy the proxy would dial the address and
// the guard, which checks the addresses this client dials, would not apply.
func mediaFetcher() *http.Client {
	c := httpkit.NewClient(60*time.Second, nil, func(*url.URL) bool { return true })
	c.Transport.(*http.Transport).Proxy = nil
	return c
}

// key is one of the channel's keys in the Kv.
func (p *Provider) key(name string) string {
	return p.env.KeyPrefix + Type + "/" + p.cfg.ID + "/" + name
}

// ID implements channel.Provider.
func (p *Provider) ID() string { return p.cfg.ID }

// TextLimits implements channel.Limiter.
func (p *Provider) TextLimits(channel.Outbound) (chars, bytes int) { return TextLimit, 0 }

// Connected reports whether a session of this process is connected and
// logged in.
func (p *Provider) Connected() bool {
	c := p.client()
	return c != nil && c.IsLoggedIn()
}

// client returns the connected session's client, or nil.
func (p *Provider) client() Client {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cli
}

func (p *Provider) setClient(c Client) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cli = c
	p.available = false
}

// errNotConnected is a send or download while no session is connected: not
// paired yet, another process holds the session, or reconnecting. Retried.
func (p *Provider) errNotConnected() error {
	return fmt.Errorf("whatsapp-web %s: not connected (not paired, the session held by another process, or reconnecting)", p.cfg.ID)
}

// errHeldElsewhere is wrapped by a send refused because this process no
// longer holds the session (another may hold it now). Retried.
var errHeldElsewhere = errors.New("the session is held elsewhere (this process no longer holds its lease)")

// fenceHeld reports whether this process holds the session now, and the
// hold's fencing token.
func (p *Provider) fenceHeld() (bool, int64) {
	p.mu.Lock()
	f := p.fence
	p.mu.Unlock()
	if f == nil {
		return false, 0
	}
	return f.Held()
}

// leaseHeld checks, right before a message is journaled or sent, that this
// process still holds the session (by its own clock): a process that lost
// it (frozen past its lease, then thawed) neither admits nor sends while
// its session winds down. whatsmeow's own writes to the device store are
// not fenced by it.
func (p *Provider) leaseHeld() error {
	if ok, _ := p.fenceHeld(); !ok {
		return fmt.Errorf("whatsapp-web %s: %w", p.cfg.ID, errHeldElsewhere)
	}
	return nil
}

// pairCommand is the command that links the device. The provider knows the
// config file's directory (Setting.Dir), not its name: the command names
// a placeholder for it.
func (p *Provider) pairCommand() string {
	return "botrun whatsapp pair -c <your bot.toml> --provider " + p.cfg.ID
}

// notPairedLine is the log line of an unpaired session.
func (p *Provider) notPairedLine() string {
	return fmt.Sprintf("whatsapp-web %s: not paired: run %s", p.cfg.ID, p.pairCommand())
}

// String names the provider in logs.
func (p *Provider) String() string { return Type + " " + p.cfg.ID }

var _ interface {
	channel.Channel
	channel.SessionRunner
	channel.Limiter
	channel.MediaRefCodec
	channel.MediaLoader
	channel.Editor
	channel.Typist
} = (*Provider)(nil)

// sleep waits d or until ctx ends; it reports whether ctx is still live.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
