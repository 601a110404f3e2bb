package config

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	// The built-in channels and backends, as cmd/botrun registers them.
	_ "github.com/botrun/botrun/cmd/botrun/builtin"
	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/channel/discord"
	"github.com/botrun/botrun/host/channel/metawhatsapp"
	"github.com/botrun/botrun/host/channel/twilio"
	"github.com/botrun/botrun/host/channel/webchat"
)

var update = flag.Bool("update", false, "rewrite the golden error files")

func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestMinimalDefaults(t *testing.T) {
	t.Parallel()
	cfg, err := Load("testdata/good/minimal.toml")
	if err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	d := cfg.Durability
	checks := []struct {
		name      string
		got, want any
	}{
		{"bot.id", cfg.Bot.ID, "bot"},
		{"bot.tenant", cfg.Bot.Tenant, ""},
		{"bot.environment", cfg.Bot.Environment, ""},
		{"bot.connection", cfg.Bot.Connection, "default"},
		{"bot.module", cfg.Bot.Module, filepath.Join("testdata", "good", "bot.wasm")},
		{"bot.workers", cfg.Bot.Workers, 64},
		{"bot.instances", cfg.Bot.Instances, 8},
		{"bot.handler_timeout", cfg.Bot.HandlerTimeout.D(), 10 * time.Second},
		{"bot.max_memory", int64(cfg.Bot.MaxMemory), int64(64 << 20)},
		{"bot.max_chat_state", int64(cfg.Bot.MaxChatState), int64(4 << 20)},
		{"bot.data_dir", cfg.Bot.DataDir, filepath.Join("testdata", "good", "data")},
		{"http.listen", cfg.HTTP.Listen, "127.0.0.1:8080"},
		{"durability.backend", d.Backend, "memory"},
		{"durability.instance_id", d.InstanceID, host + "/bot/default"},
		{"durability.fail_open", d.FailOpen, false},
		{"durability.poll", d.Poll.D(), time.Second},
		{"durability.retention", d.Retention.D(), 7 * 24 * time.Hour},
		{"durability.inbox.lease", d.Inbox.Lease.D(), 60 * time.Second},
		{"durability.inbox.max_attempts", d.Inbox.MaxAttempts, 5},
		{"durability.inbox.backoff.base", d.Inbox.Backoff.Base.D(), time.Second},
		{"durability.inbox.backoff.cap", d.Inbox.Backoff.Cap.D(), time.Minute},
		{"durability.inbox.backoff.jitter", *d.Inbox.Backoff.Jitter, 0.2},
		{"durability.inbox.media_refs", *d.Inbox.MediaRefs, true},
		{"durability.outbox.retries", *d.Outbox.Retries, 5},
		{"durability.outbox.backoff.base", d.Outbox.Backoff.Base.D(), time.Second},
		{"durability.outbox.inline_max", d.Outbox.InlineMax.D(), 15 * time.Second},
		{"durability.outbox.on_ambiguous", d.Outbox.OnAmbiguous, "skip"},
		{"durability.outbox.on_diverged", d.Outbox.OnDiverged, "send"},
		{"durability.outbox.max_payload_bytes", int64(*d.Outbox.MaxPayloadBytes), int64(1 << 20)},
		{"durability.outbox.lease", d.Outbox.Lease.D(), 60 * time.Second},
		{"providers", len(cfg.Channels), 1},
		{"providers[0].session", cfg.Channels[0].Session, "every"},
		{"providers[0].session_lease", cfg.Channels[0].SessionLease.D(), 30 * time.Second},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	if w, ok := cfg.Channels[0].Settings.(*webchat.Config); !ok || cfg.Channels[0].ID != "web" || cfg.Channels[0].Type != "webchat" || w.ID != "web" {
		t.Errorf("provider = %#v", cfg.Channels[0])
	}
}

// TestSessionDefaults: a leader-only channel type leads by default; any
// entry may ask for a leader.
func TestSessionDefaults(t *testing.T) {
	t.Parallel()
	src := "[bot]\nmodule = \"b.wasm\"\n[durability]\nbackend = \"sqlite\"\npath = \"bot.db\"\n" +
		"[[providers]]\nid = \"wa\"\ntype = \"whatsapp-web\"\n" +
		"[[providers]]\nid = \"gw\"\ntype = \"http\"\nurl = \"https://gw.example/send\"\nsecret = \"0123456789abcdef\"\nsession = \"leader\"\nsession_lease = \"5s\"\n" +
		// WPPConnect's session key is its session's name.
		"[[providers]]\nid = \"wpp\"\ntype = \"wppconnect\"\napi_url = \"https://wpp.example\"\ntoken = \"t\"\nsession = \"botrun\"\nwebhook_token = \"0123456789abcdef\"\n"
	cfg, err := Parse("bot.toml", src, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []struct {
		session string
		lease   time.Duration
	}{{"leader", 30 * time.Second}, {"leader", 5 * time.Second}, {"every", 30 * time.Second}} {
		if p := cfg.Channels[i]; p.Session != want.session || p.SessionLease.D() != want.lease {
			t.Errorf("providers[%d]: session %q, lease %s; want %q, %s", i, p.Session, p.SessionLease.D(), want.session, want.lease)
		}
	}
}

func TestFullFile(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile("testdata/good/full.toml")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := Parse("/etc/botrun/full.toml", string(src), env(map[string]string{"PORT": "9090"}))
	if err != nil {
		t.Fatal(err)
	}
	d := cfg.Durability
	checks := []struct {
		name      string
		got, want any
	}{
		{"bot.module absolute", cfg.Bot.Module, "/abs/bot.wasm"},
		{"bot.data_dir relative to file", cfg.Bot.DataDir, "/etc/botrun/state"},
		{"bot.handler_timeout ms", cfg.Bot.HandlerTimeout.D(), 2500 * time.Millisecond},
		{"bot.max_memory MiB", int64(cfg.Bot.MaxMemory), int64(128 << 20)},
		{"bot.max_chat_state", int64(cfg.Bot.MaxChatState), int64(16 << 20)},
		{"bot.hot_reload", cfg.Bot.HotReload, true},
		{"http.listen expanded", cfg.HTTP.Listen, "0.0.0.0:9090"},
		{"durability.path", reflect.ValueOf(d.Options).Elem().FieldByName("Path").String(), "/etc/botrun/data/bot.db"},
		{"durability.retention days", d.Retention.D(), 14 * 24 * time.Hour},
		{"inbox.backoff inline table", d.Inbox.Backoff.Base.D(), 500 * time.Millisecond},
		{"outbox.backoff inherits inbox", d.Outbox.Backoff.Base.D(), 500 * time.Millisecond},
		{"outbox.backoff jitter inherits", *d.Outbox.Backoff.Jitter, 0.1},
		{"outbox.retries zero kept", *d.Outbox.Retries, 0},
		{"outbox.lease 20ms allowed", d.Outbox.Lease.D(), 20 * time.Millisecond},
		{"media_refs false kept", *d.Inbox.MediaRefs, false},
		{"providers", len(cfg.Channels), 4},
		{"admin.token", cfg.Admin.Token, "an-admin-token-of-24-chars"},
		{"admin.listen", cfg.Admin.Listen, "127.0.0.1:9091"},
		{"admin.metrics_public", cfg.Admin.MetricsPublic, true},
		{"tracing.otlp_endpoint", cfg.Tracing.OTLPEndpoint, "http://127.0.0.1:4318/v1/traces"},
		{"tracing.service_name default", cfg.Tracing.ServiceName, "botrun"},
		{"tracing.sample_ratio", *cfg.Tracing.SampleRatio, 0.25},
		{"webchat allow_public", cfg.Channels[0].Settings.(*webchat.Config).AllowPublic, true},
		{"webchat rate_limit", cfg.Channels[0].Settings.(*webchat.Config).RateLimit, 5.0},
		{"webchat burst", cfg.Channels[0].Settings.(*webchat.Config).Burst, 10},
		{"webchat default burst", cfg.Channels[1].Settings.(*webchat.Config).Burst, 100},
		{"meta-whatsapp keys", *cfg.Channels[2].Settings.(*metawhatsapp.Config), metawhatsapp.Config{ID: "wa",
			Token: "EAAG-token", AppSecret: "app-secret", VerifyToken: "verify-me", PhoneNumberID: "1098765", APIURL: "http://127.0.0.1:9/v21.0"}},
		{"twilio keys", *cfg.Channels[3].Settings.(*twilio.Config), twilio.Config{ID: "sms",
			AccountSID: "AC0123456789abcdef0123456789abcdef", AuthToken: "auth-token", From: "+15550001111", PublicURL: "https://bot.example.com/webhooks/sms"}},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
}

// TestBadFiles compares each bad file's errors with its golden file
// (go test ./host/config -update rewrites them).
func TestBadFiles(t *testing.T) {
	t.Parallel()
	files, _ := filepath.Glob("testdata/bad/*.toml")
	if len(files) == 0 {
		t.Fatal("no bad files")
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			_, err = Parse(f, string(src), env(nil))
			var errs Errors
			if !errors.As(err, &errs) {
				t.Fatalf("err = %v, want config.Errors", err)
			}
			// The registered channel types and backends change as they are
			// added: the golden files name them as placeholders.
			got := strings.ReplaceAll(err.Error()+"\n", strings.Join(channel.Types(), ", "), "<registered types>")
			got = strings.ReplaceAll(got, strings.Join(durability.Drivers(), ", "), "<registered backends>")
			golden := strings.TrimSuffix(f, ".toml") + ".golden"
			if *update {
				os.WriteFile(golden, []byte(got), 0o644)
			}
			want, _ := os.ReadFile(golden)
			if got != string(want) {
				t.Fatalf("errors:\n%s\nwant (%s):\n%s", got, golden, want)
			}
		})
	}
}

// TestPlainHTTPAPIURLRefused: a channel's credentials travel with every API
// call, so api_url must be https unless it stays on this machine.
func TestPlainHTTPAPIURLRefused(t *testing.T) {
	t.Parallel()
	channels := map[string]string{
		"telegram":      "token = \"1:x\"\nmode = \"poll\"",
		"meta-whatsapp": "token = \"t\"\napp_secret = \"s\"\nverify_token = \"v\"\nphone_number_id = \"1\"",
		"twilio":        "account_sid = \"AC0123456789abcdef0123456789abcdef\"\nauth_token = \"a\"\nfrom = \"+1555\"\npublic_url = \"https://b.example/webhooks/p\"",
	}
	for typ, keys := range channels {
		for api, ok := range map[string]bool{
			"http://api.example.com":  false,
			"http://10.0.0.7:8081":    false,
			"http://0.0.0.0:8081":     false,
			"https://api.example.com": true,
			"http://127.0.0.1:8081/x": true,
			"http://localhost:8081":   true,
			"http://[::1]:8081/v21.0": true,
		} {
			src := fmt.Sprintf("[bot]\nmodule = \"b.wasm\"\n[[channels]]\nid = \"p\"\ntype = %q\n%s\napi_url = %q\n", typ, keys, api)
			_, err := Parse("bot.toml", src, env(nil))
			at := fmt.Sprintf("bot.toml:%d: channels[0].api_url:", strings.Count(src[:strings.Index(src, "api_url")], "\n")+1)
			switch {
			case ok && err != nil:
				t.Errorf("%s api_url %s refused: %v", typ, api, err)
			case !ok && (err == nil || !strings.Contains(err.Error(), at) || !strings.Contains(err.Error(), "use https")):
				t.Errorf("%s api_url %s: err %v, want %s refusing plain http", typ, api, err, at)
			}
		}
	}
}

// TestWebchatExposureRefusedOnPublicListen: the webchat has no
// authentication; on a non-loopback listen it needs allow_public.
func TestWebchatExposureRefusedOnPublicListen(t *testing.T) {
	t.Parallel()
	for listen, ok := range map[string]bool{"127.0.0.1:8080": true, "localhost:8080": true, "[::1]:8080": true,
		"0.0.0.0:8080": false, ":8080": false, "192.168.1.5:8080": false} {
		for _, public := range []bool{false, true} {
			src := fmt.Sprintf("[bot]\nmodule = \"b.wasm\"\n[http]\nlisten = %q\n[[providers]]\nid = \"web\"\ntype = \"webchat\"\nallow_public = %v\n", listen, public)
			_, err := Parse("bot.toml", src, env(nil))
			if want := ok || public; (err == nil) != want {
				t.Errorf("listen %s allow_public %v: err %v", listen, public, err)
			} else if err != nil && !strings.Contains(err.Error(), "bot.toml:8: providers[0].allow_public: webchat \"web\" has no authentication") {
				t.Errorf("listen %s: %v", listen, err)
			}
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, p := range []string{"testdata/good/full.toml", "testdata/bad/values.toml", "testdata/bad/unknown-keys.toml"} {
		b, _ := os.ReadFile(p)
		f.Add(string(b))
	}
	f.Fuzz(func(t *testing.T, src string) {
		cfg, err := Parse("fuzz.toml", src, env(nil))
		if err == nil && (cfg.Bot.Module == "" || len(cfg.Channels) == 0) {
			t.Fatalf("accepted a config without module or providers")
		}
	})
}

// TestAlertsAndTracingSections checks the [alerts] and [tracing] keys.
func TestAlertsAndTracingSections(t *testing.T) {
	t.Parallel()
	base := "[bot]\nmodule = \"b.wasm\"\n[[providers]]\nid = \"web\"\ntype = \"webchat\"\n"
	for src, want := range map[string]string{
		"[alerts]\nurl = \"https://ops.example/a\"\nsecret = \"0123456789abcdef\"\n":                      "",
		"[alerts]\nurl = \"https://ops.example/a\"\n":                                                     "alerts.secret: missing or shorter than 16 characters",
		"[alerts]\nsecret = \"0123456789abcdef\"\n":                                                       "alerts.url: missing",
		"[alerts]\nurl = \"http://ops.example/a\"\nsecret = \"0123456789abcdef\"\n":                       "is plain http to another machine",
		"[tracing]\notlp_endpoint = \"https://otel.internal:4318/v1/traces\"\nservice_name = \"bot-a\"\n": "",
		"[tracing]\notlp_endpoint = \"otel:4318\"\n":                                                      "tracing.otlp_endpoint: \"otel:4318\": want the collector's OTLP/HTTP URL",
		"[tracing]\nsample_ratio = 1.5\n":                                                                 "tracing.sample_ratio: 1.5: want a share between 0 and 1",
	} {
		_, err := Parse("bot.toml", base+src, env(nil))
		switch {
		case want == "" && err != nil:
			t.Errorf("%q: %v", src, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("%q: err %v, want %q", src, err, want)
		}
	}
}

// TestEventsBackend: the events backend's keys, its shared flag (which
// gives the default instance id a per-boot suffix) and its problems.
func TestEventsBackend(t *testing.T) {
	t.Parallel()
	base := "[bot]\nmodule = \"b.wasm\"\n[[providers]]\nid = \"web\"\ntype = \"webchat\"\n[durability]\nbackend = \"events\"\n"
	for shared, suffixed := range map[string]bool{"": false, "shared = false\n": false, "shared = true\n": true} {
		cfg, err := Parse("/srv/bot.toml", base+"path = \"data/events.json\"\n"+shared, env(nil))
		if err != nil {
			t.Fatalf("%q: %v", shared, err)
		}
		d := cfg.Durability
		if d.Shared != suffixed || strings.HasSuffix(d.InstanceID, "/"+bootID) != suffixed {
			t.Errorf("%q: shared %v, instance id %q", shared, d.Shared, d.InstanceID)
		}
		if p := reflect.ValueOf(d.Options).Elem().FieldByName("Path").String(); p != "/srv/data/events.json" {
			t.Errorf("path = %s", p)
		}
	}
	for keys, want := range map[string]string{
		"": `bot.toml:6: durability.path: missing: the events backend needs the events journal's file`,
		"path = \"e.json\"\nstale_lock = \"10ms\"":         `durability.stale_lock: 10ms is below 1s`,
		"path = \"e.json\"\nheartbeat = \"40s\"":           `durability.heartbeat: 40s must be below stale_lock (30s)`,
		"path = \"e.json\"\noutbox_backend = \"redis\"":    `durability.outbox_backend: unknown value "redis" (want postgres`,
		"path = \"e.json\"\noutbox_backend = \"postgres\"": `durability.outbox_url: missing: outbox_backend = "postgres" needs a connection URL`,
		"path = \"e.json\"\noutbox_url = \"postgres://x\"": `durability.outbox_url: set without outbox_backend`,
		"path = \"e.json\"\ncompact_every = 0":             `durability.compact_every: 0 must be at least 1`,
	} {
		_, err := Parse("bot.toml", base+keys, env(nil))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %s", keys, err, want)
		}
	}
}

// TestRedisClusterKeys: the redis backend's cluster key (seed addresses or
// redis:// URLs) and its problems, each naming the key and the way out.
func TestRedisClusterKeys(t *testing.T) {
	t.Parallel()
	base := "[bot]\nmodule = \"b.wasm\"\n[[providers]]\nid = \"web\"\ntype = \"webchat\"\n[durability]\nbackend = \"redis\"\n"
	for _, keys := range []string{
		"cluster = [\"10.0.0.1:6379\", \"10.0.0.2:6379\"]",
		"cluster = [\"redis://:pw@10.0.0.1:6379\", \"rediss://10.0.0.2:6380\"]\nwait_replicas = 0\nwait_timeout = \"200ms\"",
	} {
		if _, err := Parse("bot.toml", base+keys, env(nil)); err != nil {
			t.Errorf("%q: %v", keys, err)
		}
	}
	for keys, want := range map[string]string{
		"url = \"redis://h/0\"\ncluster = [\"h:6379\"]": `durability.cluster: set with url: use url for one Redis node or cluster for a Redis Cluster's seed nodes, not both`,
		"cluster = []":                  `durability.cluster: empty: list at least one seed node`,
		"cluster = [\"h\"]":             `durability.cluster: "h" is not host:port`,
		"cluster = [\"h:port\"]":        `durability.cluster: "h:port": port "port" is not a number`,
		"cluster = [\"redis://h:1/2\"]": `a cluster has only database 0: drop the /2`,
		"":                              `durability.url: missing: the redis backend needs a connection URL, e.g. "redis://127.0.0.1:6379/0", or cluster = ["host:port", …]`,
		"cluster = [\"h:1\"]\nwait_replicas = -1": `durability.wait_replicas: -1 is negative`,
	} {
		_, err := Parse("bot.toml", base+keys, env(nil))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %s", keys, err, want)
		}
	}
}

// TestCoordinationBackends: coordination is accepted on the backends that
// replicas on several hosts share, and refused on the others with the way
// out.
func TestCoordinationBackends(t *testing.T) {
	t.Parallel()
	for backend, ok := range map[string]bool{
		"postgres": true, "redis": true, "sqlite": false, "file": false, "memory": false, "events": false,
	} {
		key := map[string]string{"postgres": "url = \"postgres://h/db\"", "redis": "url = \"redis://h/0\"", "memory": "fail_open = false"}[backend]
		if key == "" {
			key = "path = \"x.db\""
		}
		src := fmt.Sprintf("[bot]\nmodule = \"b.wasm\"\n[durability]\nbackend = %q\n%s\ncoordination = true\n[[providers]]\nid = \"web\"\ntype = \"webchat\"\n", backend, key)
		cfg, err := Parse("bot.toml", src, env(nil))
		switch {
		case ok && (err != nil || !cfg.Durability.Coordination):
			t.Errorf("%s: coordination refused: %v", backend, err)
		case !ok && (err == nil || !strings.Contains(err.Error(), "bot.toml:6: durability.coordination:") || !strings.Contains(err.Error(), "postgres, redis")):
			t.Errorf("%s: err %v, want durability.coordination refused at line 6 naming postgres and redis", backend, err)
		}
	}
}

// TestDiscordMediaRefHosts: Discord takes media_ref_hosts like the other
// channels whose media references are URLs, checked the same way.
func TestDiscordMediaRefHosts(t *testing.T) {
	t.Parallel()
	entry := "[bot]\nmodule = \"b.wasm\"\n[[providers]]\nid = \"dc\"\ntype = \"discord\"\ntoken = \"t\"\napplication_id = \"1100000000000000000\"\n"
	cfg, err := Parse("bot.toml", entry+"media_ref_hosts = [\"files.example.com\"]\n", env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Channels[0].Settings.(*discord.Config).MediaRefHosts; !slices.Equal(got, []string{"files.example.com"}) {
		t.Fatalf("media_ref_hosts = %v", got)
	}
	_, err = Parse("bot.toml", entry+"media_ref_hosts = [\"https://files.example.com\"]\n", env(nil))
	if err == nil || !strings.Contains(err.Error(), "bot.toml:8: providers[0].media_ref_hosts[0]: \"https://files.example.com\" is not a host name") {
		t.Fatalf("a URL in media_ref_hosts: %v", err)
	}
}

// TestChannelsAndTheirOldName: [[channels]] is the section; [[providers]],
// its old name, is still read with a deprecation that names the line and
// the way out, and keys in errors follow the name the file used; a file
// with both is refused.
func TestChannelsAndTheirOldName(t *testing.T) {
	t.Parallel()
	entry := "id = \"web\"\ntype = \"webchat\"\n"
	cfg, err := Parse("bot.toml", "[bot]\nmodule = \"b.wasm\"\n[[channels]]\n"+entry, env(nil))
	if err != nil || len(cfg.Channels) != 1 || cfg.Channels[0].ID != "web" || len(cfg.Deprecations) != 0 {
		t.Fatalf("[[channels]]: %+v, %v", cfg, err)
	}
	cfg, err = Parse("bot.toml", "[bot]\nmodule = \"b.wasm\"\n[[providers]]\n"+entry, env(nil))
	if err != nil || len(cfg.Channels) != 1 {
		t.Fatalf("[[providers]]: %v", err)
	}
	if len(cfg.Deprecations) != 1 || !strings.Contains(cfg.Deprecations[0], "bot.toml:3: [[providers]] is deprecated: rename it to [[channels]]") {
		t.Errorf("deprecations %q", cfg.Deprecations)
	}
	_, err = Parse("bot.toml", "[bot]\nmodule = \"b.wasm\"\n[[providers]]\nid = \"Web!\"\ntype = \"webchat\"\n", env(nil))
	if err == nil || !strings.Contains(err.Error(), "bot.toml:4: providers[0].id:") {
		t.Errorf("an error in [[providers]] names channels, not the file's words: %v", err)
	}
	_, err = Parse("bot.toml", "[bot]\nmodule = \"b.wasm\"\n[[channels]]\n"+entry+"[[providers]]\nid = \"w2\"\ntype = \"webchat\"\n", env(nil))
	if err == nil || !strings.Contains(err.Error(), "has both: rename every [[providers]] to [[channels]]") {
		t.Errorf("both sections: %v", err)
	}
}

// TestEnvInAChannelEntry: ${VAR} is expanded in a channel's own keys, under
// [[channels]] and under its old name.
func TestEnvInAChannelEntry(t *testing.T) {
	t.Parallel()
	for _, section := range []string{"channels", "providers"} {
		src := "[bot]\nmodule = \"b.wasm\"\n[[" + section + "]]\nid = \"tg\"\ntype = \"telegram\"\ntoken = \"${TG_TOKEN}\"\nmode = \"poll\"\n"
		cfg, err := Parse("bot.toml", src, env(map[string]string{"TG_TOKEN": "123:secret"}))
		if err != nil {
			t.Fatalf("[[%s]]: %v", section, err)
		}
		if got := reflect.ValueOf(cfg.Channels[0].Settings).Elem().FieldByName("Token").String(); got != "123:secret" {
			t.Errorf("[[%s]]: token %q, want the variable's value", section, got)
		}
	}
}

// TestAPIs: an [[apis]] entry's defaults, ${ENV} in its headers, an API on
// this machine or a private network allowed with allow_private, and a
// public one on plain http with allow_http.
func TestAPIs(t *testing.T) {
	t.Parallel()
	src := `[bot]
module = "b.wasm"
[[channels]]
id = "web"
type = "webchat"

[[apis]]
name = "llm"
url = "http://127.0.0.1:11434/v1"
headers = { Authorization = "Bearer ${LLM_KEY}" }
allow_private = true

[[apis]]
name = "crm"
url = "http://10.0.0.5:8080"
allow_private = true
timeout = "30s"
max_response = "4MiB"
retries = 0
journal = false

[[apis]]
name = "legacy"
url = "http://legacy.example.com/api"
allow_http = true
`
	cfg, err := Parse("bot.toml", src, env(map[string]string{"LLM_KEY": "sk-secret"}))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Bot.MaxFetches != 16 || cfg.Bot.MaxFetchWait.D() != 2*time.Minute {
		t.Errorf("bot.max_fetches %d, max_fetch_wait %s; want 16 and 2m", cfg.Bot.MaxFetches, cfg.Bot.MaxFetchWait.D())
	}
	llm, crm := cfg.APIs[0], cfg.APIs[1]
	if llm.Headers["Authorization"] != "Bearer sk-secret" {
		t.Errorf("headers: %q, want ${LLM_KEY} expanded", llm.Headers["Authorization"])
	}
	if llm.Timeout.D() != 10*time.Second || llm.MaxResponse != 1<<20 || *llm.Retries != 2 || !*llm.Journal {
		t.Errorf("llm defaults: %+v", llm)
	}
	if crm.Timeout.D() != 30*time.Second || crm.MaxResponse != 4<<20 || *crm.Retries != 0 || *crm.Journal || !crm.AllowPrivate {
		t.Errorf("crm: %+v", crm)
	}
	// Plain http to a public API with allow_http: private destinations
	// stay refused (allow_private is still false).
	if legacy := cfg.APIs[2]; !legacy.AllowHTTP || legacy.AllowPrivate {
		t.Errorf("legacy: %+v", legacy)
	}
	_, err = Parse("bot.toml", src, env(nil))
	if err == nil || !strings.Contains(err.Error(), "bot.toml:10: apis[0].headers.Authorization: environment variable LLM_KEY is not set") {
		t.Errorf("unset ${LLM_KEY}: %v", err)
	}
}
