package host

import (
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/botrun/botrun/host/internal/rules"
	"github.com/botrun/botrun/host/internal/send"
)

// Alert names.
const (
	// AlertDead: a record went to the dead-letter queue. Kind is "inbox" or
	// "outbox"; ID is its id or key; Error says why.
	AlertDead = "durability:dead"
	// AlertAmbiguous: a send's outcome is unknown after a crash. Key and Chat
	// name it; the on_ambiguous policy settled it.
	AlertAmbiguous = "durability:ambiguous"
	// AlertHandlerError: a handler returned an error. ID is the event, Error
	// the guest's message.
	AlertHandlerError = "handler:error"
	// AlertModuleRefused: hot reload refused a new module; the old one keeps
	// serving. ID is the module's path.
	AlertModuleRefused = "module:refused"
	// AlertAdmissionFailed: the inbox journal could not record a message
	// and it was refused (fail-closed: the channel redelivers it). Provider
	// and ID name the first message refused, Error the journal's error and
	// how many more were refused since the last such alert: at most one is
	// emitted per admissionAlertEvery.
	AlertAdmissionFailed = "admission:failed"
)

// admissionAlertEvery is the least time between two AlertAdmissionFailed:
// a journal that is down refuses every message, and one alert says so.
const admissionAlertEvery = time.Minute

// Alert is a durability event for operators: a dead letter or an ambiguous
// send (alerts, audits).
type Alert struct {
	// Provider is the channel of an outbox record's alert.
	Provider string `json:"provider,omitempty"`
	Name     string `json:"name"`
	Kind     string `json:"kind,omitempty"`
	ID       string `json:"id,omitempty"`
	Key      string `json:"key,omitempty"`
	Chat     string `json:"chat,omitempty"`
	Error    string `json:"error,omitempty"`
}

// OnAlert registers fn for every alert. fn runs synchronously on the
// bot's goroutines: keep it short.
func (b *Bot) OnAlert(fn func(Alert)) { b.alerts.add(fn) }

// alerts logs each alert and hands it to the operator's listeners, and to
// out ([alerts] url) when set, without ever waiting on it.
type alerts struct {
	log       *slog.Logger
	mu        sync.Mutex
	listeners []func(Alert)
	out       chan Alert
}

func (a *alerts) add(fn func(Alert)) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.listeners = append(a.listeners, fn)
}

func (a *alerts) emit(ev Alert) {
	switch ev.Name {
	case AlertDead:
		a.log.Error("dead-lettered", "kind", ev.Kind, "id", ev.ID, "err", ev.Error)
	case AlertAmbiguous:
		a.log.Warn("ambiguous send after a crash", "key", ev.Key, "chat", ev.Chat)
	}
	a.mu.Lock()
	ls := append([]func(Alert){}, a.listeners...)
	a.mu.Unlock()
	for _, fn := range ls {
		fn(ev)
	}
	// An alert about an alert's own delivery is not posted again.
	if a.out != nil && ev.Provider != rules.AlertsChannel {
		select {
		case a.out <- ev:
		default:
			a.log.Error("alerts: the queue to [alerts] url is full; this alert is only in this log", "alert", ev.Name)
		}
	}
}

// admissionFailures rate-limits AlertAdmissionFailed.
type admissionFailures struct {
	mu sync.Mutex
	// last is when the last alert was emitted; since counts the refusals
	// not alerted since then.
	last  time.Time
	since int
}

// refused notes a fail-closed admission of message id on providerID and
// emits its alert unless one went out within admissionAlertEvery.
func (f *admissionFailures) refused(a *alerts, providerID, id string, err error) {
	f.mu.Lock()
	now := time.Now()
	if !f.last.IsZero() && now.Sub(f.last) < admissionAlertEvery {
		f.since++
		f.mu.Unlock()
		return
	}
	more := f.since
	f.last, f.since = now, 0
	f.mu.Unlock()
	msg := fmt.Sprintf("not admitted, the channel must redeliver it: inbox journal: %v", err)
	if more > 0 {
		msg += fmt.Sprintf(" (and %d more messages refused since the last alert)", more)
	}
	a.emit(Alert{Name: AlertAdmissionFailed, Provider: providerID, ID: id, Error: msg})
}

// Metrics are the seed's thirteen durability counters, the admissions
// refused by [bot] max_queue, and the module counters of hot reload, since
// start.
type Metrics struct {
	InboundJournaled  int64 `json:"inbound_journaled"`
	InboundDuplicates int64 `json:"inbound_duplicates"`
	InboundReplayed   int64 `json:"inbound_replayed"`
	InboundDead       int64 `json:"inbound_dead"`
	OutboxJournaled   int64 `json:"outbox_journaled"`
	OutboxDeduped     int64 `json:"outbox_deduped"`
	OutboxRetried     int64 `json:"outbox_retried"`
	OutboxDeferred    int64 `json:"outbox_deferred"`
	OutboxDead        int64 `json:"outbox_dead"`
	OutboxAmbiguous   int64 `json:"outbox_ambiguous"`
	OutboxBypassed    int64 `json:"outbox_bypassed"`
	StaleLeases       int64 `json:"stale_leases"`
	OutboxDiverged    int64 `json:"outbox_diverged"`
	// InboundRefused counts messages refused unjournaled because [bot]
	// max_queue messages waited for a worker (the channel redelivers them).
	InboundRefused int64 `json:"inbound_refused"`
	// OutboxAmbiguousResolved counts sends a crash left in flight that their
	// channel settled (transactional, reconciled or idempotent): neither
	// lost nor doubled, and not counted in OutboxAmbiguous.
	OutboxAmbiguousResolved int64 `json:"outbox_ambiguous_resolved"`
	// ProviderNotLeader counts sends and admissions this replica refused
	// on a channel whose session another replica leads (session =
	// "leader"): each send was handed back to the outbox without being
	// charged an attempt, for the leader to deliver; each message was left
	// for the channel to redeliver.
	ProviderNotLeader int64 `json:"provider_not_leader"`
	// ModulesLoaded and ModulesRefused count the modules hot reload put
	// live and refused since start.
	ModulesLoaded  int64 `json:"modules_loaded"`
	ModulesRefused int64 `json:"modules_refused"`
	// ReplaysOnNewModule counts records run again under another module than
	// the one that ran them before.
	ReplaysOnNewModule int64 `json:"replays_on_new_module"`
}

type counters struct {
	inboundJournaled, inboundDuplicates, inboundReplayed, inboundDead  atomic.Int64
	outboxJournaled, outboxDeduped, outboxRetried, outboxDeferred      atomic.Int64
	outboxDead, outboxAmbiguous, outboxBypassed, staleLeases, diverged atomic.Int64
	outboxAmbiguousResolved                                            atomic.Int64
	inboundRefused                                                     atomic.Int64
	providerNotLeader                                                  atomic.Int64
}

// send are the counters the sender moves.
func (c *counters) send() send.Counters {
	return send.Counters{Journaled: &c.outboxJournaled, Deduped: &c.outboxDeduped, Retried: &c.outboxRetried,
		Deferred: &c.outboxDeferred, Dead: &c.outboxDead, Ambiguous: &c.outboxAmbiguous, Bypassed: &c.outboxBypassed,
		Stale: &c.staleLeases, Diverged: &c.diverged, AmbiguousResolved: &c.outboxAmbiguousResolved, NotLeader: &c.providerNotLeader}
}

// Metrics returns the counters.
func (b *Bot) Metrics() Metrics {
	c := &b.metrics
	m := Metrics{
		InboundJournaled: c.inboundJournaled.Load(), InboundDuplicates: c.inboundDuplicates.Load(),
		InboundReplayed: c.inboundReplayed.Load(), InboundDead: c.inboundDead.Load(),
		OutboxJournaled: c.outboxJournaled.Load(), OutboxDeduped: c.outboxDeduped.Load(),
		OutboxRetried: c.outboxRetried.Load(), OutboxDeferred: c.outboxDeferred.Load(),
		OutboxDead: c.outboxDead.Load(), OutboxAmbiguous: c.outboxAmbiguous.Load(),
		OutboxBypassed: c.outboxBypassed.Load(), StaleLeases: c.staleLeases.Load(),
		OutboxDiverged: c.diverged.Load(), InboundRefused: c.inboundRefused.Load(),
		ReplaysOnNewModule: b.replaysOnNewModule.Load(), OutboxAmbiguousResolved: c.outboxAmbiguousResolved.Load(),
		ProviderNotLeader: c.providerNotLeader.Load(),
	}
	if b.reload != nil {
		m.ModulesLoaded, m.ModulesRefused = b.reload.reloads.Load(), b.reload.failures.Load()
	}
	return m
}
