package fetch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// token is the configured credential no error may show.
const token = "sk-test-credential-4242"

// server is an httptest server that counts the requests it got.
type server struct {
	*httptest.Server
	hits atomic.Int32
}

func serve(t *testing.T, h http.HandlerFunc) *server {
	t.Helper()
	s := &server{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.hits.Add(1)
		h(w, r)
	}))
	t.Cleanup(s.Close)
	return s
}

// newCaller returns a Caller of base with the token configured and private
// addresses allowed (the tests' servers are on loopback), as mod changes it.
func newCaller(t *testing.T, base string, opts Options, mod func(*API)) *Caller {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	api := API{Name: "crm", Base: u, Headers: map[string]string{"Authorization": "Bearer " + token}, AllowPrivate: true}
	if mod != nil {
		mod(&api)
	}
	c, err := New(api, opts)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// noCredential fails the test when err shows the configured token.
func noCredential(t *testing.T, err error) {
	t.Helper()
	if err != nil && strings.Contains(err.Error(), token) {
		t.Fatalf("the error shows the credential: %v", err)
	}
}

// callError is the *Error of err, which must have reason.
func callError(t *testing.T, err error, reason string) *Error {
	t.Helper()
	noCredential(t, err)
	var e *Error
	if !errors.As(err, &e) || e.Reason != reason {
		t.Fatalf("err = %v; want an Error %q", err, reason)
	}
	return e
}

func do(t *testing.T, c *Caller, req Request) (Response, error) {
	t.Helper()
	if req.Key == "" {
		req.Key = "rec-1:fetch:0"
	}
	resp, err := c.Do(context.Background(), req)
	noCredential(t, err)
	return resp, err
}

func TestDoRefusesBadPathsUnsent(t *testing.T) {
	s := serve(t, func(http.ResponseWriter, *http.Request) {})
	c := newCaller(t, s.URL+"/v1", Options{}, nil)
	for _, p := range escapes {
		if _, err := do(t, c, Request{Path: p}); !errors.Is(err, ErrBadPath) {
			t.Errorf("Do(%q) = %v; want ErrBadPath", p, err)
		}
	}
	if n := s.hits.Load(); n != 0 {
		t.Fatalf("the server got %d requests for refused paths", n)
	}
}

func TestDoJoinsPathUnderPrefix(t *testing.T) {
	s := serve(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, r.URL.RequestURI()) })
	c := newCaller(t, s.URL+"/v1", Options{}, nil)
	resp, err := do(t, c, Request{Path: "/chat/a%20b?x=1&y=%2F"})
	if err != nil || resp.Status != 200 || string(resp.Body) != "/v1/chat/a%20b?x=1&y=%2F" || resp.Attempts != 1 {
		t.Fatalf("Do = %+v, %v", resp, err)
	}
}

func TestDoHeaders(t *testing.T) {
	var got http.Header
	s := serve(t, func(w http.ResponseWriter, r *http.Request) {
		got = r.Header.Clone()
		w.Header().Add("X-Multi", "first")
		w.Header().Add("X-Multi", "second")
		w.Header()["x-raw"] = []string{"raw"}
	})
	c := newCaller(t, s.URL, Options{}, func(a *API) { a.Headers["x-api-key"] = "k-" + token })
	resp, err := do(t, c, Request{Method: "POST", Path: "/o", Key: "rec-7:fetch:2", Header: map[string]string{
		"authorization":   "Bearer guest",
		"X-API-KEY":       "guest",
		"Idempotency-Key": "guest-key",
		"X-Trace":         "t1",
	}})
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{
		"Authorization":   "Bearer " + token,
		"X-Api-Key":       "k-" + token,
		"Idempotency-Key": "rec-7:fetch:2",
		"X-Trace":         "t1",
		"User-Agent":      "botrun",
	} {
		if v := got.Values(name); len(v) != 1 || v[0] != want {
			t.Errorf("header %s = %q; want %q", name, v, want)
		}
	}
	if resp.Header["X-Multi"] != "first" || resp.Header["X-Raw"] != "raw" {
		t.Errorf("response headers = %v; want canonical names, first value each", resp.Header)
	}
	if _, err := do(t, c, Request{Path: "/", Header: map[string]string{"user-agent": "mybot/1"}}); err != nil || got.Get("User-Agent") != "mybot/1" {
		t.Errorf("the guest's User-Agent: %v, sent %q", err, got.Get("User-Agent"))
	}
}

func TestDoRefusesBadRequestsUnsent(t *testing.T) {
	s := serve(t, func(http.ResponseWriter, *http.Request) {})
	c := newCaller(t, s.URL, Options{}, nil)
	bad := []Request{
		{Method: "CONNECT", Path: "/"}, {Method: "TRACE", Path: "/"}, {Method: "get", Path: "/"},
		{Path: "/", Body: make([]byte, MaxRequestBody+1), Method: "POST"},
		{Path: "/", Key: "a\r\nb"},
		{Path: "/", Header: map[string]string{"X-A": "1", "x-a": "2"}},
	}
	for _, name := range []string{"Host", "content-length", "Transfer-Encoding", "connection", "Upgrade", "TE", "Trailer", "Proxy-Authorization", "proxy-connection", "X A", "X:A", "", "X\nA", "é"} {
		bad = append(bad, Request{Path: "/", Header: map[string]string{name: "v"}})
	}
	for _, value := range []string{"a\r\nb", "a\nb", "a\rb", "a\x00b", "a\x01b"} {
		bad = append(bad, Request{Path: "/", Header: map[string]string{"X-A": value}})
	}
	for _, req := range bad {
		if _, err := do(t, c, req); !errors.Is(err, ErrBadRequest) {
			t.Errorf("Do(%q %v) = %v; want ErrBadRequest", req.Method, req.Header, err)
		}
	}
	if _, err := c.Do(context.Background(), Request{Path: "/"}); !errors.Is(err, ErrBadRequest) {
		t.Errorf("Do without a Key = %v; want ErrBadRequest", err)
	}
	if n := s.hits.Load(); n != 0 {
		t.Fatalf("the server got %d bad requests", n)
	}
	if _, err := do(t, c, Request{Method: "PUT", Path: "/", Body: make([]byte, MaxRequestBody), Header: map[string]string{"X-A": "tab\tok"}}); err != nil {
		t.Fatalf("a body of MaxRequestBody: %v", err)
	}
}

// lookup answers addrs for every name and counts its calls.
func lookup(calls *atomic.Int32, addrs ...string) func(context.Context, string) ([]net.IP, error) {
	return func(context.Context, string) ([]net.IP, error) {
		calls.Add(1)
		ips := make([]net.IP, len(addrs))
		for i, a := range addrs {
			ips[i] = net.ParseIP(a)
		}
		return ips, nil
	}
}

func TestDoRefusesNonPublicAddresses(t *testing.T) {
	s := serve(t, func(http.ResponseWriter, *http.Request) {})
	_, port, _ := net.SplitHostPort(s.Listener.Addr().String())
	for _, addrs := range [][]string{
		{"10.0.0.1"}, {"172.16.5.4"}, {"192.168.1.1"}, {"127.0.0.1"}, {"::1"}, {"169.254.169.254"},
		{"fe80::1"}, {"0.0.0.0"}, {"::"}, {"100.64.0.1"}, {"fc00::1"}, {"fd12::1"}, {"::ffff:127.0.0.1"},
		{"::ffff:10.0.0.1"}, {"::ffff:169.254.169.254"}, {"224.0.0.1"}, {"ff02::1"}, {"64:ff9b::a9fe:a9fe"},
		{"2002:7f00:1::1"}, {"255.255.255.255"}, {"93.184.216.34", "10.0.0.1"},
		{"::127.0.0.1"}, {"::a9fe:a9fe"}, {"2001:0:4136:e378:8000:63bf:3fff:fdd2"}, {"2001:db8::1"}, {"100::1"}, {"64:ff9b:1::a00:1"},
	} {
		var lookups, dials atomic.Int32
		c := newCaller(t, "http://api.example.test:"+port, Options{LookupIP: lookup(&lookups, addrs...)}, func(a *API) {
			a.AllowPrivate = false
			a.Retries = 2
		})
		c.dial = func(context.Context, string, string) (net.Conn, error) {
			dials.Add(1)
			return nil, errors.New("dialed")
		}
		_, err := do(t, c, Request{Path: "/"})
		e := callError(t, err, ReasonRefused)
		if lookups.Load() == 0 || dials.Load() != 0 || !strings.Contains(e.Message, "allow_private") {
			t.Errorf("%v: lookups %d, dials %d, message %q", addrs, lookups.Load(), dials.Load(), e.Message)
		}
	}
	c := newCaller(t, s.URL, Options{}, func(a *API) { a.AllowPrivate = false })
	_, err := do(t, c, Request{Path: "/"})
	callError(t, err, ReasonRefused)
	if n := s.hits.Load(); n != 0 {
		t.Fatalf("the server got %d requests to refused addresses", n)
	}
}

func TestNonPublicLetsPublicThrough(t *testing.T) {
	for _, a := range []string{"93.184.216.34", "8.8.8.8", "2606:4700::1111", "::ffff:8.8.8.8", "64:ff9b::808:808", "100.128.0.1", "::808:808", "2001:4860::8888"} {
		if kind := nonPublic(netip.MustParseAddr(a)); kind != "" {
			t.Errorf("nonPublic(%s) = %q; want public", a, kind)
		}
	}
}

func TestDoDialsTheResolvedAddress(t *testing.T) {
	var host string
	s := serve(t, func(w http.ResponseWriter, r *http.Request) { host = r.Host })
	_, port, _ := net.SplitHostPort(s.Listener.Addr().String())
	var lookups atomic.Int32
	c := newCaller(t, "http://api.example.test:"+port, Options{LookupIP: lookup(&lookups, "127.0.0.1")}, nil)
	resp, err := do(t, c, Request{Path: "/"})
	if err != nil || resp.Status != 200 || host != "api.example.test:"+port || lookups.Load() != 1 {
		t.Fatalf("Do = %+v, %v; Host %q, lookups %d", resp, err, host, lookups.Load())
	}
}

func TestDoRedirects(t *testing.T) {
	other := serve(t, func(http.ResponseWriter, *http.Request) {})
	s := serve(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/a":
			http.Redirect(w, r, "/b", http.StatusFound)
		case "/b":
			io.WriteString(w, "b "+r.Header.Get("Authorization"))
		case "/away":
			http.Redirect(w, r, other.URL+"/x", http.StatusFound)
		case "/loop":
			http.Redirect(w, r, "/loop", http.StatusFound)
		}
	})
	c := newCaller(t, s.URL, Options{}, nil)
	resp, err := do(t, c, Request{Path: "/a"})
	if err != nil || resp.Status != 200 || string(resp.Body) != "b Bearer "+token {
		t.Fatalf("same origin: %d %q, %v", resp.Status, resp.Body, err)
	}
	resp, err = do(t, c, Request{Path: "/away"})
	if err != nil || resp.Status != http.StatusFound || resp.Header["Location"] != other.URL+"/x" || other.hits.Load() != 0 {
		t.Fatalf("off origin: %+v, %v; the other server got %d", resp, err, other.hits.Load())
	}
	before := s.hits.Load()
	resp, err = do(t, c, Request{Path: "/loop"})
	if err != nil || resp.Status != http.StatusFound || s.hits.Load()-before != 1+maxRedirects {
		t.Fatalf("a loop: %+v, %v after %d requests", resp, err, s.hits.Load()-before)
	}
}

func TestDoRetries503ThenAnswers(t *testing.T) {
	var mu sync.Mutex
	var bodies []string
	s := serve(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, string(b)+" "+r.Header.Get("Idempotency-Key"))
		n := len(bodies)
		mu.Unlock()
		if n == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "ok")
	})
	c := newCaller(t, s.URL, Options{}, func(a *API) { a.Retries = 2 })
	resp, err := do(t, c, Request{Method: "POST", Path: "/o", Body: []byte(`{"n":1}`)})
	if err != nil || resp.Status != 200 || resp.Attempts != 2 || string(resp.Body) != "ok" {
		t.Fatalf("Do = %+v, %v", resp, err)
	}
	if len(bodies) != 2 || bodies[0] != bodies[1] || bodies[0] != `{"n":1} rec-1:fetch:0` {
		t.Fatalf("the attempts sent %q; want the same body and key twice", bodies)
	}
}

func TestDoHonoursRetryAfter(t *testing.T) {
	var calls atomic.Int32
	s := serve(t, func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
		}
	})
	c := newCaller(t, s.URL, Options{}, func(a *API) { a.Retries = 1 })
	start := time.Now()
	resp, err := do(t, c, Request{Path: "/"})
	if err != nil || resp.Status != 200 || resp.Attempts != 2 {
		t.Fatalf("Do = %+v, %v", resp, err)
	}
	if waited := time.Since(start); waited < 900*time.Millisecond {
		t.Fatalf("retried after %s; Retry-After asked for 1s", waited)
	}
}

func TestDoStopsWhenRetryAfterPassesTimeout(t *testing.T) {
	s := serve(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "60")
		w.WriteHeader(http.StatusTooManyRequests)
	})
	c := newCaller(t, s.URL, Options{}, func(a *API) { a.Retries = 3; a.Timeout = 5 * time.Second })
	resp, err := do(t, c, Request{Path: "/"})
	if err != nil || resp.Status != http.StatusTooManyRequests || resp.Attempts != 1 || resp.Header["Retry-After"] != "60" {
		t.Fatalf("Do = %+v, %v; want the 429 at once", resp, err)
	}
}

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for value, want := range map[string]time.Duration{
		"": -1, "soon": -1, "-1": -1, "0": 0, "7": 7 * time.Second,
		now.Add(3 * time.Second).Format(http.TimeFormat): 3 * time.Second,
		now.Add(-time.Hour).Format(http.TimeFormat):      0,
	} {
		if got := retryAfter(value, now); got != want {
			t.Errorf("retryAfter(%q) = %s; want %s", value, got, want)
		}
	}
}

func TestBackoffDoublesToItsCap(t *testing.T) {
	for attempt, want := range map[int]time.Duration{1: 250 * time.Millisecond, 2: 500 * time.Millisecond, 4: 2 * time.Second, 5: 4 * time.Second, 60: 4 * time.Second} {
		if got := backoff(attempt); got < want/2 || got > want {
			t.Errorf("backoff(%d) = %s; want %s less up to half", attempt, got, want)
		}
	}
}

func TestDoReturnsTheLast500(t *testing.T) {
	s := serve(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
		io.WriteString(w, "down")
	})
	c := newCaller(t, s.URL, Options{}, func(a *API) { a.Retries = 2 })
	resp, err := do(t, c, Request{Path: "/"})
	if err != nil || resp.Status != 500 || resp.Attempts != 3 || string(resp.Body) != "down" || s.hits.Load() != 3 {
		t.Fatalf("Do = %+v, %v after %d requests", resp, err, s.hits.Load())
	}
}

func TestDoConnectionRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	c := newCaller(t, "http://"+addr, Options{}, func(a *API) { a.Retries = 1 })
	_, err = do(t, c, Request{Path: "/"})
	if e := callError(t, err, ReasonConnection); !strings.Contains(e.Message, "attempts: 2") {
		t.Fatalf("message %q; want the attempts counted", e.Message)
	}
}

// blocking is a server whose handler answers nothing until the test ends;
// arrived receives each request as it comes.
func blocking(t *testing.T) (*server, chan struct{}) {
	release, arrived := make(chan struct{}), make(chan struct{}, 16)
	s := serve(t, func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	t.Cleanup(func() { close(release) }) // runs before s.Close
	return s, arrived
}

func TestDoTimesOut(t *testing.T) {
	s, _ := blocking(t)
	c := newCaller(t, s.URL, Options{}, func(a *API) { a.Timeout = 300 * time.Millisecond; a.Retries = 2 })
	_, err := do(t, c, Request{Path: "/"})
	callError(t, err, ReasonTimeout)
}

func TestDoReturnsParentCancellation(t *testing.T) {
	s, arrived := blocking(t)
	c := newCaller(t, s.URL, Options{}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-arrived
		cancel()
	}()
	_, err := c.Do(ctx, Request{Path: "/", Key: "k"})
	noCredential(t, err)
	var e *Error
	if !errors.Is(err, context.Canceled) || errors.As(err, &e) {
		t.Fatalf("err = %v; want context.Canceled", err)
	}
}

func TestDoCapsTheResponse(t *testing.T) {
	s := serve(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, r.URL.Query().Get("body")) })
	c := newCaller(t, s.URL, Options{}, func(a *API) { a.MaxResponse = 10; a.Retries = 2 })
	if resp, err := do(t, c, Request{Path: "/?body=0123456789"}); err != nil || string(resp.Body) != "0123456789" {
		t.Fatalf("a body at the cap: %+v, %v", resp, err)
	}
	_, err := do(t, c, Request{Path: "/?body=0123456789X"})
	callError(t, err, ReasonTooLarge)
	if n := s.hits.Load(); n != 2 {
		t.Fatalf("the server got %d requests; a body over the cap is not retried", n)
	}
}

// TestDoCapsTheResponseHeaders: an answer whose headers pass 64 KiB is no
// answer (its headers are not held).
func TestDoCapsTheResponseHeaders(t *testing.T) {
	s := serve(t, func(w http.ResponseWriter, r *http.Request) {
		for i := range 40 {
			w.Header().Set(fmt.Sprintf("X-Big-%d", i), strings.Repeat("x", 2048))
		}
	})
	c := newCaller(t, s.URL, Options{}, func(a *API) { a.Retries = 0 })
	_, err := do(t, c, Request{Path: "/"})
	callError(t, err, ReasonConnection)
}

func TestNewChecksTheAPI(t *testing.T) {
	for _, base := range []string{"", "ftp://h/x", "https://user:" + token + "@h/", "https://h/?k=" + token, "https://h/#f", "https:///x", "mailto:a@b", "https://h/v1/../x", "https://h/%2e%2e"} {
		u, _ := url.Parse(base)
		if base == "" {
			u = nil
		}
		_, err := New(API{Name: "crm", Base: u}, Options{})
		if err == nil {
			t.Errorf("New(%q) accepted it", base)
		}
		if u != nil && u.User == nil && u.RawQuery == "" {
			noCredential(t, err)
		}
	}
	u, _ := url.Parse("https://api.example.com")
	for _, api := range []API{
		{Base: u},
		{Name: "crm", Base: u, Timeout: -1},
		{Name: "crm", Base: u, Retries: -1},
		{Name: "crm", Base: u, Headers: map[string]string{"Authorization": token + "\r\nX: y"}},
		{Name: "crm", Base: u, Headers: map[string]string{"Host": token}},
		{Name: "crm", Base: u, Headers: map[string]string{"Bad Name": token}},
	} {
		_, err := New(api, Options{})
		if err == nil {
			t.Errorf("New(%+v) accepted it", api)
		}
		noCredential(t, err)
	}
}

func TestFingerprint(t *testing.T) {
	req := Request{Method: "POST", Path: "/o?x=1", Header: map[string]string{"X-A": "1", "x-b": "2"}, Body: []byte("b"), Key: "k1"}
	fp := Fingerprint("crm", req)
	if len(fp) != 64 {
		t.Fatalf("Fingerprint = %q; want hex SHA-256", fp)
	}
	same := req
	same.Key = "k2"
	same.Header = map[string]string{"x-b": "2", "x-a": "1"}
	if Fingerprint("crm", same) != fp {
		t.Error("the key or the headers' case changed the fingerprint")
	}
	if Fingerprint("crm", Request{Path: "/"}) != Fingerprint("crm", Request{Method: "GET", Path: "/"}) {
		t.Error("an empty method is not GET")
	}
	for _, other := range []func(*Request){
		func(r *Request) { r.Method = "PUT" },
		func(r *Request) { r.Path = "/o?x=2" },
		func(r *Request) { r.Body = []byte("c") },
		func(r *Request) { r.Header = map[string]string{"X-A": "1", "x-b": "3"} },
		func(r *Request) { r.Header = map[string]string{"X-A": "1"} },
		func(r *Request) { r.Header = map[string]string{"X-A": "1", "x-b": "2", "X-C": ""} },
	} {
		r := req
		other(&r)
		if Fingerprint("crm", r) == fp {
			t.Errorf("%+v has the fingerprint of %+v", r, req)
		}
	}
	if Fingerprint("llm", req) == fp {
		t.Error("the API's name is not in the fingerprint")
	}
}

func TestDoIsSafeForConcurrentUse(t *testing.T) {
	s := serve(t, func(w http.ResponseWriter, r *http.Request) { w.Write(bytes.Repeat([]byte("x"), 100)) })
	c := newCaller(t, s.URL, Options{}, nil)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if resp, err := c.Do(context.Background(), Request{Path: "/", Key: "k"}); err != nil || len(resp.Body) != 100 {
				t.Errorf("Do = %d bytes, %v", len(resp.Body), err)
			}
		})
	}
	wg.Wait()
}

func TestDoSpeaksTLSToTheNameItResolved(t *testing.T) {
	s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.Proto+" "+r.TLS.ServerName)
	}))
	s.EnableHTTP2 = true
	s.StartTLS()
	t.Cleanup(s.Close)
	_, port, _ := net.SplitHostPort(s.Listener.Addr().String())
	var lookups atomic.Int32
	c := newCaller(t, "https://example.com:"+port, Options{LookupIP: lookup(&lookups, "127.0.0.1")}, nil)
	c.client.Transport.(*http.Transport).TLSClientConfig = s.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
	resp, err := do(t, c, Request{Path: "/"})
	if err != nil || string(resp.Body) != "HTTP/2.0 example.com" {
		t.Fatalf("Do = %q, %v; want HTTP/2 with the name example.com (the test certificate's)", resp.Body, err)
	}
}
