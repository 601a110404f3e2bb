package admin

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/host/config"
	"github.com/botrun/botrun/host/dryrun"
	"github.com/botrun/botrun/unit"
)

// dryRunSource is implemented by a Bot whose journals a dry run can read
// (*host.Bot).
type dryRunSource interface {
	DryRunSource() (durability.Journals, *config.Config)
}

// maxDryRunModule caps the module a dry run accepts.
const maxDryRunModule = 64 << 20

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
}

// dryRuns lets one dry run run at a time: it takes half the cores from the
// live bot while it runs.
var dryRuns sync.Mutex

// dryRun runs the uploaded module (the request body, up to 64 MiB) against
// the bot's journal: ?since=24h&chat=C&provider=P select the records.
func (a *api) dryRun(w http.ResponseWriter, r *http.Request) {
	src, ok := a.bot.(dryRunSource)
	if !ok {
		http.Error(w, "botrun admin: this bot cannot run dry runs", http.StatusNotImplemented)
		return
	}
	q := r.URL.Query()
	f := dryrun.Filter{Chat: q.Get("chat"), Provider: q.Get("provider")}
	if s := q.Get("since"); s != "" {
		d, err := unit.ParseDuration(s)
		if err != nil || d <= 0 {
			http.Error(w, "botrun admin: since "+s+": want a duration such as 24h or 7d", http.StatusBadRequest)
			return
		}
		f.Since = time.Now().Add(-d)
	}
	module, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxDryRunModule))
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		http.Error(w, "botrun admin: the module is over 64 MiB", http.StatusRequestEntityTooLarge)
		return
	case err != nil:
		http.Error(w, "botrun admin: reading the module: "+err.Error(), http.StatusBadRequest)
		return
	case len(module) == 0:
		http.Error(w, "botrun admin: no module: send the .wasm file as the request body", http.StatusBadRequest)
		return
	}
	if !dryRuns.TryLock() {
		http.Error(w, "botrun admin: a dry run is running; try again when it is done", http.StatusConflict)
		return
	}
	defer dryRuns.Unlock()
	j, cfg := src.DryRunSource()
	name := strings.TrimSpace(q.Get("name"))
	if name == "" {
		name = "uploaded module"
	}
	rep, err := dryrun.Run(r.Context(), dryrun.Options{Journals: j, Config: cfg, Module: module, ModuleName: name,
		Filter: f, Workers: max(1, runtime.GOMAXPROCS(0)/2)})
	if err != nil {
		http.Error(w, "botrun admin: dry run: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	a.bot.Logger().Info("admin: dry run", "module", name, "sha256", rep.Digest, "records", len(rep.Results), "failed", rep.Failed(), "remote", r.RemoteAddr)
	var text bytes.Buffer
	rep.WriteText(&text)
	out := DryRun{Summary: rep.Summary(), Digest: rep.Digest, ModuleError: rep.ModuleError, Failed: rep.Failed(), Text: text.String(), Results: []dryrun.Result{}}
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
