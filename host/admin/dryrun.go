package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/host/config"
	"github.com/botrun/botrun/host/dryrun"
)

// dryRunSource is implemented by a Bot whose journals a dry run can read
// (*host.Bot).
type dryRunSource interface {
	DryRunSource() (durability.Journals, *config.Config, durability.Kv)
}

// A console dry run answers within the server's write timeout (60 s) and
// takes a bounded share of the journal: without ?since, the last day's
// records; at most maxConsoleRecords of them (the newest). Variables for
// tests.
var (
	dryRunDeadline    = 45 * time.Second
	maxConsoleRecords = 10_000
)

// defaultDryRunSince is the records a console dry run takes without ?since.
const defaultDryRunSince = "24h"

// maxDryRunResults bounds the records a dry run's answer lists (the changed,
// faulted and unreplayable ones; the summary counts them all).
const maxDryRunResults = 500

// DryRun is the body of POST /admin/replay/dry-run.
type DryRun struct {
	Summary dryrun.Summary `json:"summary"`
	// Digest is the candidate's sha256; ModuleError says why it did not
	// load.
	Digest      string `json:"sha256,omitempty"`
	ModuleError string `json:"module_error,omitempty"`
	// Failed is the gate's verdict: something changed or faulted.
	Failed bool `json:"failed"`
	// Text is the report as botrun replay --dry-run prints it.
	Text string `json:"text"`
	// Results are the records that did not replay identically, up to 500.
	Results   []dryrun.Result `json:"results"`
	Truncated bool            `json:"truncated,omitempty"`
	// Done counts the records replayed, of Selected; Stopped says why a
	// run stopped before the end ("deadline", "draining").
	Done     int    `json:"done"`
	Selected int    `json:"selected"`
	Stopped  string `json:"stopped,omitempty"`
	// Limits say how the run's records were bounded (a default since, the
	// cap on records), in words.
	Limits []string `json:"limits,omitempty"`
}

// dryRuns lets one dry run run at a time: it takes half the cores from the
// live bot while it runs.
var dryRuns sync.Mutex

// dryRun runs the uploaded module (the request body, up to
// dryrun.MaxModuleBytes) against
// the bot's journal: ?since=24h&chat=C&provider=P select the records.
func (a *api) dryRun(w http.ResponseWriter, r *http.Request) {
	src, ok := a.bot.(dryRunSource)
	if !ok {
		http.Error(w, "botrun admin: this bot cannot run dry runs", http.StatusNotImplemented)
		return
	}
	// One at a time, taken before the body is read.
	if !dryRuns.TryLock() {
		http.Error(w, "botrun admin: a dry run is running; try again when it is done", http.StatusConflict)
		return
	}
	defer dryRuns.Unlock()
	q := r.URL.Query()
	var limits []string
	since := q.Get("since")
	if since == "" {
		since = defaultDryRunSince
		limits = append(limits, "records of the last 24h (set since for another window)")
	}
	f, err := dryrun.NewFilter(since, q.Get("chat"), q.Get("provider"))
	if err != nil {
		http.Error(w, "botrun admin: "+err.Error(), http.StatusBadRequest)
		return
	}
	module, err := io.ReadAll(http.MaxBytesReader(w, r.Body, dryrun.MaxModuleBytes))
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		http.Error(w, fmt.Sprintf("botrun admin: the module is over the dry run's cap of %d MiB (a bot module is a few MiB: is this the right file?)", dryrun.MaxModuleBytes>>20), http.StatusRequestEntityTooLarge)
		return
	case err != nil:
		http.Error(w, "botrun admin: reading the module: "+err.Error(), http.StatusBadRequest)
		return
	case len(module) == 0:
		http.Error(w, "botrun admin: no module: send the .wasm file as the request body", http.StatusBadRequest)
		return
	}
	j, cfg, kv := src.DryRunSource()
	name := strings.TrimSpace(q.Get("name"))
	if name == "" {
		name = "uploaded module"
	}
	// The run stops at its deadline (to answer before the server's write
	// timeout) or when the bot drains.
	ctx, cancel := context.WithTimeout(r.Context(), dryRunDeadline)
	defer cancel()
	draining := make(chan bool, 1)
	go func() {
		select {
		case <-a.bot.Draining():
			draining <- true
			cancel()
		case <-ctx.Done():
		}
	}()
	rep, err := dryrun.Run(ctx, dryrun.Options{Journals: j, Kv: kv, Config: cfg, Module: module, ModuleName: name,
		Filter: f, Workers: max(1, runtime.GOMAXPROCS(0)/2), MaxRecords: maxConsoleRecords, Logger: a.bot.Logger()})
	stopped := ""
	if err != nil && ctx.Err() != nil {
		stopped = "deadline"
		select {
		case <-draining:
			stopped = "draining"
		default:
		}
	}
	if err != nil && (rep == nil || stopped == "") {
		msg := "botrun admin: dry run: " + err.Error()
		if stopped != "" {
			msg = fmt.Sprintf("botrun admin: dry run stopped (%s) before any record was replayed: %v", stopped, err)
		}
		http.Error(w, msg, http.StatusServiceUnavailable)
		return
	}
	if rep.Capped > 0 {
		limits = append(limits, fmt.Sprintf("the newest %d records of %d (botrun replay --dry-run replays them all)", rep.Selected, rep.Selected+rep.Capped))
	}
	a.bot.Logger().Info("admin: dry run", "module", name, "sha256", rep.Digest, "records", len(rep.Results), "failed", rep.Failed(), "remote", r.RemoteAddr)
	var text bytes.Buffer
	switch stopped {
	case "deadline":
		fmt.Fprintf(&text, "stopped at its deadline (%s) after %d of %d records: narrow it with since, chat or provider, or run botrun replay --dry-run\n", dryRunDeadline, len(rep.Results), rep.Selected)
	case "draining":
		fmt.Fprintf(&text, "stopped: the bot is draining, after %d of %d records\n", len(rep.Results), rep.Selected)
	}
	for _, l := range limits {
		fmt.Fprintf(&text, "limit: %s\n", l)
	}
	rep.WriteText(&text)
	out := DryRun{Summary: rep.Summary(), Digest: rep.Digest, ModuleError: rep.ModuleError, Failed: rep.Failed(), Text: text.String(), Results: []dryrun.Result{},
		Done: len(rep.Results), Selected: rep.Selected, Stopped: stopped, Limits: limits}
	for _, res := range rep.Results {
		if res.Outcome == dryrun.Identical {
			continue
		}
		if len(out.Results) == maxDryRunResults {
			out.Truncated = true
			break
		}
		out.Results = append(out.Results, res)
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(out)
}
