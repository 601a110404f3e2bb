package config

import (
	"errors"
	"fmt"
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

// Parse is Load for a file already read; lookup resolves ${VAR}.
func Parse(path, src string, lookup func(string) (string, bool)) (*Config, error) {
	p := &parser{file: path, lines: locate(src)}
	var raw struct {
		Config
		Providers []toml.Primitive `toml:"providers"`
	}
	md, err := toml.Decode(src, &raw)
	if err != nil {
		return nil, Errors{p.decodeError(err)}
	}
	cfg := raw.Config
	cfg.File = path
	for i, prim := range raw.Providers {
		prov, perr := p.provider(md, i, prim)
		if perr != nil {
			p.errs = append(p.errs, perr)
			continue
		}
		cfg.Providers = append(cfg.Providers, prov)
		p.providerIndex = append(p.providerIndex, i)
	}
	for _, k := range md.Undecoded() {
		key := k.String()
		p.add(key, "unknown key (check the spelling; bot.toml.example lists every key)")
	}
	p.expand(reflect.ValueOf(&cfg).Elem(), "", lookup)
	p.validateBackoff("durability.inbox.backoff", cfg.Durability.Inbox.Backoff)
	p.validateBackoff("durability.outbox.backoff", cfg.Durability.Outbox.Backoff)
	cfg.defaults(filepath.Dir(path))
	p.validate(&cfg)
	if len(p.errs) > 0 {
		slices.SortStableFunc(p.errs, func(a, b *Error) int { return a.Line - b.Line })
		return nil, p.errs
	}
	return &cfg, nil
}

type parser struct {
	file  string
	lines map[string]int
	errs  Errors
	// providerIndex is each decoded provider's position in the file.
	providerIndex []int
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

func (p *parser) provider(md toml.MetaData, i int, prim toml.Primitive) (Provider, *Error) {
	key := fmt.Sprintf("providers[%d]", i)
	var common ProviderCommon
	if err := md.PrimitiveDecode(prim, &common); err != nil {
		return nil, p.decodeError(err)
	}
	if common.Type == "" {
		return nil, &Error{File: p.file, Line: p.line(key), Key: key + ".type", Msg: fmt.Sprintf("missing (want one of %s)", strings.Join(sortedTypes(), ", "))}
	}
	mk, ok := providerTypes[common.Type]
	if !ok {
		return nil, &Error{File: p.file, Line: p.line(key + ".type"), Key: key + ".type", Msg: fmt.Sprintf("unknown provider type %q (want one of %s)", common.Type, strings.Join(sortedTypes(), ", "))}
	}
	prov := mk()
	if err := md.PrimitiveDecode(prim, prov); err != nil {
		return nil, p.decodeError(err)
	}
	return prov, nil
}

func sortedTypes() []string {
	var ts []string
	for t := range providerTypes {
		ts = append(ts, t)
	}
	slices.Sort(ts)
	return ts
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
	case reflect.Slice:
		for i := range v.Len() {
			p.expand(v.Index(i), fmt.Sprintf("%s[%d]", key, i), lookup)
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
			case name == "-" && f.Name == "Providers":
				name = "providers"
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

var tablePrefix = regexp.MustCompile(`^[A-Za-z0-9_]*$`)

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
	if b.MaxQueue < 1 {
		p.add("bot.max_queue", "%d must be at least 1", b.MaxQueue)
	}
	if b.MaxMemory < 1<<20 || b.MaxMemory > 4<<30 {
		p.add("bot.max_memory", "%d bytes is outside 1MiB..4GiB", b.MaxMemory)
	}
	if b.MaxChatState < 64<<10 {
		p.add("bot.max_chat_state", "%d bytes is under the 64KiB minimum", b.MaxChatState)
	}
	d := c.Durability
	if !slices.Contains(Backends, d.Backend) {
		p.add("durability.backend", "unknown backend %q (want %s)", d.Backend, strings.Join(Backends, ", "))
	}
	switch d.Backend {
	case "file", "sqlite":
		if d.Path == "" {
			p.add("durability.path", "missing: the %s backend needs a file path", d.Backend)
		}
	case "postgres", "redis":
		if d.URL == "" {
			p.add("durability.url", "missing: the %s backend needs a connection URL", d.Backend)
		}
	}
	if !tablePrefix.MatchString(d.TablePrefix) {
		p.add("durability.table_prefix", "%q: use letters, digits and '_'", d.TablePrefix)
	}
	if d.Synchronous != "full" && d.Synchronous != "normal" {
		p.add("durability.synchronous", "unknown value %q (want full or normal)", d.Synchronous)
	}
	if d.CompactEvery < 1 {
		p.add("durability.compact_every", "%d must be at least 1", d.CompactEvery)
	}
	if d.Inbox.MaxAttempts < 1 {
		p.add("durability.inbox.max_attempts", "%d must be at least 1", d.Inbox.MaxAttempts)
	}
	if *d.Outbox.Retries < 0 {
		p.add("durability.outbox.retries", "%d must not be negative", *d.Outbox.Retries)
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
	if len(c.Providers) == 0 && len(p.errs) == 0 {
		p.add("providers", "no [[providers]]: add one, e.g. { id = \"web\", type = \"webchat\" }")
	}
	seen := map[string]bool{}
	for n, prov := range c.Providers {
		i := p.providerIndex[n]
		id := prov.Common().ID
		key := fmt.Sprintf("providers[%d].id", i)
		switch {
		case !providerID.MatchString(id):
			p.add(key, "%q must be 1-63 lowercase letters, digits, '-' or '_'", id)
		case seen[id]:
			p.add(key, "duplicate provider id %q", id)
		}
		seen[id] = true
		switch pr := prov.(type) {
		case *Webchat:
			p.validateWebchat(i, pr, c.HTTP.Listen)
		case *Telegram:
			p.validateTelegram(i, pr)
		case *MetaWhatsApp:
			p.validateMeta(i, pr)
		case *Twilio:
			p.validateTwilio(i, pr)
		}
		if h, ok := prov.(*HTTPChannel); ok {
			if u, err := url.Parse(h.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				p.add(fmt.Sprintf("providers[%d].url", i), "%q must be an http(s) URL", h.URL)
			}
			if len(h.Secret) < 16 {
				p.add(fmt.Sprintf("providers[%d].secret", i), "missing or shorter than 16 characters (use ${ENV} to keep it out of the file)")
			}
			w, r := h.SignatureWindow.D(), c.Durability.Retention.D()
			switch {
			case w < time.Second:
				p.add(fmt.Sprintf("providers[%d].signature_window", i), "%s is below the 1s minimum", w)
			case r > 0 && 2*w >= r:
				// A timestamp up to the window ahead is accepted, so a captured
				// request stays valid for twice the window.
				p.add(fmt.Sprintf("providers[%d].signature_window", i), "%s is not under half of durability.retention (%s): a request replayed after its record was purged would be accepted again; shorten the window or keep records longer", w, r)
			}
		}
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

var secretToken = regexp.MustCompile(`^[A-Za-z0-9_-]{1,256}$`)

func (p *parser) validateTelegram(i int, tg *Telegram) {
	key := func(k string) string { return fmt.Sprintf("providers[%d].%s", i, k) }
	if tg.Token == "" {
		p.add(key("token"), "missing: the bot token from @BotFather (use ${ENV} to keep it out of the file)")
	}
	if tg.Mode == "" {
		tg.Mode = "webhook"
	}
	switch tg.Mode {
	case "webhook":
		if !secretToken.MatchString(tg.SecretToken) {
			p.add(key("secret_token"), "webhook mode needs 1-256 characters of A-Z a-z 0-9 _ - (the secret_token given to setWebhook)")
		}
	case "poll":
	default:
		p.add(key("mode"), "%q: want webhook or poll", tg.Mode)
	}
	p.validateAPIURL(i, tg.APIURL)
}

// validateAPIURL checks an optional api_url: https, or plain http on
// loopback only (a local fake or Bot API server), since the channel's
// credentials travel in every request.
func (p *parser) validateAPIURL(i int, raw string) {
	if raw == "" {
		return
	}
	u, err := url.Parse(raw)
	switch {
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		p.add(fmt.Sprintf("providers[%d].api_url", i), "%q must be an http(s) URL", raw)
	case u.Scheme == "http" && !LoopbackHost(u.Hostname()):
		p.add(fmt.Sprintf("providers[%d].api_url", i), "%q is plain http to another machine: the channel's credentials would cross the network in clear; use https (plain http is allowed on loopback only)", raw)
	}
}

// validateWebchat refuses a webchat, which has no authentication, on a
// listen address other machines can reach, unless the entry opts in.
func (p *parser) validateWebchat(i int, w *Webchat, listen string) {
	key := func(k string) string { return fmt.Sprintf("providers[%d].%s", i, k) }
	if host, _, err := net.SplitHostPort(listen); err == nil && !LoopbackHost(host) && !w.AllowPublic {
		p.add(key("allow_public"), "webchat %q has no authentication and [http] listen %q is not loopback: listen on 127.0.0.1, or set allow_public = true in this entry to expose it on purpose", w.ID, listen)
	}
	if *w.RateLimit < 0 {
		p.add(key("rate_limit"), "%g must not be negative (0 turns the limit off)", *w.RateLimit)
	}
	if w.Burst < 1 {
		p.add(key("burst"), "%d must be at least 1", w.Burst)
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

// required reports a missing key with how to get it.
func (p *parser) required(i int, name, value, how string) {
	if value == "" {
		p.add(fmt.Sprintf("providers[%d].%s", i, name), "missing: %s", how)
	}
}

func (p *parser) validateMeta(i int, m *MetaWhatsApp) {
	p.required(i, "token", m.Token, "the WhatsApp Cloud API access token (use ${ENV} to keep it out of the file)")
	p.required(i, "app_secret", m.AppSecret, "the Meta app's secret, which signs every webhook (use ${ENV})")
	p.required(i, "verify_token", m.VerifyToken, "a string of your choice, entered again as the webhook's verify token in the Meta app")
	p.required(i, "phone_number_id", m.PhoneNumberID, "the phone number id from WhatsApp > API Setup (not the number itself)")
	p.validateAPIURL(i, m.APIURL)
}

var accountSID = regexp.MustCompile(`^AC[0-9a-fA-F]{32}$`)

func (p *parser) validateTwilio(i int, tw *Twilio) {
	key := func(k string) string { return fmt.Sprintf("providers[%d].%s", i, k) }
	if !accountSID.MatchString(tw.AccountSID) {
		p.add(key("account_sid"), "%q: want the account SID from Twilio's console (AC and 32 hex digits)", tw.AccountSID)
	}
	p.required(i, "auth_token", tw.AuthToken, "the account's auth token, which signs every webhook (use ${ENV})")
	p.required(i, "from", tw.From, "the sender: +E164, whatsapp:+E164 or a Messaging Service SID (MG…)")
	if u, err := url.Parse(tw.PublicURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		p.add(key("public_url"), "%q: want the webhook URL exactly as entered in Twilio's console (Twilio signs it)", tw.PublicURL)
	}
	p.validateAPIURL(i, tw.APIURL)
}
