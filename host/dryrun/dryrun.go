// Package dryrun runs journaled inbound records through a candidate module in
// the sandbox and compares what it would send with what the outbox recorded,
// record by record: a release gate for a bot. Each turn sees the event, clock
// and random bytes it was journaled with, and the state and media answers
// its original turn recorded (host/inputs); nothing is sent and nothing is
// written.
package dryrun

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/host/config"
	"github.com/botrun/botrun/host/inputs"
	"github.com/botrun/botrun/host/internal/answers"
	"github.com/botrun/botrun/host/internal/rules"
	"github.com/botrun/botrun/host/wasm"
	"github.com/botrun/botrun/unit"
)

// Outcome is how a replayed record compares with its original run.
type Outcome string

// Outcomes.
const (
	// Identical: the candidate would send exactly what the outbox recorded
	// (or faults as the original did).
	Identical Outcome = "identical"
	// Changed: it would send something else.
	Changed Outcome = "changed"
	// Fault: it faults (trap, deadline, memory) where the original did not.
	Fault Outcome = "fault"
	// CannotReplay: the record's inputs are not known (Reason says why).
	CannotReplay Outcome = "cannot-replay"
)

// Filter selects the records to replay; zero fields select all.
type Filter struct {
	// Since keeps records admitted at or after it.
	Since time.Time
	// Chat keeps one chat's records.
	Chat string
	// Provider keeps one channel's records.
	Provider string
}

// NewFilter keeps the records of chat and provider ("" for any) admitted
// within since, a duration such as 24h or 7d ("" for any time).
func NewFilter(since, chat, provider string) (Filter, error) {
	f := Filter{Chat: chat, Provider: provider}
	if since != "" {
		d, err := unit.ParseDuration(since)
		if err != nil || d <= 0 {
			return Filter{}, fmt.Errorf("since %q: want a duration such as 24h or 7d", since)
		}
		f.Since = time.Now().Add(-d)
	}
	return f, nil
}

// Options configure a Run.
type Options struct {
	// Journals are the bot's, opened for reading; Kv is its backend's Kv,
	// which holds the API calls' journaled answers (nil: a candidate's API
	// call cannot be answered).
	Journals durability.Journals
	Kv       durability.Kv
	// Config is the bot's: its handler timeout, memory and send limits.
	Config *config.Config
	// Module is the candidate module's bytes; ModuleName names it in
	// messages.
	Module     []byte
	ModuleName string
	Filter     Filter
	// MaxRecords, when positive, caps the records replayed: the newest
	// ones are kept (Report.Capped counts those left out).
	MaxRecords int
	// Workers run records at once (default GOMAXPROCS).
	Workers int
	// Progress, when set, is called after each record with the records
	// done and the total.
	Progress func(done, total int)
	// Logger takes the dry run's warnings about itself (slog.Default()
	// when nil); the candidate's logs are dropped.
	Logger *slog.Logger
}

// OutboxMessage is a send's content as the outbox journals it.
type OutboxMessage = rules.OutboxMessage

// Send is one send: journaled by the original run, or the candidate's.
type Send struct {
	Key string `json:"key"`
	// Derived is true for a key the host derived ("<inbound id>:<n>").
	Derived bool   `json:"derived,omitempty"`
	Chat    string `json:"chat"`
	// At is an enqueued send's hold time (Unix ms), 0 for now.
	At int64 `json:"at,omitempty"`
	OutboxMessage
	// atUnknown: the journal no longer holds the send's hold time (it was
	// tried: the outbox keeps only its next retry time), so At is not
	// compared.
	atUnknown bool
}

// Op is an edit or a typing call the candidate made (not journaled, so not
// compared).
type Op struct {
	Kind    string `json:"kind"`
	Chat    string `json:"chat"`
	Message string `json:"message,omitempty"`
	Text    string `json:"text,omitempty"`
}

// Result is one record's replay.
type Result struct {
	ID       string  `json:"id"`
	Provider string  `json:"provider"`
	Chat     string  `json:"chat"`
	State    string  `json:"state"`
	Outcome  Outcome `json:"outcome"`
	// Reason says why a record cannot be replayed, or what the fault was.
	Reason string `json:"reason,omitempty"`
	// Fault is the candidate's fault kind (trap, deadline, out-of-memory…).
	Fault string `json:"fault,omitempty"`
	// Sent is what the outbox recorded; Would what the candidate would send.
	Sent  []Send `json:"sent"`
	Would []Send `json:"would"`
	Ops   []Op   `json:"ops,omitempty"`
	// MediaStandIn says a media_load got stand-in bytes (see docs/dry-run.md).
	MediaStandIn bool  `json:"media_stand_in,omitempty"`
	CreatedAt    int64 `json:"created_at"`
	// Diff is the unified diff of Sent and Would (changed records).
	Diff string `json:"diff,omitempty"`
}

// Report is a Run's outcome: one Result per record, in admission order.
type Report struct {
	Module  string        `json:"module"`
	Digest  string        `json:"sha256"`
	Results []Result      `json:"-"`
	Elapsed time.Duration `json:"-"`
	// ModuleError says why the candidate did not load (every record then
	// cannot be replayed, and the gate fails).
	ModuleError string `json:"module_error,omitempty"`
	// Capped counts the selected records left out by Options.MaxRecords.
	Capped int `json:"capped,omitempty"`
	// Selected counts the records selected to replay (after the cap);
	// Results holds fewer when the run was stopped.
	Selected int `json:"selected"`
}

// Failed reports whether the candidate changed or faulted on any record, or
// did not load: the gate's verdict.
func (r *Report) Failed() bool {
	if r.ModuleError != "" {
		return true
	}
	for _, res := range r.Results {
		if res.Outcome == Changed || res.Outcome == Fault {
			return true
		}
	}
	return false
}

// Run replays the selected records through the candidate module. An error is
// the journal's (reading the records); a module that does not load makes
// every record one that cannot be replayed.
func Run(ctx context.Context, o Options) (*Report, error) {
	if err := CheckSize(o.ModuleName, int64(len(o.Module))); err != nil {
		return nil, err
	}
	recs, err := selectRecords(ctx, o.Journals.Inbox, o.Filter)
	if err != nil {
		return nil, fmt.Errorf("reading the inbox journal: %w", err)
	}
	rep := &Report{Module: o.ModuleName}
	if o.MaxRecords > 0 && len(recs) > o.MaxRecords {
		rep.Capped, recs = len(recs)-o.MaxRecords, recs[len(recs)-o.MaxRecords:]
	}
	rep.Selected = len(recs)
	// A record's sends are journaled after it (by the clock of the replica
	// that ran it: a margin for clocks that disagree).
	since := int64(0)
	if len(recs) > 0 {
		since = max(recs[0].CreatedAt-clockMargin.Milliseconds(), 0)
	}
	sent, err := outboxByInbound(ctx, o.Journals.Outbox, since)
	if err != nil {
		return nil, fmt.Errorf("reading the outbox journal: %w", err)
	}
	rep.Results = make([]Result, len(recs))
	start := time.Now()
	defer func() { rep.Elapsed = time.Since(start) }()
	for i, r := range recs {
		rep.Results[i] = Result{ID: r.ID, Provider: r.Provider, Chat: r.Chat, State: string(r.State),
			CreatedAt: r.CreatedAt, Sent: sent[r.ID], Would: []Send{}}
		if rep.Results[i].Sent == nil {
			rep.Results[i].Sent = []Send{}
		}
	}
	workers := o.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	secret, err := randomSecret(ctx, o.Journals.State)
	if err != nil {
		return nil, err
	}
	// The candidate compiles in a child process of bounded memory, into a
	// cache of its own (the live bot's, data_dir/wasm-cache, is not the
	// dry run's to write), which the engine then loads.
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	cacheDir, moduleErr, err := precompile(ctx, log, o.ModuleName, o.Module, int64(o.Config.Bot.MaxMemory))
	if err != nil {
		return nil, err
	}
	if cacheDir != "" {
		defer os.RemoveAll(cacheDir)
	}
	engine, err := wasm.NewEngine(ctx, wasm.Config{
		Workers:        workers,
		HandlerTimeout: o.Config.Bot.HandlerTimeout.D(),
		MaxMemory:      int64(o.Config.Bot.MaxMemory),
		RandomSecret:   secret,
		CacheDir:       cacheDir,
		Logger:         quietLogger,
	})
	if err != nil {
		return nil, err
	}
	defer engine.Close(ctx)
	var mod *wasm.Module
	switch {
	case moduleErr != "":
		err = errors.New(moduleErr)
	case cacheDir != "":
		mod, err = loadPrecompiled(ctx, engine, cacheDir, o.ModuleName, o.Module)
		if errors.Is(err, errCacheMissed) {
			return nil, err // not the module's fault
		}
	default:
		mod, err = engine.LoadBytes(ctx, o.ModuleName, o.Module)
	}
	if err != nil && ctx.Err() != nil {
		return nil, fmt.Errorf("loading the candidate: %w", ctx.Err()) // stopped, not the module's fault
	}
	if err != nil {
		rep.ModuleError = err.Error()
		for i := range rep.Results {
			rep.Results[i].Outcome, rep.Results[i].Reason = CannotReplay, "module ABI mismatch: "+err.Error()
		}
		return rep, nil
	}
	rep.Digest = mod.Digest()
	var calls *answers.Journal
	if o.Kv != nil {
		s := o.Config.Bot
		calls = answers.New(o.Kv, durability.Scope{Tenant: s.Tenant, Environment: s.Environment, Bot: s.ID, Connection: s.Connection}.ID()+"/", nil)
	}
	var next, done atomic.Int64
	var wg sync.WaitGroup
	for range min(workers, max(len(recs), 1)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= len(recs) || ctx.Err() != nil {
					return
				}
				replay(ctx, mod, o.Config, calls, &recs[i], &rep.Results[i])
				if ctx.Err() != nil {
					rep.Results[i].Outcome = "" // cut short: not done
					return
				}
				if o.Progress != nil {
					o.Progress(int(done.Add(1)), len(recs))
				}
			}
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		// Stopped: the records done, in admission order.
		done := rep.Results[:0]
		for _, res := range rep.Results {
			if res.Outcome != "" {
				done = append(done, res)
			}
		}
		rep.Results = done
		return rep, err
	}
	return rep, nil
}

// clockMargin is how far behind a replica's clock may be when its sends are
// read by their creation time.
const clockMargin = 10 * time.Minute

// randomSecret reads the bot's random secret, so the guest reads the random
// bytes its original turn read; a bot that has none yet gets zeros.
func randomSecret(ctx context.Context, st durability.StateStore) ([]byte, error) {
	v, ok, err := st.Get(ctx, rules.RandomSecretKey)
	if err != nil {
		return nil, fmt.Errorf("reading the bot's random secret: %w", err)
	}
	if !ok {
		return make([]byte, 32), nil
	}
	return v, nil
}

// selectRecords lists the inbox records f selects, in admission order.
func selectRecords(ctx context.Context, in durability.InboxJournal, f Filter) ([]durability.InboxRecord, error) {
	since := int64(0)
	if !f.Since.IsZero() {
		since = f.Since.UnixMilli()
	}
	// Chat and provider are filtered here, not by List: a filtered List
	// reads a bounded number of index entries, so one of its pages can be
	// empty while later records of the chat exist; an unfiltered page is
	// empty only at the journal's end.
	all, err := listAll(ctx, in.List, durability.ListFilter{Since: since},
		func(r durability.InboxRecord) (string, int64) { return r.ID, r.CreatedAt })
	if err != nil {
		return nil, err
	}
	out := all[:0]
	for _, r := range all {
		if (f.Provider == "" || r.Provider == f.Provider) && (f.Chat == "" || r.Chat == f.Chat) {
			out = append(out, r)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].CreatedAt < out[j].CreatedAt })
	return out, nil
}

// listAll reads every record f selects, page by page: one List reads a
// bounded number of records, so the next page starts at the last one's
// creation time, until a page brings nothing new.
func listAll[R any](ctx context.Context, list func(context.Context, durability.ListFilter) ([]R, error), f durability.ListFilter, key func(R) (string, int64)) ([]R, error) {
	var out []R
	seen := map[string]bool{}
	for {
		page, err := list(ctx, f)
		if err != nil {
			return nil, err
		}
		fresh := 0
		for _, r := range page {
			if id, _ := key(r); !seen[id] {
				seen[id] = true
				out = append(out, r)
				fresh++
			}
		}
		if fresh == 0 {
			return out, nil
		}
		_, f.Since = key(page[len(page)-1])
	}
}

// outboxByInbound lists the outbox once and groups its sends by the inbound
// record that made them, the parts of a split text joined into one send.
func outboxByInbound(ctx context.Context, out durability.OutboxJournal, since int64) (map[string][]Send, error) {
	recs, err := listAll(ctx, out.List, durability.ListFilter{Since: since},
		func(r durability.OutboxRecord) (string, int64) { return r.Key, r.CreatedAt })
	if err != nil {
		return nil, err
	}
	byKey := make(map[string]*durability.OutboxRecord, len(recs))
	for i := range recs {
		byKey[recs[i].Key] = &recs[i]
	}
	// A part's send is its first part's: follow PreviousPart back.
	root := func(r *durability.OutboxRecord) string {
		for i := 0; r.PreviousPart != "" && i < len(recs); i++ {
			p, ok := byKey[r.PreviousPart]
			if !ok {
				break
			}
			r = p
		}
		return r.Key
	}
	sends := map[string]*Send{}
	var order []string
	for i := range recs {
		r := &recs[i]
		if r.Inbound == "" || rules.Internal(r.Provider) {
			continue // not a turn's, or the host's own (an after_send hook's)
		}
		var m OutboxMessage
		if err := json.Unmarshal(r.Payload, &m); err != nil {
			m.Text = fmt.Sprintf("(unreadable payload: %v)", err)
		}
		k := root(r)
		s, ok := sends[k]
		if !ok {
			s = &Send{Key: k, Derived: derivedKey(r.Inbound, k), Chat: r.Chat}
			switch {
			case r.State != durability.OutboxPending || r.Attempts > 0:
				s.atUnknown = true
			case r.RetryAt > r.CreatedAt:
				s.At = r.RetryAt // put with NotBefore: the hold time
			}
			sends[k] = s
			order = append(order, k)
		}
		s.Text += m.Text
		if m.Media != nil {
			s.Media = m.Media
		}
		if len(m.Buttons) > 0 || m.List != nil {
			s.Buttons, s.List = m.Buttons, m.List
		}
	}
	grouped := map[string][]Send{}
	for _, k := range order {
		s := sends[k]
		in := byKey[k].Inbound
		grouped[in] = append(grouped[in], *s)
	}
	return grouped, nil
}

// derivedKey reports whether key is of the form "<inbound>:<n>".
func derivedKey(inbound, key string) bool {
	n, ok := strings.CutPrefix(key, inbound+":")
	if !ok || n == "" {
		return false
	}
	for _, c := range n {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// replay runs one record through mod and fills res.
func replay(ctx context.Context, mod *wasm.Module, cfg *config.Config, calls *answers.Journal, rec *durability.InboxRecord, res *Result) {
	if rec.State == durability.InboxPending || (rec.State == durability.InboxProcessing && len(rec.Inputs) == 0) {
		res.Outcome, res.Reason = CannotReplay, "in flight without inputs (no attempt finished yet)"
		return
	}
	if orig := originalFault(rec); orig == wasm.FaultHost || orig == wasm.FaultCanceled {
		// The host's fault (a journal or channel error, a shutdown) cut the
		// turn short: what it would have read and sent is not known.
		res.Outcome, res.Reason = CannotReplay, fmt.Sprintf("original attempt failed on the host (%s): %s", orig, rec.Error)
		return
	}
	in, err := inputs.Parse(rec.Inputs)
	if err != nil {
		res.Outcome, res.Reason = CannotReplay, err.Error()
		return
	}
	if in.TooLarge {
		res.Outcome, res.Reason = CannotReplay, fmt.Sprintf("inputs too large (over %d bytes): not recorded", inputs.MaxBytes)
		return
	}
	ev, durable, err := rules.ParseJournaled(rec.Payload)
	if err != nil {
		res.Outcome, res.Reason = CannotReplay, err.Error()
		return
	}
	if durable {
		// The journal holds the channel's durable references, the event's
		// own blanked: the live guest saw references its channel's codec
		// rebuilt, which a dry run (no channel) cannot.
		res.Outcome, res.Reason = CannotReplay, "media references: the event's media were journaled as the channel's durable references (durability.inbox.media_refs), which a dry run does not rebuild"
		return
	}
	ev.Attempt = max(rec.Attempts, 1)
	e := newEnv(ev, in, cfg.Bot.MaxSends, cfg.Bot.MaxBroadcast)
	e.answers, e.maxFetches = calls, cfg.Bot.MaxFetches
	if before, _ := mod.Hooks(); before {
		e.hooks = mod
	}
	herr := mod.Handle(ctx, ev, e)
	res.Would, res.Ops, res.MediaStandIn = e.sends, e.opsLog, e.standIn
	if res.Would == nil {
		res.Would = []Send{}
	}
	if e.newCall != "" {
		res.Outcome, res.Reason = CannotReplay, "new API call: the candidate made "+e.newCall+", which the original turn did not make (or its API does not journal its answers); a dry run never calls an API"
		return
	}
	if e.unknown != "" {
		res.Outcome, res.Reason = CannotReplay, fmt.Sprintf("unknown input: the candidate read %s, which the original turn did not read (its value then is not known)", e.unknown)
		return
	}
	var fault *wasm.FaultError
	if errors.As(herr, &fault) {
		res.Fault, res.Reason = string(fault.Kind), fault.Error()
		switch orig := originalFault(rec); {
		case orig == fault.Kind:
			res.Outcome = Identical // it faulted so before too
		case orig != "":
			res.Outcome, res.Reason = Fault, fmt.Sprintf("%s (the original faulted with %s)", res.Reason, orig)
		default:
			res.Outcome = Fault
		}
		return
	}
	if herr != nil {
		var he *wasm.HandlerError
		if !errors.As(herr, &he) {
			res.Outcome, res.Reason = CannotReplay, herr.Error()
			return
		}
		res.Reason = "handler error: " + he.Message
	}
	sortSends(res.Sent)
	sortSends(res.Would)
	compareAt(res.Sent, res.Would, ev.ReceivedAt)
	if d := diff(lines(res.Sent), lines(res.Would)); d != "" {
		res.Outcome, res.Diff = Changed, d
		return
	}
	res.Outcome = Identical
}

// compareAt readies the hold times of sent and would for the diff: a hold
// time at or before the event is "now" (the outbox holds such a send until
// it is put), and one the journal no longer knows is not compared.
func compareAt(sent, would []Send, receivedAt int64) {
	unknown := map[string]bool{}
	for i := range sent {
		if sent[i].atUnknown {
			unknown[sent[i].Key] = true
		}
	}
	for i := range would {
		if would[i].At <= receivedAt || unknown[would[i].Key] {
			would[i].At = 0
		}
	}
}

// originalFault is the fault kind of the record's last attempt ("" when it
// did not fault), read from its error.
func originalFault(rec *durability.InboxRecord) wasm.FaultKind {
	if rec.State == durability.InboxDone {
		return ""
	}
	return wasm.FaultKindOf(rec.Error)
}
