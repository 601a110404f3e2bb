package admin

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/botrun/botrun/host"
	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/internal/waitfor"
)

// flowed admits one message and waits until its turn is counted: the send
// went dead (the channel refuses it), the turn finished and the queue
// depths (read at most every second while records move) show the dead send.
func flowed(t *testing.T, b *host.Bot, srv *httptest.Server) string {
	t.Helper()
	if _, err := b.Admit(context.Background(), "web", channel.Message{ID: "m1", Chat: "c1", Text: "hola"}); err != nil {
		t.Fatal(err)
	}
	var body string
	if !waitfor.True(2*time.Minute, func() bool {
		_, body = call(t, "GET", srv.URL+"/admin/metrics", token)
		return strings.Contains(body, "botrun_turn_seconds_count 1\n") && strings.Contains(body, "botrun_outbox_dead_total 1\n") &&
			strings.Contains(body, `botrun_outbox_records{state="dead"} 1`+"\n")
	}) {
		t.Fatalf("the turn is not counted after 2 minutes:\n%s", body)
	}
	return body
}

// TestMetricsHistogramsAndGauges checks a message shows in the latency
// histograms, the queue depths and the Go runtime metrics, and that the
// counters keep their names and types.
func TestMetricsHistogramsAndGauges(t *testing.T) {
	b, _, srv := setup(t, token)
	body := flowed(t, b, srv)
	for _, want := range []string{
		"# TYPE botrun_inbound_journaled_total counter\nbotrun_inbound_journaled_total 1\n",
		"# TYPE botrun_admission_seconds histogram\n",
		"botrun_admission_seconds_count 1\n",
		"botrun_guest_seconds_count 1\n",
		`botrun_send_seconds_count{provider="web"} 1` + "\n",
		`botrun_outbox_records{state="dead"} 1` + "\n",
		`botrun_inbox_records{state="queued"} 0` + "\n",
		`botrun_guest_instances{state="idle"} 1` + "\n",
		"# TYPE botrun_journal_commit_seconds histogram\n",
		"# TYPE botrun_journal_commit_batch_size histogram\n",
		"go_goroutines ",
		"process_cpu_seconds_total ",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	if t.Failed() {
		t.Logf("metrics:\n%s", body)
	}
}

// TestMetricsPublic serves the metrics without the token, and nothing else.
func TestMetricsPublic(t *testing.T) {
	_, _, srv := setup(t, token)
	if code, _ := call(t, "GET", srv.URL+"/admin/metrics", ""); code != http.StatusUnauthorized {
		t.Fatalf("metrics without the token and metrics_public off: HTTP %d, want 401", code)
	}
	b, _, _ := setup(t, token)
	mux := http.NewServeMux()
	RoutesWith(mux, b, Options{Token: token, MetricsPublic: true})
	pub := httptest.NewServer(mux)
	defer pub.Close()
	if code, body := call(t, "GET", pub.URL+"/admin/metrics", ""); code != 200 || !strings.Contains(body, "botrun_inbound_journaled_total 0\n") {
		t.Fatalf("public metrics: HTTP %d\n%s", code, body)
	}
	for _, ep := range []string{"/admin/inbox", "/admin/status"} {
		if code, _ := call(t, "GET", pub.URL+ep, ""); code != http.StatusUnauthorized {
			t.Errorf("%s without the token under metrics_public: HTTP %d, want 401", ep, code)
		}
	}
}

// metricName finds the metric names in a PromQL expression: botrun's own,
// Go's runtime and the process's.
var metricName = regexp.MustCompile(`\b(?:botrun|go|process)_[a-zA-Z0-9_]+`)

// TestDashboard checks deploy/grafana/botrun.json is valid JSON whose
// every query names only metrics botrun exports, as gathered from a bot
// after a message flowed.
func TestDashboard(t *testing.T) {
	src, err := os.ReadFile("../../deploy/grafana/botrun.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash any
	if err := json.Unmarshal(src, &dash); err != nil {
		t.Fatalf("deploy/grafana/botrun.json is not valid JSON: %v", err)
	}
	b, _, srv := setup(t, token)
	flowed(t, b, srv)
	families, err := b.Observer().Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	exported := map[string]bool{}
	for _, f := range families {
		n := f.GetName()
		exported[n] = true
		switch f.GetType() {
		case dto.MetricType_HISTOGRAM:
			exported[n+"_bucket"], exported[n+"_sum"], exported[n+"_count"] = true, true, true
		case dto.MetricType_SUMMARY:
			exported[n+"_sum"], exported[n+"_count"] = true, true
		}
	}
	var exprs []string
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				if s, ok := x.(string); ok && (k == "expr" || (k == "query" && strings.Contains(s, "("))) {
					exprs = append(exprs, s)
				}
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(dash)
	if len(exprs) < 10 {
		t.Fatalf("the dashboard has %d queries; want its panels' (a parse went wrong?)", len(exprs))
	}
	var used []string
	for _, e := range exprs {
		names := metricName.FindAllString(e, -1)
		if len(names) == 0 {
			t.Errorf("query %q names no botrun, go_ or process_ metric", e)
		}
		for _, n := range names {
			if !exported[n] {
				t.Errorf("query %q names %s, which botrun does not export", e, n)
			}
			used = append(used, n)
		}
	}
	for _, want := range []string{"botrun_turn_seconds_bucket", "botrun_admission_seconds_bucket", "botrun_send_seconds_bucket",
		"botrun_inbox_records", "botrun_outbox_records", "botrun_outbox_ambiguous_total", "botrun_stale_leases_total", "go_goroutines"} {
		if !slices.Contains(used, want) {
			t.Errorf("the dashboard does not chart %s", want)
		}
	}
}

// Instances reports a pool of one instance, as a loaded module does (the
// botrun_guest_instances gauge).
func (echo) Instances() (busy, idle int) { return 0, 1 }
