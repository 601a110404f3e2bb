package observe

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/internal/groupcommit"
)

// DepthCap is the most records QueueDepths counts in one state: a deeper
// queue shows as DepthCap.
const DepthCap = 10000

// depthTTL is how long QueueDepths reuses a reading; depthFresh how long at
// least when the counters moved since (a record changed queue).
const (
	depthTTL   = 10 * time.Second
	depthFresh = time.Second
)

// Sources are what an Observer reads besides what it keeps.
type Sources struct {
	// Counters, Modules and Alerts are the bot's (kept by the bot, so that
	// the parts built before the Observer bump them).
	Counters *Counters
	Modules  *ModuleHistory
	Alerts   *Alerts
	// Inbox and Outbox are the journals whose queue depths it reads.
	Inbox  durability.InboxJournal
	Outbox durability.OutboxJournal
	// Instances reports the guest's handler instances (ok false: the
	// guest keeps no pool).
	Instances func() (busy, idle int, ok bool)
	// Reloads counts the modules hot reload put live and refused.
	Reloads func() (loaded, refused int64)
	// Digest is the sha256 digest of the module that runs the turns now.
	Digest func() string
	// Now is the clock (nil: time.Now).
	Now func() time.Time
}

// Observer is the bot's observability: the counters (Metrics), its
// Prometheus metrics on a registry of its own (not the process's default
// one: the counters, latency histograms, queue depth and instance gauges,
// and Go's runtime and process metrics), the queue depths, the last hour,
// the module's history and the alerts' listeners.
type Observer struct {
	src Sources
	reg *prometheus.Registry
	// admission is webhook to journaled; turn is a claimed record's whole
	// turn (handler, sends, completion); Guest is the handler's own run.
	admission, turn prometheus.Histogram
	Guest           prometheus.Histogram
	sendVec         *prometheus.HistogramVec
	// fetchVec is the API calls' latency by API and outcome.
	fetchVec *prometheus.HistogramVec
	// commit and batch are the group commit's latency and batch size.
	commit, batch prometheus.Histogram
	stopCommit    func()
	// recent is the last hour a minute at a time, for the console.
	recent *lastHour
	// turns counts the turns ended.
	turns atomic.Int64
	// Panics counts the panics recovered in channels, by channel; Skipped
	// the inputs channels did not admit by design, by channel and reason.
	Panics, Skipped *prometheus.CounterVec
	// depths is the last reading of the queue depths (QueueDepths).
	depths depthCache
}

// Admitted observes an admission that took d.
func (in *Observer) Admitted(d time.Duration) {
	in.admission.Observe(d.Seconds())
	in.recent.admitted(in.src.Now())
}

// Turned observes a turn that took d.
func (in *Observer) Turned(d time.Duration) {
	in.turn.Observe(d.Seconds())
	in.recent.turned(in.src.Now(), d.Seconds())
	in.turns.Add(1)
}

// moves changes whenever a record may have changed queue: the sum of the
// counters and of the turns ended.
func (in *Observer) moves() int64 {
	m := in.Metrics()
	n := in.turns.Load()
	for _, c := range counterDefs {
		n += c.value(m)
	}
	return n
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
	// FetchCalls … FetchAmbiguous count the API calls (fetch): made,
	// failed without a response, answered from the journal, made anew
	// for a diverged request, made again after a crash that may have
	// made them.
	FetchCalls     int64 `json:"fetch_calls"`
	FetchFailed    int64 `json:"fetch_failed"`
	FetchReplayed  int64 `json:"fetch_replayed"`
	FetchDiverged  int64 `json:"fetch_diverged"`
	FetchAmbiguous int64 `json:"fetch_ambiguous"`
}

// Counters are the durability counters the message path bumps (see
// Metrics for each); the zero value is ready.
type Counters struct {
	InboundJournaled, InboundDuplicates, InboundReplayed, InboundDead  atomic.Int64
	OutboxJournaled, OutboxDeduped, OutboxRetried, OutboxDeferred      atomic.Int64
	OutboxDead, OutboxAmbiguous, OutboxBypassed, StaleLeases, Diverged atomic.Int64
	OutboxAmbiguousResolved                                            atomic.Int64
	InboundRefused                                                     atomic.Int64
	ProviderNotLeader                                                  atomic.Int64
	// ReplaysOnNewModule counts records run again under another module.
	ReplaysOnNewModule atomic.Int64
	// The API calls (fetch): made, failed without a response, answered
	// from the journal, made anew for another request, made again after a
	// crash that may have made them.
	FetchCalls, FetchFailed, FetchReplayed, FetchDiverged, FetchAmbiguous atomic.Int64
}

// counterDefs are the counters, exported as botrun_<name>_total: name is
// the counter's key in the JSON Metrics too.
var counterDefs = []struct {
	name, help string
	value      func(Metrics) int64
}{
	{"inbound_journaled", "Inbound messages journaled before any handler ran.", func(m Metrics) int64 { return m.InboundJournaled }},
	{"inbound_duplicates", "Redelivered inbound messages recognised by their channel id.", func(m Metrics) int64 { return m.InboundDuplicates }},
	{"inbound_refused", "Inbound messages refused unjournaled (503) because bot.max_queue messages waited for a worker.", func(m Metrics) int64 { return m.InboundRefused }},
	{"inbound_replayed", "Inbound records run again (after a crash, a retry or an operator's replay).", func(m Metrics) int64 { return m.InboundReplayed }},
	{"inbound_dead", "Inbound records moved to the dead-letter queue.", func(m Metrics) int64 { return m.InboundDead }},
	{"outbox_journaled", "Sends journaled before the channel was called.", func(m Metrics) int64 { return m.OutboxJournaled }},
	{"outbox_deduped", "Sends answered from the outbox instead of sent again.", func(m Metrics) int64 { return m.OutboxDeduped }},
	{"outbox_retried", "Send attempts retried after a failure.", func(m Metrics) int64 { return m.OutboxRetried }},
	{"outbox_deferred", "Sends left to the sweeper.", func(m Metrics) int64 { return m.OutboxDeferred }},
	{"outbox_dead", "Sends moved to the dead-letter queue.", func(m Metrics) int64 { return m.OutboxDead }},
	{"outbox_ambiguous", "Sends whose outcome a crash left unknown.", func(m Metrics) int64 { return m.OutboxAmbiguous }},
	{"outbox_ambiguous_resolved", "Sends a crash left in flight that their channel settled (transactional, reconciled or idempotent): neither lost nor doubled.", func(m Metrics) int64 { return m.OutboxAmbiguousResolved }},
	{"outbox_bypassed", "Sends over max_payload_bytes sent without the outbox.", func(m Metrics) int64 { return m.OutboxBypassed }},
	{"stale_leases", "Completions refused because the lease had passed to another owner.", func(m Metrics) int64 { return m.StaleLeases }},
	{"outbox_diverged", "Replayed sends whose content differed under the same key.", func(m Metrics) int64 { return m.OutboxDiverged }},
	{"provider_not_leader", "Sends and admissions refused on a channel whose session another replica leads (ProviderNotLeader): the sends handed back to the leader, not charged as attempts.", func(m Metrics) int64 { return m.ProviderNotLeader }},
	{"modules_loaded", "Modules swapped in by hot reload.", func(m Metrics) int64 { return m.ModulesLoaded }},
	{"modules_refused", "Changed modules refused by hot reload.", func(m Metrics) int64 { return m.ModulesRefused }},
	{"replays_on_new_module", "Replays run by another module than the first run.", func(m Metrics) int64 { return m.ReplaysOnNewModule }},
	{"fetch_calls", "API calls (fetch) made.", func(m Metrics) int64 { return m.FetchCalls }},
	{"fetch_failed", "API calls that got no response (refused, connection, timeout, too large).", func(m Metrics) int64 { return m.FetchFailed }},
	{"fetch_replayed", "API calls answered from the journal, not made again.", func(m Metrics) int64 { return m.FetchReplayed }},
	{"fetch_diverged", "API calls a replay made anew because its request differed from the journaled one.", func(m Metrics) int64 { return m.FetchDiverged }},
	{"fetch_ambiguous", "API calls a replay made again with nothing journaled: the crashed attempt may have made them (same Idempotency-Key).", func(m Metrics) int64 { return m.FetchAmbiguous }},
}

// New builds the bot's metrics over src and starts observing the
// process's group commits (Close stops it).
func New(src Sources) *Observer {
	if src.Now == nil {
		src.Now = time.Now
	}
	seconds := func(name, help string, buckets []float64) prometheus.Histogram {
		return prometheus.NewHistogram(prometheus.HistogramOpts{Name: "botrun_" + name, Help: help, Buckets: buckets})
	}
	ms := func(start float64, n int) []float64 { return prometheus.ExponentialBuckets(start, 2, n) }
	turnBuckets := ms(0.001, 16)
	in := &Observer{
		src:       src,
		recent:    newLastHour(turnBuckets),
		reg:       prometheus.NewRegistry(),
		admission: seconds("admission_seconds", "Admission: from the channel handing a message over to its inbox record journaled.", ms(0.0005, 14)),
		turn:      seconds("turn_seconds", "A claimed inbound record's turn: its handler, sends and completion.", turnBuckets),
		Guest:     seconds("guest_seconds", "The guest's handler run for one event (its host calls included).", ms(0.001, 16)),
		commit:    seconds("journal_commit_seconds", "One group commit of the journal (a batch of writes in one transaction); process-wide.", ms(0.0001, 15)),
		batch: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "botrun_journal_commit_batch_size",
			Help: "Writes per group commit of the journal; process-wide.", Buckets: ms(1, 10)}),
		sendVec: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "botrun_send_seconds",
			Help: "One call of a channel's send (an attempt), by provider.", Buckets: ms(0.001, 15)}, []string{"provider"}),
		fetchVec: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "botrun_fetch_seconds",
			Help:    "One API call (fetch) the host made for a guest, retries included, by API and outcome: the response's status class (2xx, 3xx, 4xx, 5xx) or why it got none (refused, connection, timeout, too-large). Answers read from the journal are not calls (botrun_fetch_replayed_total).",
			Buckets: ms(0.005, 14)}, []string{"api", "outcome"}),
		Panics:  newPanicCounter(),
		Skipped: newSkipCounter(),
	}
	in.reg.MustRegister(in.admission, in.turn, in.Guest, in.commit, in.batch, in.sendVec, in.fetchVec, in.Panics, in.Skipped,
		counterCollector{in}, depthCollector{in}, instanceCollector{in},
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	in.stopCommit = groupcommit.Observe(func(size int, took time.Duration) {
		in.batch.Observe(float64(size))
		in.commit.Observe(took.Seconds())
	})
	return in
}

// SendObservers are the send latency histograms of each of providers,
// curried once so that a send observes without a label lookup.
func (in *Observer) SendObservers(providers []string) map[string]prometheus.Observer {
	out := make(map[string]prometheus.Observer, len(providers))
	for _, p := range providers {
		out[p] = in.sendVec.WithLabelValues(p)
	}
	return out
}

// FetchTime observes one API call: its API, its outcome and how long it
// took.
func (in *Observer) FetchTime(api, outcome string, took time.Duration) {
	in.fetchVec.WithLabelValues(api, outcome).Observe(took.Seconds())
}

// Close stops observing the group commits.
func (in *Observer) Close() { in.stopCommit() }

// Gatherer is the bot's Prometheus registry, for /admin/metrics.
func (in *Observer) Gatherer() prometheus.Gatherer { return in.reg }

// counterCollector exports the counters of Metrics.
type counterCollector struct{ in *Observer }

var counterDescs = func() []*prometheus.Desc {
	out := make([]*prometheus.Desc, len(counterDefs))
	for i, c := range counterDefs {
		out[i] = prometheus.NewDesc("botrun_"+c.name+"_total", c.help, nil, nil)
	}
	return out
}()

func (c counterCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range counterDescs {
		ch <- d
	}
}

func (c counterCollector) Collect(ch chan<- prometheus.Metric) {
	m := c.in.Metrics()
	for i, def := range counterDefs {
		ch <- prometheus.MustNewConstMetric(counterDescs[i], prometheus.CounterValue, float64(def.value(m)))
	}
}

var (
	inboxDepth = prometheus.NewDesc("botrun_inbox_records",
		"Inbox records by state: queued (pending or failed, due for a run), leased (processing), dead; counted up to 10000, read at most every 10 s.", []string{"state"}, nil)
	outboxDepth = prometheus.NewDesc("botrun_outbox_records",
		"Outbox records by state: pending (due), deferred (failed, due for a retry), scheduled (held until later), dead, unknown (ambiguous, skipped); counted up to 10000, read at most every 10 s.", []string{"state"}, nil)
)

// depthCollector exports the queue depths (Observer.QueueDepths).
type depthCollector struct{ in *Observer }

func (d depthCollector) Describe(ch chan<- *prometheus.Desc) { ch <- inboxDepth; ch <- outboxDepth }

func (d depthCollector) Collect(ch chan<- prometheus.Metric) {
	inbox, outbox, err := d.in.QueueDepths(context.Background())
	if err != nil {
		ch <- prometheus.NewInvalidMetric(inboxDepth, err)
		return
	}
	for _, s := range InboxQueues {
		ch <- prometheus.MustNewConstMetric(inboxDepth, prometheus.GaugeValue, float64(inbox[s]), s)
	}
	for _, s := range OutboxQueues {
		ch <- prometheus.MustNewConstMetric(outboxDepth, prometheus.GaugeValue, float64(outbox[s]), s)
	}
}

// depthCache keeps the last reading of the queue depths, or its failure,
// for depthTTL: scrapes, consoles and their retries share one reading.
type depthCache struct {
	mu            sync.Mutex
	at            time.Time
	moves         int64 // the counters' sum at the reading
	inbox, outbox map[string]int
	err           error
}

// InboxQueues and OutboxQueues are the queue states QueueDepths counts, in
// the order an operator reads them.
var (
	InboxQueues  = []string{"queued", "leased", "dead"}
	OutboxQueues = []string{"pending", "deferred", "scheduled", "dead", "unknown"}
)

// QueueDepths is the number of records in each queue state, each counted up
// to 10,000 (DepthCap; a count equal to it means at least that many), read
// from the journals at most every 10 s, or every second while the counters
// move (a failed read is kept as long).
// Inbox: queued (pending or failed, due for a run), leased (processing),
// dead. Outbox: pending (due), deferred (failed, due for a retry), scheduled
// (held until later), dead, unknown (ambiguous, skipped).
func (in *Observer) QueueDepths(ctx context.Context) (inbox, outbox map[string]int, err error) {
	d := &in.depths
	d.mu.Lock()
	defer d.mu.Unlock()
	moves := in.moves()
	if age := in.src.Now().Sub(d.at); d.at.IsZero() || age > depthTTL || (moves != d.moves && age > depthFresh) {
		d.moves = moves
		// Not the caller's context: the reading is shared, and one
		// caller's cancelled request must not become everyone's error.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		d.inbox, d.outbox, d.err = in.readDepths(rctx, DepthCap)
		cancel()
		d.at = in.src.Now()
	}
	if d.err != nil {
		return nil, nil, d.err
	}
	return maps.Clone(d.inbox), maps.Clone(d.outbox), nil
}

// readDepths counts the records of each queue state up to limit.
func (in *Observer) readDepths(ctx context.Context, limit int) (inbox, outbox map[string]int, err error) {
	inbox, outbox = map[string]int{}, map[string]int{}
	count := func(state string) int {
		if err != nil {
			return 0
		}
		var recs []durability.InboxRecord
		recs, err = in.src.Inbox.List(ctx, durability.ListFilter{State: state, Limit: limit})
		return len(recs)
	}
	inbox["queued"] = min(count(string(durability.InboxPending))+count(string(durability.InboxFailed)), limit)
	inbox["leased"] = count(string(durability.InboxProcessing))
	inbox["dead"] = count(string(durability.InboxDead))
	now := in.src.Now().UnixMilli()
	for shown, stored := range map[string]durability.OutboxState{"pending": durability.OutboxPending,
		"deferred": durability.OutboxFailed, "dead": durability.OutboxDead, "unknown": durability.OutboxUnknown} {
		if err != nil {
			break
		}
		var recs []durability.OutboxRecord
		recs, err = in.src.Outbox.List(ctx, durability.ListFilter{State: string(stored), Limit: limit})
		if stored != durability.OutboxPending {
			outbox[shown] = len(recs)
			continue
		}
		for _, r := range recs {
			outbox[string(r.Shown(now))]++
		}
	}
	if err != nil {
		return nil, nil, fmt.Errorf("counting the queues: %w", err)
	}
	return inbox, outbox, nil
}

var instancesDesc = prometheus.NewDesc("botrun_guest_instances",
	"The guest module's handler instances: busy running an event, idle in the pool.", []string{"state"}, nil)

// instanceCollector exports the guest's instance pool (none for a guest
// without one).
type instanceCollector struct{ in *Observer }

func (c instanceCollector) Describe(ch chan<- *prometheus.Desc) { ch <- instancesDesc }

func (c instanceCollector) Collect(ch chan<- prometheus.Metric) {
	if c.in.src.Instances == nil {
		return
	}
	busy, idle, ok := c.in.src.Instances()
	if !ok {
		return
	}
	ch <- prometheus.MustNewConstMetric(instancesDesc, prometheus.GaugeValue, float64(busy), "busy")
	ch <- prometheus.MustNewConstMetric(instancesDesc, prometheus.GaugeValue, float64(idle), "idle")
}

// Metrics returns the counters.
func (in *Observer) Metrics() Metrics {
	c := in.src.Counters
	m := Metrics{
		InboundJournaled: c.InboundJournaled.Load(), InboundDuplicates: c.InboundDuplicates.Load(),
		InboundReplayed: c.InboundReplayed.Load(), InboundDead: c.InboundDead.Load(),
		OutboxJournaled: c.OutboxJournaled.Load(), OutboxDeduped: c.OutboxDeduped.Load(),
		OutboxRetried: c.OutboxRetried.Load(), OutboxDeferred: c.OutboxDeferred.Load(),
		OutboxDead: c.OutboxDead.Load(), OutboxAmbiguous: c.OutboxAmbiguous.Load(),
		OutboxBypassed: c.OutboxBypassed.Load(), StaleLeases: c.StaleLeases.Load(),
		OutboxDiverged: c.Diverged.Load(), InboundRefused: c.InboundRefused.Load(),
		ReplaysOnNewModule: c.ReplaysOnNewModule.Load(), OutboxAmbiguousResolved: c.OutboxAmbiguousResolved.Load(),
		FetchCalls: c.FetchCalls.Load(), FetchFailed: c.FetchFailed.Load(), FetchReplayed: c.FetchReplayed.Load(),
		FetchDiverged: c.FetchDiverged.Load(), FetchAmbiguous: c.FetchAmbiguous.Load(),
		ProviderNotLeader: c.ProviderNotLeader.Load(),
	}
	if in.src.Reloads != nil {
		m.ModulesLoaded, m.ModulesRefused = in.src.Reloads()
	}
	return m
}

// LastHour is the bot's activity in each minute of the last hour, oldest
// first, the current (partial) minute last: inbound messages journaled,
// turns ended and their p50/p99 duration.
func (in *Observer) LastHour() []Minute { return in.recent.minutes(in.src.Now()) }

// ModuleHistory is the module's changes since the bot started, oldest
// first (the last 50): its load, and each hot reload that went live or was
// refused. A bot given a native guest has none.
func (in *Observer) ModuleHistory() []ModuleChange { return in.src.Modules.List() }

// ModuleDigest is the sha256 digest of the module that runs the bot's
// turns now (after a hot reload, the new one).
func (in *Observer) ModuleDigest() string { return in.src.Digest() }

// OnAlert registers fn for every alert. fn runs synchronously on the
// bot's goroutines: keep it short.
func (in *Observer) OnAlert(fn func(Alert)) { in.src.Alerts.OnAlert(fn) }

// newPanicCounter is botrun_channel_panics_total.
func newPanicCounter() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: "botrun_channel_panics_total",
		Help: "Panics recovered in a channel's loop, webhook handler or input (the input skipped or refused), by channel."}, []string{"channel"})
}

// newSkipCounter is botrun_channel_skipped_total.
func newSkipCounter() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: "botrun_channel_skipped_total",
		Help: "Inputs a channel took and did not admit by design (automatic: an auto-reply, after RFC 3834; sender: an email whose sender is not one From address), by channel and reason."}, []string{"channel", "reason"})
}
