package observe

import (
	"fmt"
	"log/slog"
	"sync"
	"time"
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

// Alerts logs each alert and hands it to the operator's listeners, and to
// Out ([alerts] url) when set, without ever waiting on it.
type Alerts struct {
	log *slog.Logger
	// sink is the provider id of the [alerts] url channel: an alert about
	// an alert's own delivery is not posted again.
	sink      string
	mu        sync.Mutex
	listeners []func(Alert)
	// Out, when set, takes each alert for the [alerts] url channel.
	Out chan Alert
}

// NewAlerts logs to log; sink is the provider id of the [alerts] url
// channel.
func NewAlerts(log *slog.Logger, sink string) *Alerts { return &Alerts{log: log, sink: sink} }

// OnAlert registers fn for every alert. fn runs synchronously on the
// bot's goroutines: keep it short.
func (a *Alerts) OnAlert(fn func(Alert)) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.listeners = append(a.listeners, fn)
}

// Emit logs ev and hands it to the listeners and Out.
func (a *Alerts) Emit(ev Alert) {
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
	if a.Out != nil && ev.Provider != a.sink {
		select {
		case a.Out <- ev:
		default:
			a.log.Error("alerts: the queue to [alerts] url is full; this alert is only in this log", "alert", ev.Name)
		}
	}
}

// AdmissionFailures rate-limits AlertAdmissionFailed; the zero value is
// ready (its clock time.Now).
type AdmissionFailures struct {
	// Now is the clock (nil: time.Now).
	Now func() time.Time
	mu  sync.Mutex
	// last is when the last alert was emitted; since counts the refusals
	// not alerted since then.
	last  time.Time
	since int
}

// Refused notes a fail-closed admission of message id on providerID and
// emits its alert on a unless one went out within admissionAlertEvery.
func (f *AdmissionFailures) Refused(a *Alerts, providerID, id string, err error) {
	f.mu.Lock()
	now := time.Now()
	if f.Now != nil {
		now = f.Now()
	}
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
	a.Emit(Alert{Name: AlertAdmissionFailed, Provider: providerID, ID: id, Error: msg})
}
