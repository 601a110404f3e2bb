package host

import (
	"github.com/botrun/botrun/host/internal/observe"
	"github.com/botrun/botrun/host/internal/send"
)

// Observer is the bot's observability (host/internal/observe): its
// counters (Metrics), Prometheus registry (Gatherer), queue depths, last
// hour, module history and digest, and the alerts' listeners (OnAlert).
func (b *Bot) Observer() *observe.Observer { return b.obs }

// Alert is a durability event for operators (observe.Alert): named here so
// that code outside host can register a listener,
// b.Observer().OnAlert(func(host.Alert) {…}).
type Alert = observe.Alert

// Alert names (see observe.AlertDead and the others).
const (
	AlertDead            = observe.AlertDead
	AlertAmbiguous       = observe.AlertAmbiguous
	AlertHandlerError    = observe.AlertHandlerError
	AlertModuleRefused   = observe.AlertModuleRefused
	AlertAdmissionFailed = observe.AlertAdmissionFailed
)

// instancePool is a Guest that reports its instances.
type instancePool interface{ Instances() (busy, idle int) }

// newObserver builds b's observer, over its counters, module history,
// alerts and journals.
func newObserver(b *Bot) *observe.Observer {
	return observe.New(observe.Sources{Counters: &b.metrics, Modules: &b.modules, Alerts: b.alerts,
		Inbox: b.inbox, Outbox: b.outbox, Digest: func() string { return b.guest.Digest() },
		Instances: func() (busy, idle int, ok bool) {
			p, ok := b.guest.(instancePool)
			if !ok {
				return 0, 0, false
			}
			busy, idle = p.Instances()
			return busy, idle, true
		},
		Reloads: func() (loaded, refused int64) {
			if b.reload == nil {
				return 0, 0
			}
			return b.reload.Counts()
		}})
}

// signal wakes one waiter; signals sent while it is set are merged.
type signal chan struct{}

func (s signal) notify() {
	select {
	case s <- struct{}{}:
	default:
	}
}

// sendCounters are the counters the sender moves.
func sendCounters(c *observe.Counters) send.Counters {
	return send.Counters{Journaled: &c.OutboxJournaled, Deduped: &c.OutboxDeduped, Retried: &c.OutboxRetried,
		Deferred: &c.OutboxDeferred, Dead: &c.OutboxDead, Ambiguous: &c.OutboxAmbiguous, Bypassed: &c.OutboxBypassed,
		Stale: &c.StaleLeases, Diverged: &c.Diverged, AmbiguousResolved: &c.OutboxAmbiguousResolved, NotLeader: &c.ProviderNotLeader}
}
