// Package channeltest is the channel contract suite: every channel runs it
// against its fake API. It covers inbound parsing, webhook verification and
// deduplication, sends, every error class the channel maps, splitting at the
// text limit, and durable media (serialize, rehydrate, load). RunInbound is
// its inbound half, for a channel with no API of its own to fake (webchat);
// RunSend its outbound half, which Run runs over HTTP and a channel on
// another transport (email, whatsapp-web) runs over its own fake.
//
// channeltest imports the standard library, the SPI (host/channel) and the
// toolkit (host/channel/httpkit); the channels' tests and fakes import it.
package channeltest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/channel/httpkit"
)

// Channel is one channel and its fake, as the suite needs them.
type Channel struct {
	// Type is the channel's registered type name (channel.Register).
	Type string
	// Fake is the channel's fake API. The suite serves it, so it can also
	// make the API unavailable.
	Fake http.Handler
	// New builds the provider under test with api as its api_url.
	New func(t testing.TB, api string, admit channel.Admitter) channel.Channel
	// Signed returns a webhook request for body, signed as the channel
	// signs it.
	Signed func(t testing.TB, body []byte) *http.Request
	// SignatureHeader is the header that carries the signature or secret.
	SignatureHeader string
	// QueryToken, for a gateway that signs nothing, is the query parameter
	// of the webhook URL that carries its secret instead of a header.
	QueryToken string
	// SignsBody is true when the signature covers the body, so a tampered
	// body must be refused too.
	SignsBody bool
	// TextBody is a webhook body delivering a text message.
	TextBody func(msgID, text string) []byte
	// ImageBody is a webhook body delivering an image whose bytes the fake,
	// served at api, serves as ImageBytes.
	ImageBody  func(api, msgID string) []byte
	ImageBytes []byte
	// Ignored are webhook bodies that must be answered 2xx and admit nothing:
	// status updates, echoes, edits.
	Ignored [][]byte
	// MaxBody is the largest webhook body the provider accepts.
	MaxBody int
	// Chat is a chat the fake accepts sends to, and the chat of TextBody.
	Chat string
	// MediaOut is an attachment the fake accepts.
	MediaOut channel.Media
	// GoneMedia is a media reference the fake, served at api, does not (any
	// longer) have.
	GoneMedia func(api string) channel.Media
	// Texts returns the texts the fake accepted for chat, in order.
	Texts func(chat string) []string
	// Failures are the error classes the channel maps, each arranged at the
	// fake.
	Failures []Failure
	// Secrets must never appear in a stored media reference.
	Secrets []string
	// Unlimited, set to the reason, is a channel that declares no text
	// limit (the generic HTTP channel: the limit is its gateway's): the
	// split test is skipped with that reason, and only then.
	Unlimited string
	// Unsigned, set to the reason, is a channel that by design neither
	// signs its inbound nor has credentials (webchat): only RunInbound
	// takes it, and an entry with no keys may pass Check.
	Unsigned string
	// NoInboundMedia, set to the reason, is a channel whose inbound
	// messages carry no media: the durable media test is skipped with
	// that reason, and only then.
	NoInboundMedia string
}

// Failure is one error class: Arrange makes the fake fail and returns the
// send that fails; the error must match Is (errors.Is), or be a
// RateLimitedError asking for RetryAfter, or a permanent error (Permanent).
type Failure struct {
	Name       string
	Arrange    func() channel.Outbound
	Is         error
	RetryAfter time.Duration
	Permanent  bool
}

// RateLimited is the failure class name of a rate-limited send: limit
// makes the fake refuse its next n sends as rate limited (a fake's
// LimitNext), the send is a text to chat, and the channel must ask to wait
// wait (a RateLimitedError).
func RateLimited(name string, limit func(n int), chat string, wait time.Duration) Failure {
	return Failure{Name: name, Arrange: func() channel.Outbound {
		limit(1)
		return channel.Outbound{Chat: chat, Text: "x"}
	}, RetryAfter: wait}
}

// Refusal is the failure class name of a send the fake refuses: out,
// whose error must match is (errors.Is).
func Refusal(name string, out channel.Outbound, is error) Failure {
	return Failure{Name: name, Arrange: func() channel.Outbound { return out }, Is: is}
}

// Must returns a constructor's result, failing t on its error:
// Must[*Provider](t)(Open(cfg, env)).
func Must[P any](t testing.TB) func(P, error) P {
	return func(p P, err error) P {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
}

// Journal is an Admitter that records admissions, deduplicating on the
// message id as the host does, and can be made to fail: for the contract
// suite and a channel's own tests.
type Journal struct {
	mu   sync.Mutex
	msgs []channel.Message
	seen map[string]bool
	fail error
}

// NewJournal returns an empty Journal.
func NewJournal() *Journal { return &Journal{seen: map[string]bool{}} }

// Admit implements channel.Admitter.
func (a *Journal) Admit(_ context.Context, prov string, m channel.Message) (channel.Admission, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.fail != nil {
		return channel.Admission{}, a.fail
	}
	if a.seen[m.ID] {
		return channel.Admission{ID: prov + ":" + m.ID, Duplicate: true}, nil
	}
	a.seen[m.ID] = true
	a.msgs = append(a.msgs, m)
	return channel.Admission{ID: prov + ":" + m.ID}, nil
}

// Fail makes every Admit answer err until Fail(nil).
func (a *Journal) Fail(err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.fail = err
}

// Admitted returns the messages admitted (once each), in order.
func (a *Journal) Admitted() []channel.Message {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]channel.Message(nil), a.msgs...)
}

// Run runs the contract suite.
func Run(t *testing.T, ch Channel) {
	if ch.SignatureHeader == "" && ch.QueryToken == "" {
		t.Fatal("the channel verifies no webhook signature (SignatureHeader or QueryToken): RunInbound is for a channel that has none by design")
	}
	var down atomic.Bool
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if down.Load() {
			http.Error(w, "upstream unavailable", http.StatusServiceUnavailable)
			return
		}
		ch.Fake.ServeHTTP(w, r)
	}))
	t.Cleanup(api.Close)
	a := NewJournal()
	p := ch.New(t, api.URL, a)
	serve := routes(t, p)
	inbound(t, ch, a, serve)

	RunSend(t, SendContract{
		Channel:        p,
		Chat:           ch.Chat,
		MediaOut:       ch.MediaOut,
		Texts:          ch.Texts,
		Failures:       ch.Failures,
		Down:           down.Store,
		Secrets:        ch.Secrets,
		Unlimited:      ch.Unlimited,
		NoInboundMedia: ch.NoInboundMedia,
		InboundImage: func(t *testing.T) channel.Media {
			before := len(a.Admitted())
			if code := serve(ch.Signed(t, ch.ImageBody(api.URL, "contract-image"))); code/100 != 2 {
				t.Fatalf("image webhook: HTTP %d", code)
			}
			msgs := a.Admitted()
			if len(msgs) != before+1 || len(msgs[before].Media) != 1 {
				t.Fatalf("the image message was admitted as %+v", msgs[before:])
			}
			return msgs[before].Media[0]
		},
		ImageBytes: ch.ImageBytes,
		GoneMedia:  func() channel.Media { return ch.GoneMedia(api.URL) },
	})
}

// RunInbound runs the inbound half of the suite, for a channel that has no
// API of its own to send to, so nothing to fake (webchat: its sends join
// its transcript, which the browser reads): registration, admission once
// per message id, the ignored bodies, the body limit, and no
// acknowledgement of what the journal refused; the signature checks when
// SignatureHeader or QueryToken is set. Fake may be nil.
func RunInbound(t *testing.T, ch Channel) {
	if ch.SignatureHeader == "" && ch.QueryToken == "" && ch.Unsigned == "" {
		t.Fatal("the channel verifies no webhook signature: say why in Unsigned")
	}
	a := NewJournal()
	inbound(t, ch, a, routes(t, ch.New(t, "", a)))
}

// routes mounts p's routes and returns a function that serves a request
// on them and answers its status.
func routes(t *testing.T, p channel.Channel) func(*http.Request) int {
	r, ok := p.(channel.Router)
	if !ok {
		t.Fatal("the provider serves no webhook (channel.Router)")
	}
	mux := http.NewServeMux()
	r.Routes(mux)
	return func(req *http.Request) int {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, req)
		return rec.Code
	}
}

// inbound runs the inbound tests: registration, admission, signatures,
// ignored bodies, the body limit, unjournaled messages.
func inbound(t *testing.T, ch Channel, a *Journal, serve func(*http.Request) int) {
	t.Run("registered", func(t *testing.T) { registered(t, ch) })

	t.Run("inbound/verified-admitted-once", func(t *testing.T) {
		body := ch.TextBody("contract-1", "hola ¿qué tal?")
		for i := 0; i < 3; i++ {
			if code := serve(ch.Signed(t, body)); code/100 != 2 {
				t.Fatalf("delivery %d of a signed text: HTTP %d", i+1, code)
			}
		}
		var got []channel.Message
		for _, m := range a.Admitted() {
			if m.Text == "hola ¿qué tal?" {
				got = append(got, m)
			}
		}
		if len(got) != 1 || got[0].ID == "" || got[0].Chat != ch.Chat {
			t.Fatalf("three deliveries of one message admitted %+v; want it once, with an id, in chat %q", got, ch.Chat)
		}
	})

	t.Run("inbound/forged-rejected", func(t *testing.T) {
		if ch.SignatureHeader == "" && ch.QueryToken == "" {
			t.Skip("the channel verifies no signature (RunInbound): " + ch.Unsigned)
		}
		before := len(a.Admitted())
		body := ch.TextBody("contract-forged", "forged")
		forged, missing := ch.Signed(t, body), ch.Signed(t, body)
		if ch.QueryToken != "" {
			setQuery(forged, ch.QueryToken, flip(forged.URL.Query().Get(ch.QueryToken)))
			setQuery(missing, ch.QueryToken, "")
		} else {
			forged.Header.Set(ch.SignatureHeader, flip(forged.Header.Get(ch.SignatureHeader)))
			missing.Header.Del(ch.SignatureHeader)
		}
		cases := map[string]*http.Request{"forged signature": forged, "missing signature": missing}
		if ch.SignsBody {
			tb := bytes.Replace(body, []byte("forged"), []byte("Forged"), 1)
			cases["tampered body"] = withBody(ch.Signed(t, body), tb)
		}
		for name, req := range cases {
			if code := serve(req); code != 401 && code != 403 {
				t.Errorf("%s: HTTP %d, want 401 or 403", name, code)
			}
		}
		if n := len(a.Admitted()); n != before {
			t.Fatalf("a refused webhook admitted %d messages", n-before)
		}
	})

	t.Run("inbound/ignored", func(t *testing.T) {
		before := len(a.Admitted())
		for i, body := range ch.Ignored {
			if code := serve(ch.Signed(t, body)); code/100 != 2 {
				t.Errorf("ignored body %d: HTTP %d, want 2xx (or the channel redelivers it)", i, code)
			}
		}
		if n := len(a.Admitted()); n != before {
			t.Fatalf("status updates or echoes admitted %d messages: %+v", n-before, a.Admitted()[before:])
		}
	})

	t.Run("inbound/body-limit", func(t *testing.T) {
		before := len(a.Admitted())
		big := ch.TextBody("contract-big", strings.Repeat("a", ch.MaxBody))
		if code := serve(ch.Signed(t, big)); code != http.StatusRequestEntityTooLarge {
			t.Fatalf("a body over %d bytes: HTTP %d, want 413", ch.MaxBody, code)
		}
		if n := len(a.Admitted()); n != before {
			t.Fatal("an oversized body was admitted")
		}
	})

	t.Run("inbound/not-journaled-not-acknowledged", func(t *testing.T) {
		a.Fail(errors.New("journal unavailable"))
		code := serve(ch.Signed(t, ch.TextBody("contract-unjournaled", "later")))
		a.Fail(nil)
		if code/100 == 2 {
			t.Fatal("a message the journal refused was acknowledged 2xx: the channel would not redeliver it")
		}
		if code := serve(ch.Signed(t, ch.TextBody("contract-unjournaled", "later"))); code/100 != 2 {
			t.Fatalf("the redelivery: HTTP %d", code)
		}
	})

}

// flip changes a signature's last character, keeping its shape.
func flip(sig string) string {
	if sig == "" {
		return "x"
	}
	last := sig[len(sig)-1]
	repl := byte('0')
	if last == '0' {
		repl = '1'
	}
	return sig[:len(sig)-1] + string(repl)
}

// setQuery sets the query parameter name of r to value, or removes it when
// value is empty.
func setQuery(r *http.Request, name, value string) {
	q := r.URL.Query()
	if value == "" {
		q.Del(name)
	} else {
		q.Set(name, value)
	}
	r.URL.RawQuery = q.Encode()
	r.RequestURI = r.URL.RequestURI()
}

func withBody(r *http.Request, body []byte) *http.Request {
	out := httptest.NewRequest(r.Method, r.URL.String(), bytes.NewReader(body))
	out.Header = r.Header.Clone()
	return out
}

// Bench measures one signed text webhook through the provider: read, verify,
// parse and admit (into an admitter that only counts).
func Bench(b *testing.B, ch Channel) {
	var n atomic.Int64
	p := ch.New(b, "http://127.0.0.1:9", admitFunc(func() { n.Add(1) }))
	mux := http.NewServeMux()
	p.(channel.Router).Routes(mux)
	// The requests are signed before the clock starts: the channel's cost
	// of signing is not botrun's.
	reqs := make([]*http.Request, b.N)
	for i := range reqs {
		reqs[i] = ch.Signed(b, ch.TextBody("bench-"+strconv.Itoa(i), "hola, ¿qué tal?"))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, reqs[i])
		if rec.Code/100 != 2 {
			b.Fatalf("HTTP %d: %s", rec.Code, rec.Body)
		}
	}
	if n.Load() != int64(b.N) {
		b.Fatalf("%d admitted of %d", n.Load(), b.N)
	}
}

type admitFunc func()

func (f admitFunc) Admit(_ context.Context, prov string, m channel.Message) (channel.Admission, error) {
	f()
	return channel.Admission{ID: prov + ":" + m.ID}, nil
}

// registered checks the channel's registration: the type is known, every
// exported field of its config has a toml tag, and an empty entry is refused
// with the missing keys named.
func registered(t *testing.T, ch Channel) {
	name := ch.Type
	typ, ok := channel.Lookup(name)
	if !ok {
		t.Fatalf("type %q is not registered (channel.Register in an init function); registered: %v", name, channel.Types())
	}
	cfg := typ.Config()
	v := reflect.ValueOf(cfg)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		t.Fatalf("Config() returns %T, want a pointer to a struct with toml tags", cfg)
	}
	tagged(t, v.Elem().Type())
	var keys []string
	cfg.Check(channel.Setting{ID: "x", Listen: "127.0.0.1:8080"}, func(key, format string, args ...any) {
		keys = append(keys, key)
		if msg := fmt.Sprintf(format, args...); len(msg) < 10 {
			t.Errorf("problem with %s says too little to act on: %q", key, msg)
		}
	})
	if len(keys) == 0 && ch.Unsigned == "" {
		t.Errorf("an entry with only id and type passes Check; a channel has credentials to require")
	}
}

// tagged checks that every exported field of the config struct st has a toml
// tag; an embedded struct without one is a part of the entry (the decoder
// reads its keys as the entry's own), whose fields are checked the same way.
func tagged(t *testing.T, st reflect.Type) {
	for i := range st.NumField() {
		f := st.Field(i)
		switch {
		case !f.IsExported() || f.Tag.Get("toml") != "":
		case f.Anonymous && f.Type.Kind() == reflect.Struct:
			tagged(t, f.Type)
		default:
			t.Errorf("config field %s has no toml tag (its key, or \"-\" for Go callers only)", f.Name)
		}
	}
}

// Webhook returns a POST of the JSON body to path (a channel's
// "/webhooks/<id>"), with header: names and values, in pairs.
func Webhook(path string, body []byte, header ...string) *http.Request {
	r := httptest.NewRequest("POST", path, bytes.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Set(header[i], header[i+1])
	}
	return r
}

// Serve answers r with the routes of ch (its webhooks) and returns the
// answer.
func Serve(ch channel.Router, r *http.Request) *httptest.ResponseRecorder {
	mux := http.NewServeMux()
	ch.Routes(mux)
	w := httptest.NewRecorder()
	mux.ServeHTTP(w, r)
	return w
}

// Panicking is an Admitter that panics as a bug would (a write to a nil
// map) on the messages Boom picks, and passes the others to Admitter: for
// the tests that a panic on one message skips it and spares the rest.
type Panicking struct {
	channel.Admitter
	Boom func(channel.Message) bool
}

// Admit implements channel.Admitter.
func (p Panicking) Admit(ctx context.Context, prov string, m channel.Message) (channel.Admission, error) {
	if p.Boom(m) {
		var x map[string]int
		x["boom"]++
	}
	return p.Admitter.Admit(ctx, prov, m)
}

// Recorder is an Admitter that admits every message, without deduplication,
// and keeps it: for a channel's own webhook tests.
type Recorder struct {
	mu   sync.Mutex
	msgs []channel.Message
}

// Admit implements channel.Admitter.
func (r *Recorder) Admit(_ context.Context, prov string, m channel.Message) (channel.Admission, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, m)
	return channel.Admission{ID: prov + ":" + m.ID}, nil
}

// Take returns the messages admitted since the last Take, in order.
func (r *Recorder) Take() []channel.Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.msgs
	r.msgs = nil
	return out
}

// Refused fails t unless err is a send refused as unsupported content (a
// permanent error) whose message says say, and the channel made no request
// (requests counts the fake's).
func Refused(t testing.TB, err error, say string, requests int32) {
	t.Helper()
	if !errors.Is(err, channel.ErrUnsupportedContent) || !httpkit.Permanent(err) || !strings.Contains(err.Error(), say) {
		t.Fatalf("send: %v, want unsupported content saying %q", err, say)
	}
	if requests != 0 {
		t.Fatalf("%d requests made for a refused send", requests)
	}
}

// NoEditsNoTyping fails t if p claims edits (channel.Editor) or typing
// (channel.Typist): for a channel whose API has neither.
func NoEditsNoTyping(t testing.TB, p any) {
	t.Helper()
	if _, ok := p.(channel.Editor); ok {
		t.Error("the channel claims edits")
	}
	if _, ok := p.(channel.Typist); ok {
		t.Error("the channel claims typing")
	}
}
