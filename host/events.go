package host

import (
	"sync/atomic"
)

// Event names.
const (
	// EventDead: a record went to the dead-letter queue. Kind is "inbox" or
	// "outbox"; ID is its id or key; Error says why.
	EventDead = "durability:dead"
	// EventAmbiguous: a send's outcome is unknown after a crash. Key and Chat
	// name it; the on_ambiguous policy settled it.
	EventAmbiguous = "durability:ambiguous"
)

// Event is a durability event for operators (alerts, audits).
type Event struct {
	Name  string `json:"name"`
	Kind  string `json:"kind,omitempty"`
	ID    string `json:"id,omitempty"`
	Key   string `json:"key,omitempty"`
	Chat  string `json:"chat,omitempty"`
	Error string `json:"error,omitempty"`
}

// OnEvent registers fn for every durability event. fn runs synchronously on the
// bot's goroutines: keep it short.
func (b *Bot) OnEvent(fn func(Event)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.listeners = append(b.listeners, fn)
}

func (b *Bot) emit(ev Event) {
	switch ev.Name {
	case EventDead:
		b.log.Error("dead-lettered", "kind", ev.Kind, "id", ev.ID, "err", ev.Error)
	case EventAmbiguous:
		b.log.Warn("ambiguous send after a crash", "key", ev.Key, "chat", ev.Chat)
	}
	b.mu.Lock()
	ls := append([]func(Event){}, b.listeners...)
	b.mu.Unlock()
	for _, fn := range ls {
		fn(ev)
	}
}

// Metrics are the seed's thirteen durability counters, and the admissions
// refused by [bot] max_queue, since start.
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
}

type counters struct {
	inboundJournaled, inboundDuplicates, inboundReplayed, inboundDead  atomic.Int64
	outboxJournaled, outboxDeduped, outboxRetried, outboxDeferred      atomic.Int64
	outboxDead, outboxAmbiguous, outboxBypassed, staleLeases, diverged atomic.Int64
	inboundRefused                                                     atomic.Int64
}

// Metrics returns the counters.
func (b *Bot) Metrics() Metrics {
	c := &b.metrics
	return Metrics{
		InboundJournaled: c.inboundJournaled.Load(), InboundDuplicates: c.inboundDuplicates.Load(),
		InboundReplayed: c.inboundReplayed.Load(), InboundDead: c.inboundDead.Load(),
		OutboxJournaled: c.outboxJournaled.Load(), OutboxDeduped: c.outboxDeduped.Load(),
		OutboxRetried: c.outboxRetried.Load(), OutboxDeferred: c.outboxDeferred.Load(),
		OutboxDead: c.outboxDead.Load(), OutboxAmbiguous: c.outboxAmbiguous.Load(),
		OutboxBypassed: c.outboxBypassed.Load(), StaleLeases: c.staleLeases.Load(),
		OutboxDiverged: c.diverged.Load(), InboundRefused: c.inboundRefused.Load(),
	}
}
