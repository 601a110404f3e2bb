// Package email is the email channel: IMAP in (IDLE, falling back to UID
// SEARCH polling), SMTP submission out, through emersion's go-imap v2,
// go-smtp and go-message.
//
// A message is admitted once under its Message-ID (the inbox deduplicates
// on it), marked \Seen only after Admit returned, and the last journaled UID
// with its UIDVALIDITY is kept in the provider's Kv, so a restart resumes
// after it; a UIDVALIDITY change rescans the mailbox, deduplicated on
// Message-ID. The chat is the From address (Reply-To is no identity); a
// reply joins another chat only through a Message-ID botrun sent there,
// from that chat's recipient (chatOf). Automatic mail is not answered (RFC 3834). What a reply needs
// (the address, the subject, the references) is written to the Kv per chat
// before Admit, so a send after a restart still threads and addresses
// correctly.
package email

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/mail"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/channel/httpkit"
)

// DefaultPoll is how often the mailbox is searched when the server has no
// IDLE.
const DefaultPoll = time.Minute

// MaxMessageBytes caps a fetched message (its whole RFC 822 source).
const MaxMessageBytes = 32 << 20

// MaxAttachmentBytes caps an attachment a reply carries (25 MB, what most
// submission servers take).
const MaxAttachmentBytes = 25 << 20

func init() {
	channel.Register(channel.Type{Name: "email", Config: func() channel.Config {
		return &Config{Mailbox: "INBOX"}
	}})
}

// Config is a [[channels]] entry of type "email".
type Config struct {
	ID string `toml:"id"`
	// IMAPURL is imaps://host:993, or imap://host:143 (STARTTLS required).
	IMAPURL string `toml:"imap_url"`
	// SMTPURL is smtps://host:465, or smtp://host:587 (STARTTLS required).
	SMTPURL string `toml:"smtp_url"`
	// Username and Password log in to both servers.
	Username string `toml:"username"`
	Password string `toml:"password"`
	// From is the bot's address, the envelope and header sender.
	From string `toml:"from"`
	// Mailbox is the mailbox read (default INBOX).
	Mailbox string `toml:"mailbox"`
	// Poll is how often the mailbox is searched when the server has no
	// IDLE, and with IDLE the longest one IDLE lasts, so a notification the
	// server missed waits one poll at most (a Go duration, default 1m).
	Poll string `toml:"poll"`
	// TLSInsecure skips certificate verification: tests only, refused
	// unless both hosts are loopback.
	TLSInsecure bool `toml:"tls_insecure"`

	// IdleRefresh is how long one IDLE lasts before it is renewed (tests
	// shorten it; default 20 minutes, under the 29 RFC 2177 allows).
	IdleRefresh time.Duration `toml:"-"`
	// Timeout bounds one network exchange (default 60s).
	Timeout time.Duration `toml:"-"`
}

// Check implements channel.Config.
func (c *Config) Check(in channel.Setting, problem channel.Problem) {
	httpkit.Required(problem, "imap_url", c.IMAPURL, "imaps://host:993, or imap://host:143 with STARTTLS")
	httpkit.Required(problem, "smtp_url", c.SMTPURL, "smtps://host:465, or smtp://host:587 with STARTTLS")
	httpkit.Required(problem, "username", c.Username, "the mailbox's login (use ${ENV})")
	httpkit.Required(problem, "password", c.Password, "the mailbox's password or app password (use ${ENV})")
	httpkit.Required(problem, "from", c.From, "the bot's address, e.g. bot@example.com")
	var hosts []string
	if c.IMAPURL != "" {
		if h, err := serverURL(c.IMAPURL, "imap"); err != nil {
			problem("imap_url", "%v", err)
		} else {
			hosts = append(hosts, h)
		}
	}
	if c.SMTPURL != "" {
		if h, err := serverURL(c.SMTPURL, "smtp"); err != nil {
			problem("smtp_url", "%v", err)
		} else {
			hosts = append(hosts, h)
		}
	}
	if c.From != "" {
		if a, err := mail.ParseAddress(c.From); err != nil || a.Name != "" {
			problem("from", "%q is not a bare address like bot@example.com", c.From)
		}
	}
	if c.Mailbox == "" {
		c.Mailbox = "INBOX"
	}
	if c.Poll != "" {
		if d, err := time.ParseDuration(c.Poll); err != nil || d < time.Second {
			problem("poll", "%q is not a duration of at least 1s (e.g. \"1m\")", c.Poll)
		}
	}
	if c.TLSInsecure {
		for _, h := range hosts {
			if !httpkit.LoopbackHost(h) {
				problem("tls_insecure", "refused for %s: certificate checks may be skipped for a loopback test server only", h)
			}
		}
	}
}

// Open implements channel.Config.
func (c *Config) Open(env channel.Env) (channel.Channel, error) {
	return httpkit.Opened(Open(*c, env))
}

// serverURL checks an imap_url or smtp_url and returns its host.
func serverURL(raw, proto string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != proto && u.Scheme != proto+"s") || u.Hostname() == "" || u.Port() == "" ||
		u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
		return "", fmt.Errorf("%q must be %ss://host:port (implicit TLS) or %s://host:port (STARTTLS), without credentials or a path", redactURL(raw), proto, proto)
	}
	return u.Hostname(), nil
}

// redactURL drops any userinfo from a URL shown in a problem.
func redactURL(raw string) string {
	if u, err := url.Parse(raw); err == nil && u.User != nil {
		u.User = nil
		return u.String()
	}
	return raw
}

// endpoint is a server to dial.
type endpoint struct {
	addr     string
	implicit bool // TLS from the first byte; else STARTTLS
	tls      *tls.Config
}

func newEndpoint(raw, proto string, insecure bool) (endpoint, error) {
	if _, err := serverURL(raw, proto); err != nil {
		return endpoint{}, err
	}
	u, _ := url.Parse(raw)
	cfg := &tls.Config{ServerName: u.Hostname(), MinVersion: tls.VersionTLS12}
	if insecure {
		if !httpkit.LoopbackHost(u.Hostname()) {
			return endpoint{}, fmt.Errorf("tls_insecure is refused for %s: loopback only", u.Hostname())
		}
		cfg.InsecureSkipVerify = true
	}
	return endpoint{addr: net.JoinHostPort(u.Hostname(), u.Port()), implicit: u.Scheme == proto+"s", tls: cfg}, nil
}

// Provider is an open email channel.
type Provider struct {
	cfg   Config
	env   channel.Env
	imap  endpoint
	smtp  endpoint
	poll  time.Duration
	from  string
	store *store

	// updates is signalled when the selected mailbox grows (IDLE).
	updates chan struct{}
	// loadMu serializes media downloads' IMAP sessions.
	loadMu sync.Mutex
}

// Open opens the channel; Run does the IMAP work.
func Open(cfg Config, env channel.Env) (*Provider, error) {
	var problems []string
	cfg.Check(channel.Setting{ID: cfg.ID}, func(key, format string, args ...any) {
		problems = append(problems, key+": "+fmt.Sprintf(format, args...))
	})
	if len(problems) > 0 {
		return nil, errors.New("email: " + strings.Join(problems, "; "))
	}
	in, err := newEndpoint(cfg.IMAPURL, "imap", cfg.TLSInsecure)
	if err != nil {
		return nil, err
	}
	out, err := newEndpoint(cfg.SMTPURL, "smtp", cfg.TLSInsecure)
	if err != nil {
		return nil, err
	}
	poll := DefaultPoll
	if cfg.Poll != "" {
		poll, _ = time.ParseDuration(cfg.Poll)
	}
	if cfg.IdleRefresh <= 0 {
		cfg.IdleRefresh = 20 * time.Minute
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 60 * time.Second
	}
	if env.ID == "" {
		env.ID = cfg.ID
	}
	if env.Kv == nil {
		env.Log().Warn("email: the backend has no Kv: the mailbox cursor and reply addresses are kept in memory and lost at a restart", "provider", env.ID)
	}
	a, _ := mail.ParseAddress(cfg.From)
	return &Provider{cfg: cfg, env: env, imap: in, smtp: out, poll: poll, from: a.Address,
		store: newStore(env), updates: make(chan struct{}, 1)}, nil
}

// ID implements channel.Provider.
func (p *Provider) ID() string { return p.env.ID }
