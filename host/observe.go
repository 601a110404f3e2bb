package host

import (
	"github.com/botrun/botrun/host/internal/observe"
)

// Observer is the bot's observability (host/internal/observe): its
// counters (Metrics), Prometheus registry (Gatherer), queue depths, last
// hour, module history and digest, and the alerts' listeners (OnAlert).
func (b *Bot) Observer() *observe.Observer { return b.obs }

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
