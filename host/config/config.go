package config

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"time"

	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/host/channel"
)

// Config is a decoded, expanded, defaulted and validated bot.toml.
type Config struct {
	// File is the path the config was read from.
	File string `toml:"-"`
	// Bot is the [bot] section.
	Bot Bot `toml:"bot"`
	// HTTP is the [http] section.
	HTTP HTTP `toml:"http"`
	// Durability is the [durability] section; Backend is "memory" when the
	// section is left out.
	Durability Durability `toml:"durability"`
	// Admin is the [admin] section.
	Admin Admin `toml:"admin"`
	// Alerts is the [alerts] section.
	Alerts Alerts `toml:"alerts"`
	// Tracing is the [tracing] section.
	Tracing Tracing `toml:"tracing"`
	// Channels are the [[channels]] entries ([[providers]], the old name,
	// is still accepted).
	Channels []Channel `toml:"-"`
	// APIs are the [[apis]] entries: the HTTP APIs a handler may call
	// through the host (fetch).
	APIs []API `toml:"apis"`
	// Deprecations name what the file says in a way a later version will
	// refuse, each with its line and the way out (botrun logs them at start
	// and `botrun check` prints them).
	Deprecations []string `toml:"-"`
}

// Bot is the [bot] section.
type Bot struct {
	// ID names the bot; it scopes the journals (default "bot").
	ID string `toml:"id"`
	// Tenant, Environment and Connection complete the bot's namespace in a
	// shared backend (defaults "", "" and "default"): two bots, or two
	// environments of one bot, share one database without seeing each
	// other's records.
	Tenant      string `toml:"tenant"`
	Environment string `toml:"environment"`
	Connection  string `toml:"connection"`
	// Module is the path of the WebAssembly module, relative to the config file.
	Module string `toml:"module"`
	// Workers is how many events are handled at once, one per chat (default
	// 64). A turn waiting on the journal or a channel holds a worker (a
	// goroutine), not a guest instance.
	Workers int `toml:"workers"`
	// Instances is how many guest instances may compute at once (default
	// 8); each holds its own memory. A guest waiting on an API call
	// (fetch) gives its place up while it waits, so up to bot.workers
	// instances may be alive then, each with up to max_memory. A handler's posted sends (Reply) are made
	// after it returns its instance; a waiting Send keeps it. A module's
	// send hooks run on a second pool of the same size (so up to twice as
	// many instances when the module exports them).
	Instances int `toml:"instances"`
	// MaxQueue caps the admitted messages waiting for a worker (default
	// 1000): past it a webhook answers 503 with Retry-After and journals
	// nothing, and the channel redelivers.
	MaxQueue int `toml:"max_queue"`
	// HandlerTimeout is how long the guest may run for one event (default
	// 10s). Time it waits on a channel in a send or a media download is not
	// counted: outbox.inline_max bounds that.
	HandlerTimeout Duration `toml:"handler_timeout"`
	// MaxMemory caps the guest's memory (default 64MiB).
	MaxMemory Size `toml:"max_memory"`
	// HotReload swaps in a new module when its file changes.
	HotReload bool `toml:"hot_reload"`
	// MaxSends caps the sends (and enqueues) of one event (default 100): a
	// guest that floods fails its event.
	MaxSends int `toml:"max_sends"`
	// MaxBroadcast caps the chats of one broadcast (default 10000); a
	// broadcast counts once against MaxSends.
	MaxBroadcast int `toml:"max_broadcast"`
	// MaxChatState caps the state of one chat, and of one sender's "user/"
	// keys: keys and values, in bytes (default 4MiB). A write that would
	// grow it past the cap is refused (TOO_LARGE to the guest).
	MaxChatState Size `toml:"max_chat_state"`
	// MaxEventBytes caps the content one event sends: its sends' and
	// enqueues' content and each chat's copy of its broadcasts, after the
	// send hooks, in bytes of JSON (default 16MiB). A send or broadcast past
	// it is refused (TOO_LARGE to the guest), nothing of it journaled.
	MaxEventBytes Size `toml:"max_event_bytes"`
	// MaxFetches caps the API calls (fetch) of one event (default 16);
	// past it a call answers TOO_LARGE.
	MaxFetches int `toml:"max_fetches"`
	// MaxFetchWait caps the time one event's API calls may wait in all
	// (default 2m); past it a call fails with a timeout. Waiting on an API
	// counts neither against handler_timeout nor against instances.
	MaxFetchWait Duration `toml:"max_fetch_wait"`
	// DataDir holds the compilation cache and embedded backends' files, relative
	// to the config file (default "data").
	DataDir string `toml:"data_dir"`
}

// API is one [[apis]] entry: an HTTP API a handler may call through the
// host. The host makes the call, adds the configured headers (the guest
// never sees them) and an Idempotency-Key, and journals the answer before
// the guest reads it, so a replayed turn reads the same answer.
type API struct {
	// Name is what the guest calls the API by.
	Name string `toml:"name"`
	// URL is the base every call's path goes under: http or https, a
	// host, an optional path prefix.
	URL string `toml:"url"`
	// Headers are sent with every call, replacing the guest's of the same
	// name (use ${ENV} for credentials); never journaled, never logged.
	Headers map[string]string `toml:"headers"`
	// Timeout bounds one call, its retries included (default 10s).
	Timeout Duration `toml:"timeout"`
	// MaxResponse caps a response's body (default 1MiB).
	MaxResponse Size `toml:"max_response"`
	// Retries is how many times a call is retried after a connection
	// error, a 429 or a 5xx (default 2).
	Retries *int `toml:"retries"`
	// Journal commits each answer before the guest reads it, so a replay
	// gets the same answer without calling again (default true); false
	// is for reads that may be repeated, and costs no write.
	Journal *bool `toml:"journal"`
	// AllowPrivate lets the API be on a loopback, private or link-local
	// address (default false: such a destination is refused). It also
	// lets its url be plain http (the API is on this machine or a private
	// network).
	AllowPrivate bool `toml:"allow_private"`
	// AllowHTTP lets the url be plain http while keeping the refusal of
	// private destinations (default false: the headers, credentials
	// included, would cross the network in clear text).
	AllowHTTP bool `toml:"allow_http"`
}

// HTTP is the [http] section.
type HTTP struct {
	// Listen is the address of the webhook, webchat and admin server (default
	// "127.0.0.1:8080").
	Listen string `toml:"listen"`
}

// Tracing is the [tracing] section: OpenTelemetry traces of each inbound
// message (admission, journal, turn, sends, completion), exported over
// OTLP/HTTP. Off without an endpoint.
type Tracing struct {
	// OTLPEndpoint is the collector's OTLP/HTTP traces URL, e.g.
	// http://127.0.0.1:4318/v1/traces; empty turns tracing off.
	OTLPEndpoint string `toml:"otlp_endpoint"`
	// ServiceName is the traces' service.name (default "botrun").
	ServiceName string `toml:"service_name"`
	// SampleRatio is the share of messages traced, 0..1 (default 1).
	SampleRatio *float64 `toml:"sample_ratio"`
}

// Admin is the [admin] section: the operator's HTTP API under /admin/.
type Admin struct {
	// Token is the bearer token every admin request needs (use ${ENV});
	// empty turns the admin API off.
	Token string `toml:"token"`
	// Listen, when set, serves the admin API on its own address (host:port)
	// instead of under /admin/ on [http] listen, which then answers 404 there.
	Listen string `toml:"listen"`
	// MetricsPublic serves GET /admin/metrics without the token, for a
	// Prometheus scraper on a private network; the rest of the API keeps
	// needing it.
	MetricsPublic bool `toml:"metrics_public"`
}

// Alerts is the [alerts] section: where operator alerts (dead letters,
// ambiguous sends, handler errors, refused modules) are POSTed as signed
// JSON, through the outbox (retried, never blocking a turn).
type Alerts struct {
	// URL receives the alerts; empty turns them off.
	URL string `toml:"url"`
	// Secret signs each POST (HMAC-SHA256, as the http channel); use ${ENV}.
	Secret string `toml:"secret"`
}

// Durability is the [durability] section: the seed's durability options.
type Durability struct {
	// Backend names a registered backend (durability.Drivers: memory, file,
	// events, sqlite, postgres and redis in cmd/botrun); default memory.
	Backend string `toml:"backend"`
	// Options are the backend's own keys of this table (path, url, …), as
	// its driver decoded and checked them.
	Options durability.DriverOptions `toml:"-" botrun:"inline"`
	// Shared is true when the backend serves several processes at once (its
	// driver's Shared, or its keys' through durability.Sharing).
	Shared bool `toml:"-"`
	// InstanceID owns leases (default <hostname>/<bot id>/<connection>).
	InstanceID string `toml:"instance_id"`
	// FailOpen dispatches an event even when the journal cannot record it.
	FailOpen bool `toml:"fail_open"`
	// Coordination serializes each chat's turns across the replicas that
	// share the backend, so no sticky routing is needed (postgres and
	// redis only).
	Coordination bool `toml:"coordination"`
	// Poll is the sweeper period (default 1s).
	Poll Duration `toml:"poll"`
	// Retention is how long done and sent records are kept (default 7d; 0 keeps
	// them).
	Retention *Duration `toml:"retention"`
	// Inbox holds the inbox options.
	Inbox Inbox `toml:"inbox"`
	// Outbox holds the outbox options.
	Outbox Outbox `toml:"outbox"`
}

// Backoff is a retry schedule: base * 2^n, capped, with jitter.
type Backoff struct {
	// Base is the first wait (default 1s).
	Base Duration `toml:"base"`
	// Cap is the longest wait (default 60s).
	Cap Duration `toml:"cap"`
	// Jitter is the random fraction added or removed, 0..1 (default 0.2).
	Jitter *float64 `toml:"jitter"`
}

// Inbox holds [durability.inbox].
type Inbox struct {
	// Lease is the processing lease, extended by a heartbeat (default 60s).
	Lease Duration `toml:"lease"`
	// MaxAttempts is how many charged runs an event gets before the DLQ
	// (default 5).
	MaxAttempts int `toml:"max_attempts"`
	// Backoff is the wait between failed attempts.
	Backoff Backoff `toml:"backoff"`
	// MediaRefs journals serializable media references (default true).
	MediaRefs *bool `toml:"media_refs"`
}

// Outbox holds [durability.outbox].
type Outbox struct {
	// Retries after the first attempt before the DLQ (default 5).
	Retries *int `toml:"retries"`
	// Backoff is the wait between attempts (default: the inbox's).
	Backoff Backoff `toml:"backoff"`
	// InlineMax is how long a send retries inline before "deferred" (default
	// 15s; 0: one attempt, a failed send answers "deferred" at once).
	InlineMax *Duration `toml:"inline_max"`
	// OnAmbiguous is skip (never duplicate) or resend (never lose).
	OnAmbiguous string `toml:"on_ambiguous"`
	// OnDiverged is send or skip.
	OnDiverged string `toml:"on_diverged"`
	// MaxPayloadBytes bypasses the outbox for larger payloads (default 1MiB;
	// 0 is refused: it would journal no send at all).
	MaxPayloadBytes *Size `toml:"max_payload_bytes"`
	// Lease is the lease of a send in flight (default 60s, at least 20ms).
	Lease Duration `toml:"lease"`
}

// The values of a [[channels]] entry's session key: which replicas run the
// channel's transport.
const (
	// SessionEvery: every replica runs the channel's transport (the
	// default, except for a LeaderOnly type).
	SessionEvery = "every"
	// SessionLeader: one replica, elected leader through the backend,
	// runs it; the others neither send on it nor admit its messages.
	SessionLeader = "leader"
)

// Channel is one [[channels]] entry: its id and type, and the keys its
// registered channel type decoded and checked.
type Channel struct {
	// ID names the provider; it appears in URLs and record ids.
	ID string `toml:"id"`
	// Type selects the channel (channel.Types lists the registered ones).
	Type string `toml:"type"`
	// Session says which replicas run the channel's transport:
	// SessionEvery (the default) or SessionLeader, only
	// the replica elected leader through the backend (the default of a
	// LeaderOnly type).
	Session string `toml:"session"`
	// SessionLease is the leader's lease with session = "leader" (default
	// 30s, at least 20ms): another replica takes the session within about
	// one lease of the leader's death.
	SessionLease Duration `toml:"session_lease"`
	// Settings are the channel's own keys.
	Settings channel.Config `toml:"-" botrun:"inline"`
}

// bootID distinguishes this process's default instance id on shared backends.
var bootID = func() string {
	var b [4]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}()

// defaults fills every unset value; dir is the config file's directory.
func (c *Config) defaults(dir string) {
	if c.Tracing.ServiceName == "" {
		c.Tracing.ServiceName = "botrun"
	}
	if c.Tracing.SampleRatio == nil {
		one := 1.0
		c.Tracing.SampleRatio = &one
	}
	b := &c.Bot
	if b.ID == "" {
		b.ID = "bot"
	}
	if b.Connection == "" {
		b.Connection = "default"
	}
	if b.Workers == 0 {
		b.Workers = 64
	}
	if b.Instances == 0 {
		b.Instances = 8
	}
	if b.MaxSends == 0 {
		b.MaxSends = 100
	}
	if b.MaxBroadcast == 0 {
		b.MaxBroadcast = 10000
	}
	if b.MaxQueue == 0 {
		b.MaxQueue = 1000
	}
	if b.HandlerTimeout == 0 {
		b.HandlerTimeout = Duration(10 * time.Second)
	}
	if b.MaxMemory == 0 {
		b.MaxMemory = 64 << 20
	}
	if b.MaxEventBytes == 0 {
		b.MaxEventBytes = 16 << 20
	}
	if b.MaxChatState == 0 {
		b.MaxChatState = 4 << 20
	}
	if b.MaxFetches == 0 {
		b.MaxFetches = 16
	}
	if b.MaxFetchWait == 0 {
		b.MaxFetchWait = Duration(2 * time.Minute)
	}
	for i := range c.APIs {
		c.APIs[i].defaults()
	}
	if b.DataDir == "" {
		b.DataDir = "data"
	}
	b.DataDir = resolve(dir, b.DataDir)
	if b.Module != "" {
		b.Module = resolve(dir, b.Module)
	}
	if c.HTTP.Listen == "" {
		c.HTTP.Listen = "127.0.0.1:8080"
	}
	d := &c.Durability
	if d.Backend == "" {
		d.Backend = "memory"
	}
	if d.InstanceID == "" {
		host, _ := os.Hostname()
		d.InstanceID = host + "/" + b.ID + "/" + b.Connection
		if d.Shared {
			// Two processes of one host sharing the backend must not share an
			// id: a per-boot suffix. A restart then waits for the old leases
			// to expire; set instance_id to avoid that wait.
			d.InstanceID += "/" + bootID
		}
	}
	if d.Poll == 0 {
		d.Poll = Duration(time.Second)
	}
	if d.Retention == nil {
		r := Duration(7 * 24 * time.Hour)
		d.Retention = &r
	}
	if d.Inbox.Lease == 0 {
		d.Inbox.Lease = Duration(60 * time.Second)
	}
	if d.Inbox.MaxAttempts == 0 {
		d.Inbox.MaxAttempts = 5
	}
	d.Inbox.Backoff.defaults(Backoff{})
	if d.Inbox.MediaRefs == nil {
		t := true
		d.Inbox.MediaRefs = &t
	}
	o := &d.Outbox
	if o.Retries == nil {
		n := 5
		o.Retries = &n
	}
	o.Backoff.defaults(d.Inbox.Backoff)
	if o.InlineMax == nil {
		d := Duration(15 * time.Second)
		o.InlineMax = &d
	}
	if o.OnAmbiguous == "" {
		o.OnAmbiguous = "skip"
	}
	if o.OnDiverged == "" {
		o.OnDiverged = "send"
	}
	if o.MaxPayloadBytes == nil {
		z := Size(1 << 20)
		o.MaxPayloadBytes = &z
	}
	if o.Lease == 0 {
		o.Lease = Duration(60 * time.Second)
	}
}

func (b *Backoff) defaults(from Backoff) {
	if b.Base == 0 {
		b.Base = from.Base
		if b.Base == 0 {
			b.Base = Duration(time.Second)
		}
	}
	if b.Cap == 0 {
		b.Cap = from.Cap
		if b.Cap == 0 {
			b.Cap = Duration(60 * time.Second)
		}
	}
	if b.Jitter == nil {
		j := 0.2
		if from.Jitter != nil {
			j = *from.Jitter
		}
		b.Jitter = &j
	}
}

func resolve(dir, p string) string {
	if filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(dir, p)
}

func (a *API) defaults() {
	if a.Timeout == 0 {
		a.Timeout = Duration(10 * time.Second)
	}
	if a.MaxResponse == 0 {
		a.MaxResponse = 1 << 20
	}
	if a.Retries == nil {
		two := 2
		a.Retries = &two
	}
	if a.Journal == nil {
		yes := true
		a.Journal = &yes
	}
}
