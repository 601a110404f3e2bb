package host

import (
	"log/slog"

	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/host/config"
	"github.com/botrun/botrun/host/internal/dispatch"
	"github.com/botrun/botrun/host/ops"
)

// Operator is the bot's operator (host/ops): what the admin API reads and
// does, acting on this running bot.
func (b *Bot) Operator() *ops.Operator { return b.op }

// NewOperator is an operator over the journals j (and the backend's Kv kv,
// nil without one) of the bot cfg describes, with no running bot: botrun's
// CLI, from another process than the bot's.
func NewOperator(cfg *config.Config, j durability.Journals, kv durability.Kv) *ops.Operator {
	return ops.New(operatorOptions(cfg, j, kv))
}

// operatorOptions are the settings of an operator of the bot cfg
// describes, over its journals j and Kv kv.
func operatorOptions(cfg *config.Config, j durability.Journals, kv durability.Kv) ops.Options {
	var sessions []string
	for _, p := range sessionProviders(cfg) {
		sessions = append(sessions, p.ID)
	}
	return ops.Options{Journals: j, Kv: kv, Scope: Scope(cfg).ID() + "/", Sessions: sessions, MaxFetches: cfg.Bot.MaxFetches}
}

// newOperator is b's operator (Bot.Operator).
func newOperator(b *Bot) *ops.Operator {
	o := operatorOptions(b.cfg, durability.Journals{Inbox: b.inbox, Outbox: b.outbox, State: b.state}, b.kv)
	o.Live, o.Counters = live{b}, &b.metrics
	return ops.New(o)
}

// live is the running bot as its operator acts on it (ops.Live).
type live struct{ b *Bot }

func (l live) Submit(rec durability.InboxRecord) {
	l.b.dispatch.Submit(dispatch.Job{ChatKey: dispatch.ChatKey(rec.Provider, rec.Chat), ID: rec.ID})
}

func (l live) Wake()                        { l.b.wake.Notify() }
func (l live) Leads(providerID string) bool { return l.b.leaders.Refuse(providerID) == nil }
func (l live) MaxBroadcast() int            { return l.b.cfg.Bot.MaxBroadcast }
func (l live) Configured(providerID string) bool {
	_, ok := l.b.providers[providerID]
	return ok
}

// Logger is the bot's logger, for the surfaces mounted on it (the admin
// API's log of operator actions).
func (b *Bot) Logger() *slog.Logger { return b.log }

// Draining is closed when the bot begins to stop, before its HTTP servers
// shut down: a long-lived response (the console's live tail) ends on it, so
// the graceful stop does not wait for it.
func (b *Bot) Draining() <-chan struct{} { return b.draining }

// DryRunSource returns the bot's journals, config and Kv (where the API
// calls' answers are; nil without one): what a dry run of a candidate
// module reads (host/dryrun, from the console). It only reads them.
func (b *Bot) DryRunSource() (durability.Journals, *config.Config, durability.Kv) {
	return durability.Journals{Inbox: b.inbox, Outbox: b.outbox, State: b.state}, b.cfg, b.kv
}
