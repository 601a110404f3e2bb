package config

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/channel/httpkit"
)

// Error is one problem in a config file, at a line when it is known.
type Error struct {
	File string
	Line int
	Key  string
	Msg  string
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		b.WriteString(":" + strconv.Itoa(e.Line))
	}
	b.WriteString(": ")
	if e.Key != "" {
		b.WriteString(e.Key + ": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Errors is every problem found in one file, in line order.
type Errors []*Error

func (es Errors) Error() string {
	s := make([]string, len(es))
	for i, e := range es {
		s[i] = e.Error()
	}
	return strings.Join(s, "\n")
}

// Load reads, expands, defaults and validates the config at path. Relative
// paths inside it are resolved against the file's directory. On failure the
// error is an Errors listing every problem with its file and line.
func Load(path string) (*Config, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return Parse(path, string(src), os.LookupEnv)
}

// parseOnce is one decoding of src (the file, or the file with the keys
// whose values failed to decode taken out). It stops at the first value
// that does not decode into its key's type and returns it (bad), for Parse
// to report and take out; it reports line numbers of the file (p.lines).
func (p *parser) parseOnce(src string, lookup func(string) (string, bool)) (cfg *Config, bad *valueError) {
	p.src = src
	path := p.file
	var raw struct {
		Config
		Durability toml.Primitive   `toml:"durability"`
		Channels   []toml.Primitive `toml:"channels"`
		Providers  []toml.Primitive `toml:"providers"`
	}
	md, err := toml.Decode(src, &raw)
	if err != nil {
		return nil, p.valueFailed(err)
	}
	c := raw.Config
	c.File = path
	if err, bad := p.durability(md, raw.Durability, &c.Durability, lookup); bad != nil {
		return nil, bad
	} else if err != nil {
		p.errs = append(p.errs, err)
	}
	entries := raw.Channels
	switch {
	case len(raw.Providers) > 0 && len(raw.Channels) > 0:
		p.add("providers", "[[providers]] is the old name of [[channels]], and this file has both: rename every [[providers]] to [[channels]]")
	case len(raw.Providers) > 0:
		p.section, entries = "providers", raw.Providers
		c.Deprecations = append(c.Deprecations, fmt.Sprintf("%s:%d: [[providers]] is deprecated: rename it to [[channels]] (same keys); [[providers]] will stop being accepted in a later version", path, p.line("providers")))
	}
	for i, prim := range entries {
		prov, perr, bad := p.provider(md, i, prim)
		if bad != nil {
			return nil, bad
		}
		if perr != nil {
			p.errs = append(p.errs, perr)
			continue
		}
		c.Channels = append(c.Channels, prov)
		p.providerIndex = append(p.providerIndex, i)
	}
	p.unknownKeys(md, &c)
	p.expand(reflect.ValueOf(&c).Elem(), "", lookup)
	p.validateBackoff("durability.inbox.backoff", c.Durability.Inbox.Backoff)
	p.validateBackoff("durability.outbox.backoff", c.Durability.Outbox.Backoff)
	c.defaults(filepath.Dir(path))
	p.validate(&c)
	return &c, nil
}

// durability decodes the [durability] table: the common keys into d, and
// the backend's own keys into the options of the driver d.Backend names.
func (p *parser) durability(md toml.MetaData, prim toml.Primitive, d *Durability, lookup func(string) (string, bool)) (*Error, *valueError) {
	defined := md.IsDefined("durability")
	if defined {
		if err := md.PrimitiveDecode(prim, d); err != nil {
			return nil, p.valueFailed(err)
		}
	}
	p.expand(reflect.ValueOf(&d.Backend).Elem(), "durability.backend", lookup)
	if d.Backend == "" {
		d.Backend = "memory"
	}
	drv, ok := durability.LookupDriver(d.Backend)
	if !ok {
		p.skip = append(p.skip, "durability") // its backend's keys cannot be told from typos
		return &Error{File: p.file, Line: p.line("durability.backend"), Key: "durability.backend",
			Msg: fmt.Sprintf("unknown backend %q%s (want one of %s)", d.Backend, didYouMean(d.Backend, durability.Drivers()), strings.Join(durability.Drivers(), ", "))}, nil
	}
	d.Options, d.Shared = drv.Options(), drv.Shared
	if d.Coordination && !drv.Coordination {
		var can []string
		for _, name := range durability.Drivers() {
			if c, _ := durability.LookupDriver(name); c.Coordination {
				can = append(can, name)
			}
		}
		return &Error{File: p.file, Line: p.line("durability.coordination"), Key: "durability.coordination",
			Msg: fmt.Sprintf("backend %q cannot coordinate replicas: coordination needs a backend that replicas on several hosts share (%s); switch the backend, or remove coordination and route each chat to one replica", d.Backend, strings.Join(can, ", "))}, nil
	}
	if defined {
		if err := md.PrimitiveDecode(prim, d.Options); err != nil {
			return nil, p.valueFailed(err)
		}
	}
	if s, ok := d.Options.(durability.Sharing); ok {
		d.Shared = s.Shared()
	}
	return nil, nil
}

type parser struct {
	file  string
	lines map[string]int
	errs  Errors
	// src is the text being decoded: the file, or the file re-encoded
	// without the values that failed (its lines are not the file's).
	src string
	// tree is src decoded as plain TOML (Parse's, with the failed values
	// taken out): where an unknown key's entries are found.
	tree map[string]any
	// skip are the keys under which no key is reported unknown: an entry
	// whose type is unknown, a [durability] whose backend is.
	skip []string
	// settings are the channels' config structs, by entry, for the keys
	// an unknown key may have meant.
	settings map[int]any
	// section is the array of tables the channels are in: "channels", or
	// "providers", its deprecated name.
	section string
	// providerIndex is each decoded channel's position in the file, and
	// types its channel type.
	providerIndex []int
	types         []channel.Type
}

// add records a problem at key, placed at the key's line (or its table's).
func (p *parser) add(key, format string, args ...any) {
	p.errs = append(p.errs, &Error{File: p.file, Line: p.line(key), Key: key, Msg: fmt.Sprintf(format, args...)})
}

func (p *parser) line(key string) int {
	for k := key; k != ""; {
		if l, ok := p.lines[k]; ok {
			return l
		}
		i := strings.LastIndexAny(k, ".[")
		if i < 0 {
			break
		}
		k = k[:i]
	}
	return 0
}

var lineErr = regexp.MustCompile(`^toml: line (\d+) \(last key "([^"]*)"\): (.*)$`)

func (p *parser) decodeError(err error) *Error {
	var pe toml.ParseError
	if errors.As(err, &pe) {
		return &Error{File: p.file, Line: pe.Position.Line, Key: pe.LastKey, Msg: pe.Message}
	}
	if m := lineErr.FindStringSubmatch(err.Error()); m != nil {
		l, _ := strconv.Atoi(m[1])
		return &Error{File: p.file, Line: l, Key: m[2], Msg: m[3]}
	}
	return &Error{File: p.file, Msg: strings.TrimPrefix(err.Error(), "toml: ")}
}

func (p *parser) provider(md toml.MetaData, i int, prim toml.Primitive) (Channel, *Error, *valueError) {
	key := fmt.Sprintf("%s[%d]", p.section, i)
	var prov Channel
	if err := md.PrimitiveDecode(prim, &prov); err != nil {
		return Channel{}, nil, p.valueFailed(err, key)
	}
	want := strings.Join(channel.Types(), ", ")
	if prov.Type == "" {
		p.skip = append(p.skip, key)
		return Channel{}, &Error{File: p.file, Line: p.line(key), Key: key + ".type", Msg: fmt.Sprintf("missing (want one of %s)", want)}, nil
	}
	t, ok := channel.Lookup(prov.Type)
	if !ok {
		p.skip = append(p.skip, key) // its keys cannot be told from typos
		return Channel{}, &Error{File: p.file, Line: p.line(key + ".type"), Key: key + ".type",
			Msg: fmt.Sprintf("unknown channel type %q%s (want one of %s)", prov.Type, didYouMean(prov.Type, channel.Types()), want)}, nil
	}
	prov.Settings = t.Config()
	if err := md.PrimitiveDecode(prim, prov.Settings); err != nil {
		return Channel{}, nil, p.valueFailed(err, key)
	}
	if p.settings == nil {
		p.settings = map[int]any{}
	}
	p.settings[i] = prov.Settings
	p.types = append(p.types, t)
	return prov, nil, nil
}

var envRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

// expand replaces ${VAR} in every string of v; key is v's path in the file.
func (p *parser) expand(v reflect.Value, key string, lookup func(string) (string, bool)) {
	switch v.Kind() {
	case reflect.String:
		s := v.String()
		if !strings.Contains(s, "${") {
			return
		}
		v.SetString(envRef.ReplaceAllStringFunc(s, func(ref string) string {
			name := ref[2 : len(ref)-1]
			val, ok := lookup(name)
			if !ok {
				p.add(key, "environment variable %s is not set (export it, or write the value in the file)", name)
			}
			return val
		}))
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			p.expand(v.Elem(), key, lookup)
		}
	case reflect.Map:
		for _, k := range v.MapKeys() {
			if e := v.MapIndex(k); e.Kind() == reflect.String {
				x := reflect.New(e.Type()).Elem()
				x.Set(e)
				p.expand(x, key+"."+k.String(), lookup)
				v.SetMapIndex(k, x)
			}
		}
	case reflect.Slice:
		for i := range v.Len() {
			n := i
			if key == p.section && i < len(p.providerIndex) {
				n = p.providerIndex[i] // the entry's place in the file (entries that failed are not in Channels)
			}
			p.expand(v.Index(i), fmt.Sprintf("%s[%d]", key, n), lookup)
		}
	case reflect.Struct:
		t := v.Type()
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			name := strings.Split(f.Tag.Get("toml"), ",")[0]
			switch {
			case f.Anonymous:
				p.expand(v.Field(i), key, lookup)
				continue
			case name == "-" && f.Name == "Channels":
				name = p.section
			case f.Tag.Get("botrun") == "inline":
				p.expand(v.Field(i), key, lookup)
				continue
			case name == "" || name == "-":
				continue
			}
			sub := name
			if key != "" {
				sub = key + "." + name
			}
			p.expand(v.Field(i), sub, lookup)
		}
	}
}

var scopeName = regexp.MustCompile(`^[A-Za-z0-9._:/@-]{0,128}$`)

var providerID = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

func (p *parser) validate(c *Config) {
	b := c.Bot
	if b.Module == "" {
		p.add("bot.module", "missing: set it to the path of your bot's .wasm file")
	}
	for _, n := range []struct{ key, v string }{{"bot.id", b.ID}, {"bot.tenant", b.Tenant}, {"bot.environment", b.Environment}, {"bot.connection", b.Connection}} {
		if !scopeName.MatchString(n.v) {
			p.add(n.key, "%q: use at most 128 letters, digits and . _ - : / @ (it names the bot's records in a shared backend)", n.v)
		}
	}
	if b.Workers < 1 || b.Workers > 4096 {
		p.add("bot.workers", "%d is outside 1..4096", b.Workers)
	}
	if b.Instances < 1 || b.Instances > 1024 {
		p.add("bot.instances", "%d is outside 1..1024", b.Instances)
	}
	if b.MaxSends < 1 {
		p.add("bot.max_sends", "%d must be at least 1", b.MaxSends)
	}
	if b.MaxBroadcast < 1 || b.MaxBroadcast > 1000000 {
		p.add("bot.max_broadcast", "%d is outside 1..1000000", b.MaxBroadcast)
	}
	if b.MaxQueue < 1 {
		p.add("bot.max_queue", "%d must be at least 1", b.MaxQueue)
	}
	if b.MaxMemory < 1<<20 || b.MaxMemory > 4<<30 {
		p.add("bot.max_memory", "%d bytes is outside 1MiB..4GiB", b.MaxMemory)
	}
	if b.MaxEventBytes < 1<<20 {
		p.add("bot.max_event_bytes", "%d bytes is under the 1MiB minimum (one send may carry 1MiB)", b.MaxEventBytes)
	}
	if b.MaxChatState < 64<<10 {
		p.add("bot.max_chat_state", "%d bytes is under the 64KiB minimum", b.MaxChatState)
	}
	d := c.Durability
	if d.Options != nil {
		d.Options.Check(filepath.Dir(p.file), func(key, format string, args ...any) {
			p.add("durability."+key, format, args...)
		})
	}
	if d.Inbox.MaxAttempts < 1 {
		p.add("durability.inbox.max_attempts", "%d must be at least 1", d.Inbox.MaxAttempts)
	}
	if *d.Outbox.Retries < 0 {
		p.add("durability.outbox.retries", "%d must not be negative", *d.Outbox.Retries)
	}
	if *d.Outbox.MaxPayloadBytes == 0 {
		p.add("durability.outbox.max_payload_bytes", "0 would send every payload without the outbox (no dedupe, no retry): set the largest payload to journal, e.g. \"1MiB\" (the default)")
	}
	if d.Outbox.Lease.D() < 20*time.Millisecond {
		p.add("durability.outbox.lease", "%s is below the 20ms minimum", d.Outbox.Lease.D())
	}
	if d.Inbox.Lease.D() < 20*time.Millisecond {
		p.add("durability.inbox.lease", "%s is below the 20ms minimum", d.Inbox.Lease.D())
	}
	if o := d.Outbox.OnAmbiguous; o != "skip" && o != "resend" {
		p.add("durability.outbox.on_ambiguous", "unknown policy %q (want skip or resend)", o)
	}
	if o := d.Outbox.OnDiverged; o != "send" && o != "skip" {
		p.add("durability.outbox.on_diverged", "unknown policy %q (want send or skip)", o)
	}
	if t := c.Admin.Token; t != "" && len(t) < 16 {
		p.add("admin.token", "shorter than 16 characters: use a long random token (e.g. openssl rand -hex 24) from ${ENV}")
	}
	p.validateAdminListen(c)
	p.validateAPIs(c)
	if t := c.Tracing; t.OTLPEndpoint != "" {
		if u, err := url.Parse(t.OTLPEndpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			p.add("tracing.otlp_endpoint", "%q: want the collector's OTLP/HTTP URL, e.g. http://127.0.0.1:4318/v1/traces", t.OTLPEndpoint)
		}
	}
	if r := *c.Tracing.SampleRatio; r < 0 || r > 1 {
		p.add("tracing.sample_ratio", "%v: want a share between 0 and 1", r)
	}
	if a := c.Alerts; a.URL != "" || a.Secret != "" {
		httpkit.CheckAPIURL(a.URL, func(_, format string, args ...any) { p.add("alerts.url", format, args...) })
		if a.URL == "" {
			p.add("alerts.url", "missing: set it to the https URL that receives the alerts, or leave [alerts] out")
		}
		if len(a.Secret) < 16 {
			p.add("alerts.secret", "missing or shorter than 16 characters: it signs every alert (use ${ENV})")
		}
	}
	if len(c.Channels) == 0 && len(p.errs) == 0 {
		p.add("channels", "no [[channels]]: add one, e.g. { id = \"web\", type = \"webchat\" }")
	}
	seen := map[string]bool{}
	for n, prov := range c.Channels {
		i := p.providerIndex[n]
		key := fmt.Sprintf("%s[%d]", p.section, i)
		switch {
		case !providerID.MatchString(prov.ID):
			p.add(key+".id", "%q must be 1-63 lowercase letters, digits, '-' or '_'", prov.ID)
		case seen[prov.ID]:
			p.add(key+".id", "duplicate channel id %q", prov.ID)
		}
		seen[prov.ID] = true
		in := channel.Setting{ID: prov.ID, Listen: c.HTTP.Listen, Retention: c.Durability.Retention.D(), Dir: filepath.Dir(p.file)}
		sessionChecked := false
		prov.Settings.Check(in, func(k, format string, args ...any) {
			sessionChecked = sessionChecked || k == "session"
			p.add(key+"."+k, format, args...)
		})
		if !sessionChecked {
			p.session(key, &c.Channels[n], p.types[n])
		}
		p.replayWindow(c, key, prov)
	}
}

// replayWindow refuses a durability.retention that does not outlast the
// time a captured request to prov's channel still passes its check
// (channel.Replayable): a replay after its record was purged would be
// admitted again.
func (p *parser) replayWindow(c *Config, key string, prov Channel) {
	r, ok := prov.Settings.(channel.Replayable)
	if !ok {
		return
	}
	w, retention := r.ReplayWindow(), c.Durability.Retention.D()
	if w <= 0 || retention == 0 || retention > w {
		return
	}
	p.add("durability.retention", "%s is not longer than the replay window of %s (%s %q): a signed request to it is accepted for %s after it arrived, and one replayed after its record was purged would be answered again; set retention above %s (e.g. %q), or 0 to keep records forever",
		retention, key, prov.Type, prov.ID, w, w, suggestRetention(w))
}

// suggestRetention is a retention comfortably above the window w, in
// whole hours (or days past a day).
func suggestRetention(w time.Duration) string {
	h := int(w/time.Hour) + 1
	if h >= 24 {
		return fmt.Sprintf("%dd", h/24+1)
	}
	return fmt.Sprintf("%dh", h)
}

// session checks an entry's session and session_lease, and fills their
// defaults. A channel's own Check may have refused session already (a
// value the key held in an older version): that one problem is reported.
func (p *parser) session(key string, prov *Channel, t channel.Type) {
	switch {
	case t.OwnSessionKey:
		prov.Session = SessionEvery // the key is the channel's own
	case prov.Session == "" && t.LeaderOnly:
		prov.Session = SessionLeader
	case prov.Session == "":
		prov.Session = SessionEvery
	case prov.Session == SessionLeader:
	case prov.Session == SessionEvery:
		if t.LeaderOnly {
			p.add(key+".session", "%q: a %s channel's transport runs in one process at a time: leave session out, or set it to %q (only the replica elected leader runs it)", prov.Session, prov.Type, SessionLeader)
		}
	default:
		p.add(key+".session", "unknown session %q (want %q: every replica runs the channel's transport, or %q: only the replica elected leader through the backend does)", prov.Session, SessionEvery, SessionLeader)
	}
	switch l := prov.SessionLease.D(); {
	case l == 0:
		prov.SessionLease = Duration(30 * time.Second)
	case prov.Session == SessionEvery:
		p.add(key+".session_lease", "set while session is %q: the lease elects a leader only with session = %q", SessionEvery, SessionLeader)
	case l < 20*time.Millisecond:
		p.add(key+".session_lease", "%s is below the 20ms minimum", l)
	}
}

// validateBackoff checks the values set in the file, before defaults and
// inheritance fill the rest, so each problem is reported once at its line.
func (p *parser) validateBackoff(key string, b Backoff) {
	if b.Jitter != nil && (*b.Jitter < 0 || *b.Jitter > 1) {
		p.add(key+".jitter", "%g is outside 0..1", *b.Jitter)
	}
	if b.Cap != 0 && b.Cap < b.Base {
		p.add(key+".cap", "%s is below base %s", b.Cap.D(), b.Base.D())
	}
}

// validateAdminListen checks [admin] listen: a host:port other than [http]
// listen, and a token to go with it.
func (p *parser) validateAdminListen(c *Config) {
	l := c.Admin.Listen
	if l == "" {
		return
	}
	if _, _, err := net.SplitHostPort(l); err != nil {
		p.add("admin.listen", "%q: want host:port, e.g. 127.0.0.1:9090", l)
		return
	}
	if l == c.HTTP.Listen {
		p.add("admin.listen", "%q is [http] listen too: pick another port, or leave admin.listen out to serve /admin/ there", l)
	}
	if c.Admin.Token == "" {
		p.add("admin.listen", "set without admin.token: the admin API is off without a token; set token (use ${ENV})")
	}
}

var apiName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

// ValidAPIName reports whether name may name an [[apis]] entry.
func ValidAPIName(name string) bool { return apiName.MatchString(name) }

// headerName is an HTTP header name (a token, RFC 9110).
var headerName = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")

// validateAPIs checks the [[apis]] entries: a unique name, a base URL a
// call can go under, headers that can be sent, bounds that make sense.
func (p *parser) validateAPIs(c *Config) {
	if c.Bot.MaxFetches < 1 || c.Bot.MaxFetches > 1000 {
		p.add("bot.max_fetches", "%d is outside 1..1000", c.Bot.MaxFetches)
	}
	if c.Bot.MaxFetchWait < Duration(time.Second) {
		p.add("bot.max_fetch_wait", "%s is under 1s", c.Bot.MaxFetchWait.D())
	}
	seen := map[string]bool{}
	for i, a := range c.APIs {
		key := fmt.Sprintf("apis[%d]", i)
		switch {
		case !apiName.MatchString(a.Name):
			p.add(key+".name", "%q: want 1 to 63 lower-case letters, digits, _ and - (the name the bot calls the API by)", a.Name)
		case seen[a.Name]:
			p.add(key+".name", "%q names two [[apis]] entries: give each its own name", a.Name)
		}
		seen[a.Name] = true
		p.validateAPIURL(key+".url", a)
		seenHeader := map[string]string{}
		for _, name := range slices.Sorted(maps.Keys(a.Headers)) {
			v := a.Headers[name]
			if other, ok := seenHeader[strings.ToLower(name)]; ok {
				p.add(key+".headers", "%s and %s name one header (names are case-insensitive): keep one", other, name)
			}
			seenHeader[strings.ToLower(name)] = name
			if !headerName.MatchString(name) {
				p.add(key+".headers", "%q is not a header name (letters, digits and !#$%%&'*+.^_`|~-)", name)
			}
			if strings.ContainsAny(v, "\r\n\x00") {
				p.add(key+".headers", "the value of %s holds a line break or NUL: a header value is one line", name)
			}
			switch l := strings.ToLower(name); {
			case l == "host", l == "content-length", l == "transfer-encoding", l == "connection", l == "idempotency-key",
				l == "upgrade", l == "te", l == "trailer", strings.HasPrefix(l, "proxy-"):
				p.add(key+".headers", "%s is set by the host, not by the config: remove it", name)
			}
		}
		if a.Timeout < Duration(time.Millisecond) || a.Timeout > Duration(10*time.Minute) {
			p.add(key+".timeout", "%s is outside 1ms..10m", a.Timeout.D())
		}
		if a.MaxResponse < 1 || a.MaxResponse > 64<<20 {
			p.add(key+".max_response", "%d bytes is outside 1B..64MiB", a.MaxResponse)
		}
		if *a.Retries < 0 || *a.Retries > 10 {
			p.add(key+".retries", "%d is outside 0..10", *a.Retries)
		}
	}
}

// validateAPIURL checks an API's base URL: http or https, a host, an
// optional path prefix, and nothing that would not go under it.
func (p *parser) validateAPIURL(key string, a API) {
	raw := a.URL
	u, err := url.Parse(raw)
	switch {
	case raw == "":
		p.add(key, "missing: the API's base URL, e.g. https://api.example.com/v1")
	case err != nil:
		p.add(key, "not a URL: want an http or https URL with a host, e.g. https://api.example.com/v1")
	case u.User != nil:
		p.add(key, "the URL holds a user and password: put credentials in headers (with ${ENV}), never in the URL")
	case (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		p.add(key, "want an http or https URL with a host, e.g. https://api.example.com/v1")
	case u.RawQuery != "" || u.Fragment != "" || strings.HasSuffix(raw, "?") || strings.HasSuffix(raw, "#"):
		p.add(key, "the base URL takes no query or fragment (the bot adds its query to each call's path)")
	case !a.AllowPrivate && privateHost(u.Hostname()):
		p.add(key, "%s is on this machine or a private network, which the host refuses to call unless the entry says allow_private = true", u.Hostname())
	case u.Scheme == "http" && !a.AllowPrivate && !a.AllowHTTP:
		p.add(key, "plain http: the headers (credentials) would cross the network in clear text: use https, or set allow_http = true to accept that, or allow_private = true for an API on this machine or your private network")
	}
}

// privateHost reports whether host is localhost or a loopback, private,
// link-local or unspecified address.
func privateHost(host string) bool {
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && (ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() || ip.IsUnspecified())
}
