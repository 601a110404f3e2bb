package observe

import (
	"encoding/json"
	"testing"
)

// TestMetrics_TheSeedsThirteenCounters: the seed's thirteen counters, and
// inbound_refused (admissions refused past bot.max_queue).
func TestMetrics_TheSeedsCountersAndOurs(t *testing.T) {
	b, _ := json.Marshal(Metrics{})
	var m map[string]int64
	json.Unmarshal(b, &m)
	want := []string{"inbound_journaled", "inbound_duplicates", "inbound_replayed", "inbound_dead", "outbox_journaled",
		"outbox_deduped", "outbox_retried", "outbox_deferred", "outbox_dead", "outbox_ambiguous", "outbox_bypassed",
		"stale_leases", "outbox_diverged", "inbound_refused", "modules_loaded", "modules_refused", "replays_on_new_module", "outbox_ambiguous_resolved", "provider_not_leader",
		"fetch_calls", "fetch_failed", "fetch_replayed", "fetch_diverged", "fetch_ambiguous"}
	if len(m) != len(want) {
		t.Fatalf("%d counters: %v", len(m), m)
	}
	for _, k := range want {
		if _, ok := m[k]; !ok {
			t.Fatalf("missing %s", k)
		}
	}
}

// TestMetrics_PrometheusNamesAreTheJSONNames: every counter of the JSON
// metrics is exported to Prometheus as botrun_<its JSON name>_total, and no
// other (the module reload counters were named apart).
func TestMetrics_PrometheusNamesAreTheJSONNames(t *testing.T) {
	b, _ := json.Marshal(Metrics{})
	var m map[string]int64
	json.Unmarshal(b, &m)
	prom := map[string]bool{}
	for _, c := range counterDefs {
		prom[c.name] = true
		if _, ok := m[c.name]; !ok {
			t.Errorf("Prometheus counter botrun_%s_total has no JSON counter %q", c.name, c.name)
		}
	}
	for k := range m {
		if !prom[k] {
			t.Errorf("JSON counter %q is not exported as botrun_%s_total", k, k)
		}
	}
}
