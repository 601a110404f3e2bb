package fetch

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// API is one [[apis]] entry as the host resolved it.
type API struct {
	// Name is what the guest calls the API by.
	Name string
	// Base is http or https, a host, an optional path prefix; no query,
	// fragment or userinfo.
	Base *url.URL
	// Headers are the configured headers (credentials): they override the
	// guest's of the same name, case-insensitively, and are never in an
	// error message.
	Headers map[string]string
	// Timeout bounds the whole call, retries and their waits included
	// (0: 10s).
	Timeout time.Duration
	// MaxResponse is the response body cap in bytes (0: 1 MiB).
	MaxResponse int64
	// Retries is how many retries may follow the first attempt (on
	// connection errors, 429 and 5xx).
	Retries int
	// AllowPrivate allows loopback, private, link-local, metadata and
	// unspecified addresses.
	AllowPrivate bool
}

// Request is what the guest asks for.
type Request struct {
	// Method is GET (the default when empty), HEAD, POST, PUT, PATCH or
	// DELETE; anything else is ErrBadRequest.
	Method string
	// Path is a plain absolute path with an optional query, "/orders/42?x=1",
	// taken under Base's path prefix.
	Path string
	// Header holds the guest's headers.
	Header map[string]string
	// Body is at most MaxRequestBody bytes.
	Body []byte
	// Key is sent as Idempotency-Key (the host derives it; required).
	Key string
}

// Response is an answer of the API, whatever its status: a 404, or a 500
// after the retries, is a Response, not an error.
type Response struct {
	Status int
	// Header holds the answer's headers: canonical names, first value each.
	Header map[string]string
	Body   []byte
	// Attempts is how many requests were made (1 + retries used).
	Attempts int
}

// MaxRequestBody is the cap on a request body, in bytes.
const MaxRequestBody = 1 << 20

// Errors about the guest's request: nothing was sent. The host answers
// them BAD_PAYLOAD.
var (
	// ErrBadPath is a path that is not a plain absolute path under the base.
	ErrBadPath = errors.New("fetch: bad path")
	// ErrBadRequest is a bad method, header name or value, a body over
	// MaxRequestBody, or a missing Key.
	ErrBadRequest = errors.New("fetch: bad request")
)

// Error is a call that got no usable response. Reason is one of the
// Reason* constants; Message is safe to show the guest and to log (it
// never holds a configured header value).
type Error struct {
	Reason, Message string
}

// Error returns the reason and the message.
func (e *Error) Error() string { return "fetch: " + e.Reason + ": " + e.Message }

// The reasons of an Error.
const (
	// ReasonRefused is a destination that is not allowed (a private address
	// without AllowPrivate): nothing was sent to it.
	ReasonRefused = "refused"
	// ReasonConnection is a call that could not connect, or whose
	// connection broke, after the retries.
	ReasonConnection = "connection"
	// ReasonTimeout is a call that passed API.Timeout.
	ReasonTimeout = "timeout"
	// ReasonTooLarge is a response body over API.MaxResponse.
	ReasonTooLarge = "too-large"
)

// Options are the caller's dependencies.
type Options struct {
	// LookupIP resolves a host name (default: net.DefaultResolver's
	// LookupIPAddr, its IPs). Tests pass their own to prove a refusal
	// without ever sending to such an address.
	LookupIP func(ctx context.Context, host string) ([]net.IP, error)
}

const (
	defaultTimeout     = 10 * time.Second
	defaultMaxResponse = 1 << 20
	maxRedirects       = 5
	maxResponseHeader  = 64 << 10
	firstBackoff       = 250 * time.Millisecond
	maxBackoff         = 4 * time.Second
)

// Caller calls one API. Safe for concurrent use.
type Caller struct {
	api      API
	headers  http.Header // the configured headers, canonical names
	lookupIP func(ctx context.Context, host string) ([]net.IP, error)
	// dial connects to an address dialChecked has checked (a net.Dialer's;
	// the package's tests count the dials through it).
	dial   func(ctx context.Context, network, addr string) (net.Conn, error)
	client *http.Client
}

// New returns the Caller of api, after checking it: a Name, a Base as
// API describes it, valid configured headers, no negative limits.
func New(api API, opts Options) (*Caller, error) {
	if api.Name == "" {
		return nil, errors.New("fetch: an API needs a name (the one the guest calls it by)")
	}
	if err := checkBase(api.Base); err != nil {
		return nil, fmt.Errorf("fetch: API %q: %w", api.Name, err)
	}
	if api.Timeout < 0 || api.MaxResponse < 0 || api.Retries < 0 {
		return nil, fmt.Errorf("fetch: API %q: timeout, max_response and retries may not be negative (0 takes the default)", api.Name)
	}
	if api.Timeout == 0 {
		api.Timeout = defaultTimeout
	}
	if api.MaxResponse == 0 {
		api.MaxResponse = defaultMaxResponse
	}
	headers := make(http.Header, len(api.Headers))
	for name, value := range api.Headers {
		canon, err := checkHeader(name, value)
		if err != nil {
			return nil, fmt.Errorf("fetch: API %q: configured %w", api.Name, err)
		}
		headers[canon] = []string{value}
	}
	c := &Caller{api: api, headers: headers, lookupIP: opts.LookupIP, dial: (&net.Dialer{}).DialContext}
	if c.lookupIP == nil {
		c.lookupIP = lookupDefault
	}
	transport := &http.Transport{
		Proxy:               nil, // never a proxy from the environment: the dial is what is checked
		DialContext:         c.dialChecked,
		ForceAttemptHTTP2:   true,
		MaxIdleConnsPerHost: 16,
		IdleConnTimeout:     90 * time.Second,
		TLSHandshakeTimeout: 10 * time.Second,
		// The answer's headers are held in memory: bounded like its body.
		MaxResponseHeaderBytes: maxResponseHeader,
	}
	c.client = &http.Client{Transport: transport, CheckRedirect: c.checkRedirect}
	return c, nil
}

// checkBase checks an API's base URL.
func checkBase(base *url.URL) error {
	switch {
	case base == nil:
		return errors.New("no url: give the API's base, https://host/prefix")
	case base.Scheme != "http" && base.Scheme != "https":
		return fmt.Errorf("url scheme %q: use http or https", base.Scheme)
	case base.Opaque != "" || base.Hostname() == "":
		return errors.New("url has no host: give the API's base, https://host/prefix")
	case base.User != nil:
		return errors.New("url has userinfo: put credentials in the API's headers")
	case base.RawQuery != "" || base.ForceQuery || base.Fragment != "":
		return errors.New("url has a query or a fragment: the base is a scheme, a host and a path prefix")
	}
	if err := checkSegments(base.EscapedPath()); err != nil {
		return fmt.Errorf("url path: %w", err)
	}
	return nil
}

// checkRedirect follows at most maxRedirects redirects, all on the API's
// origin; otherwise the client returns the redirect itself as the answer.
func (c *Caller) checkRedirect(req *http.Request, via []*http.Request) error {
	if len(via) > maxRedirects || origin(req.URL) != origin(c.api.Base) {
		return http.ErrUseLastResponse
	}
	return nil
}

// origin is u's scheme, host and port (the scheme's default port when u
// names none).
func origin(u *url.URL) string {
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	return strings.ToLower(u.Scheme) + "://" + net.JoinHostPort(strings.ToLower(u.Hostname()), port)
}

// methods are the methods a guest may use.
var methods = []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}

// Close closes the Caller's idle connections; a call made after it opens
// new ones.
func (c *Caller) Close() { c.client.CloseIdleConnections() }

// Name is the API's name, as the guest calls it.
func (c *Caller) Name() string { return c.api.Name }

// Do makes the call req asks for and returns the API's answer, whatever its
// status. Errors: ErrBadPath or ErrBadRequest (wrapped) for a request that
// was not sent, *Error for a call that got no usable answer, and the
// parent ctx's error (wrapped) when ctx ends first.
func (c *Caller) Do(ctx context.Context, req Request) (Response, error) {
	method := req.Method
	if method == "" {
		method = http.MethodGet
	}
	if !slices.Contains(methods, method) {
		return Response{}, fmt.Errorf("%w: method %q: use one of %s", ErrBadRequest, method, strings.Join(methods, ", "))
	}
	target, err := joinPath(c.api.Base, req.Path)
	if err != nil {
		return Response{}, err
	}
	if len(req.Body) > MaxRequestBody {
		return Response{}, fmt.Errorf("%w: the body is %d bytes, over the %d a request may send", ErrBadRequest, len(req.Body), MaxRequestBody)
	}
	header, err := c.header(req)
	if err != nil {
		return Response{}, err
	}
	callCtx, cancel := context.WithTimeout(ctx, c.api.Timeout)
	defer cancel()
	deadline, _ := callCtx.Deadline()
	for attempt := 1; ; attempt++ {
		resp, err := c.attempt(callCtx, method, target, header, req.Body)
		resp.Attempts = attempt
		var wait time.Duration
		var refused *refusal
		var tooLarge *tooLargeError
		switch {
		case ctx.Err() != nil:
			return Response{}, fmt.Errorf("fetch: API %q: the call was abandoned: %w", c.api.Name, ctx.Err())
		case errors.As(err, &refused):
			return Response{}, &Error{Reason: ReasonRefused, Message: fmt.Sprintf(
				"API %q: %v: not sent (a private destination needs allow_private = true in bot.toml)", c.api.Name, refused)}
		case errors.As(err, &tooLarge):
			return Response{}, &Error{Reason: ReasonTooLarge, Message: fmt.Sprintf(
				"API %q: the response body is over max_response (%d bytes): raise max_response in bot.toml or ask the API for less", c.api.Name, c.api.MaxResponse)}
		case err != nil && callCtx.Err() != nil:
			return Response{}, &Error{Reason: ReasonTimeout, Message: fmt.Sprintf(
				"API %q: no answer within its timeout of %s (attempts: %d): raise timeout in bot.toml if the API is slow", c.api.Name, c.api.Timeout, attempt)}
		case err != nil:
			if attempt > c.api.Retries {
				return Response{}, c.connectionError(err, attempt)
			}
			wait = backoff(attempt)
		case !retryable(resp.Status) || attempt > c.api.Retries:
			return resp, nil
		default:
			wait = retryAfter(resp.Header["Retry-After"], time.Now())
			if wait < 0 {
				wait = backoff(attempt)
			}
		}
		if time.Until(deadline) <= wait {
			if err != nil {
				return Response{}, c.connectionError(err, attempt)
			}
			return resp, nil
		}
		timer := time.NewTimer(wait)
		select {
		case <-timer.C:
		case <-callCtx.Done():
			timer.Stop()
		}
	}
}

// retryable tells whether an answer with status is tried again.
func retryable(status int) bool {
	return status == http.StatusTooManyRequests || status >= 500
}

// connectionError is the Error of a call whose last attempt failed with err.
func (c *Caller) connectionError(err error, attempts int) *Error {
	var uerr *url.Error
	if errors.As(err, &uerr) {
		err = uerr.Err // the URL is the guest's own; the cause is what it needs
	}
	return &Error{Reason: ReasonConnection, Message: fmt.Sprintf(
		"API %q: no answer (attempts: %d): %v (check that the API is up and its url in bot.toml)", c.api.Name, attempts, err)}
}

// backoff is the wait after the attempt-th attempt failed: 250ms doubling,
// at most 4s, less up to half of it at random (so callers spread out).
func backoff(attempt int) time.Duration {
	d := maxBackoff
	if attempt <= 5 {
		d = min(firstBackoff<<(attempt-1), maxBackoff)
	}
	return d - rand.N(d/2+1)
}

// retryAfter is the wait a Retry-After value asks for (seconds, or an HTTP
// date), or -1 when it is absent or unreadable.
func retryAfter(value string, now time.Time) time.Duration {
	if value == "" {
		return -1
	}
	if secs, err := strconv.ParseUint(strings.TrimSpace(value), 10, 32); err == nil {
		return time.Duration(secs) * time.Second
	}
	if at, err := http.ParseTime(value); err == nil {
		return max(at.Sub(now), 0)
	}
	return -1
}

// tooLargeError is a response body over MaxResponse.
type tooLargeError struct{}

func (*tooLargeError) Error() string { return "response body over max_response" }

// attempt sends the request once and reads its answer.
func (c *Caller) attempt(ctx context.Context, method string, target *url.URL, header http.Header, body []byte) (Response, error) {
	hreq, err := http.NewRequestWithContext(ctx, method, target.String(), bytes.NewReader(body))
	if err != nil {
		return Response{}, fmt.Errorf("build the request: %w", err)
	}
	hreq.Header = header.Clone()
	resp, err := c.client.Do(hreq)
	if err != nil {
		return Response{}, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, c.api.MaxResponse+1))
	if err != nil {
		return Response{}, fmt.Errorf("read the response: %w", err)
	}
	if int64(len(data)) > c.api.MaxResponse {
		return Response{}, &tooLargeError{}
	}
	out := Response{Status: resp.StatusCode, Header: make(map[string]string, len(resp.Header)), Body: data}
	for name, values := range resp.Header {
		if len(values) > 0 {
			out.Header[http.CanonicalHeaderKey(name)] = values[0]
		}
	}
	return out, nil
}

// header is what a request sends: the guest's headers, the configured ones
// over them, the Idempotency-Key, and a User-Agent if none was given.
func (c *Caller) header(req Request) (http.Header, error) {
	if req.Key == "" {
		return nil, fmt.Errorf("%w: no Key: every call carries an Idempotency-Key the host derives", ErrBadRequest)
	}
	if !validValue(req.Key) {
		return nil, fmt.Errorf("%w: the Key has a control character", ErrBadRequest)
	}
	h := make(http.Header, len(req.Header)+len(c.headers)+2)
	for name, value := range req.Header {
		canon, err := checkHeader(name, value)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrBadRequest, err)
		}
		if _, twice := h[canon]; twice {
			return nil, fmt.Errorf("%w: header %q is given twice (names are case-insensitive): give it once", ErrBadRequest, canon)
		}
		h[canon] = []string{value}
	}
	for name, values := range c.headers {
		h[name] = values
	}
	h["Idempotency-Key"] = []string{req.Key}
	if _, ok := h["User-Agent"]; !ok {
		h["User-Agent"] = []string{"botrun"}
	}
	return h, nil
}

// checkHeader checks a header a request may carry and returns its
// canonical name. Its errors name the header, never its value.
func checkHeader(name, value string) (string, error) {
	if !validName(name) {
		return "", fmt.Errorf("header name %q is not an HTTP token: use letters, digits and !#$%%&'*+-.^_`|~", name)
	}
	canon := http.CanonicalHeaderKey(name)
	switch canon {
	case "Host", "Content-Length", "Transfer-Encoding", "Connection", "Upgrade", "Te", "Trailer":
		return "", fmt.Errorf("header %q is set by the host, not by a request: leave it out", canon)
	}
	if strings.HasPrefix(canon, "Proxy-") {
		return "", fmt.Errorf("header %q is for proxies, not the API: leave it out", canon)
	}
	if !validValue(value) {
		return "", fmt.Errorf("header %q has a control character (CR, LF, NUL...) in its value: remove it", canon)
	}
	return canon, nil
}

// validName tells whether name is an HTTP token (RFC 9110, 5.6.2).
func validName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		alnum := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
		if !alnum && !strings.ContainsRune("!#$%&'*+-.^_`|~", rune(c)) {
			return false
		}
	}
	return true
}

// validValue tells whether value has no control character but tabs.
func validValue(value string) bool {
	for i := 0; i < len(value); i++ {
		if c := value[i]; c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

// Fingerprint is the hex SHA-256 of what identifies a call: the API's
// name, the method (GET when empty), the path and query, the guest's
// headers (names lower-cased, sorted) and the body; never the configured
// headers and never the key.
func Fingerprint(api string, req Request) string {
	h := sha256.New()
	field := func(b []byte) {
		h.Write(binary.BigEndian.AppendUint64(nil, uint64(len(b))))
		h.Write(b)
	}
	method := req.Method
	if method == "" {
		method = http.MethodGet
	}
	field([]byte(api))
	field([]byte(method))
	field([]byte(req.Path))
	pairs := make([][2]string, 0, len(req.Header))
	for name, value := range req.Header {
		pairs = append(pairs, [2]string{strings.ToLower(name), value})
	}
	slices.SortFunc(pairs, func(a, b [2]string) int {
		if c := strings.Compare(a[0], b[0]); c != 0 {
			return c
		}
		return strings.Compare(a[1], b[1])
	})
	field([]byte(strconv.Itoa(len(pairs))))
	for _, p := range pairs {
		field([]byte(p[0]))
		field([]byte(p[1]))
	}
	field(req.Body)
	return hex.EncodeToString(h.Sum(nil))
}
