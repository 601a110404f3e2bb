package channel

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/internal/registry"
)

// Type is a channel type that a [[channels]] entry's type can name. A
// channel package registers its type in an init function; a program includes
// the channels it wants by importing their packages (cmd/botrun imports the
// built-in set). See docs/adding-a-channel.md.
type Type struct {
	// Name is the value of the entry's type key.
	Name string
	// Config returns a new entry filled with the type's defaults. Its
	// toml-tagged fields are the entry's keys, decoded over those defaults;
	// id, type, session and session_lease are decoded by the host (a
	// type may decode session too: see LeaderOnly and OwnSessionKey).
	Config func() Config
	// LeaderOnly is set for a channel whose transport one process at a
	// time may hold (a WhatsApp Web device): its entries' session is
	// "leader" unless set, and "every" is refused.
	LeaderOnly bool
	// OwnSessionKey is set for a channel whose entries' session key is a
	// setting of its own (WPPConnect's session name, older than the
	// host's key): the host reads no session mode from them and runs the
	// channel on every replica.
	OwnSessionKey bool
}

// Config is one decoded [[channels]] entry of a registered type.
type Config interface {
	// Check completes the entry and reports each problem under its key
	// (e.g. "token"), with the way out.
	Check(in Setting, problem Problem)
	// Open builds the channel the entry describes.
	Open(env Env) (Channel, error)
}

// Replayable is implemented by a Config whose channel verifies a request by
// a time the request carries (a signed timestamp, a token's expiry): a
// captured request keeps passing that check for a bounded time, during which
// only the inbox's record of its message id keeps it from being answered
// again. The host's config check refuses a durability.retention that is not
// longer than ReplayWindow, since a replay after the purge would be admitted
// as new.
type Replayable interface {
	// ReplayWindow is how long after it arrived a captured request may still
	// pass the channel's check: twice a timestamp window that accepts a
	// clock either way. 0 when the entry serves no such request (a mode
	// without a webhook).
	ReplayWindow() time.Duration
}

// Problem reports what is wrong with one key and how to fix it.
type Problem func(key, format string, args ...any)

// Setting is what a channel's Check may look at beyond its own entry.
type Setting struct {
	// ID is the entry's id.
	ID string
	// Listen is [http] listen, the address webhooks arrive on.
	Listen string
	// Retention is durability.retention (0 keeps records forever).
	Retention time.Duration
	// Dir is the config file's directory, against which a relative path in
	// the entry resolves.
	Dir string
}

// Env is what the host gives a channel it opens.
type Env struct {
	// ID is the entry's id.
	ID string
	// Admitter journals the channel's inbound messages.
	Admitter Admitter
	// Logger receives the channel's logs.
	Logger *slog.Logger
	// Kv keeps the channel's own durable data beside the journals; nil when
	// the backend has no Kv. KeyPrefix is the bot's scope, shared by all its
	// channels: a channel's keys start with it, then a name of the channel's
	// own and the entry's id (webchat: "<KeyPrefix>tr/<id>/…").
	Kv        durability.Kv
	KeyPrefix string
	// Retention is how long the channel keeps what it stores (0: forever).
	Retention time.Duration
	// Alert raises an operator alert about the channel (name, and what
	// happened): the host logs it, hands it to its listeners and posts it
	// to [alerts] url. Nil outside a bot: use Env.RaiseAlert.
	Alert func(name, detail string)
	// Panicked counts a panic Guard recovered in the channel (the host's
	// botrun_channel_panics_total); nil counts nothing.
	Panicked func()
	// Draining is closed when the bot begins to stop: a request the
	// channel holds open (a long poll) answers now, so the HTTP servers
	// stop at once. Nil outside a bot.
	Draining <-chan struct{}
	// Now is the bot's clock, the one its journals are stamped by; nil
	// outside a bot (Env.Clock falls back to time.Now). A channel judges a
	// signed timestamp's window by it.
	Now func() time.Time
	// Horizon is the time a purge of what the channel keeps judges age by
	// (never ahead of the time that really passed, when the wall clock is
	// stepped forward); nil outside a bot (Env.PurgeClock falls back to
	// time.Now).
	Horizon func() time.Time
	// Skipped counts an input the channel took and, by design, did not
	// admit, for reason (a fixed word: "automatic" is an email channel's
	// auto-reply left unanswered); the host's
	// botrun_channel_skipped_total{channel,reason}. Nil counts nothing.
	Skipped func(reason string)
}

// CountSkipped counts an input skipped for reason through Skipped when the
// host set one.
func (e Env) CountSkipped(reason string) {
	if e.Skipped != nil {
		e.Skipped(reason)
	}
}

// Clock is Now, or time.Now when the host set none.
func (e Env) Clock() func() time.Time {
	if e.Now != nil {
		return e.Now
	}
	return time.Now
}

// PurgeClock is Horizon, or time.Now when the host set none.
func (e Env) PurgeClock() func() time.Time {
	if e.Horizon != nil {
		return e.Horizon
	}
	return time.Now
}

// RaiseAlert raises an operator alert through Alert when the host set one.
func (e Env) RaiseAlert(name, detail string) {
	if e.Alert != nil {
		e.Alert(name, detail)
	}
}

// Runner is implemented by a channel with work of its own, such as polling
// for updates or purging what it stores: the host calls Run once when the bot
// starts, on every replica, and cancels ctx when it stops. Work that only
// the leader may do is a SessionRunner's.
type Runner interface {
	Run(ctx context.Context)
}

// ListenChecker is implemented by a channel that may not be served on every
// address (webchat, which has no authentication, refuses a public one unless
// its entry allows it). The host calls CheckListen with the address of its
// HTTP listener before it serves.
type ListenChecker interface {
	CheckListen(addr string) error
}

var types = registry.New[Type]("channel type")

// Register makes a channel type available under t.Name. It panics when the
// name is taken or t is incomplete: both are programming errors.
func Register(t Type) {
	if t.Config == nil {
		panic(fmt.Sprintf("provider: channel type %q has no Config constructor", t.Name))
	}
	types.Register(t.Name, t)
}

// Lookup returns the registered channel type called name.
func Lookup(name string) (Type, bool) { return types.Lookup(name) }

// Types lists the registered channel types' names in order.
func Types() []string { return types.Names() }

// Log returns the logger the channel should use.
func (e Env) Log() *slog.Logger {
	if e.Logger == nil {
		return slog.Default()
	}
	return e.Logger
}
