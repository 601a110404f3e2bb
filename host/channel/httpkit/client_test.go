package httpkit

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"testing"
	"time"
)

// TestPrivateAddressesRefused: a channel's client dials only public
// addresses, checked on the resolved IP, except its own api_url origin.
func TestPrivateAddressesRefused(t *testing.T) {
	t.Parallel()
	internal := []string{"127.0.0.1", "127.1.2.3", "::1", "10.0.0.1", "172.16.5.4", "192.168.1.1", "169.254.169.254",
		"fe80::1", "fc00::1", "0.0.0.0", "::", "100.64.0.1", "224.0.0.1", "::ffff:127.0.0.1", "::ffff:169.254.169.254",
		"198.18.0.1", "192.0.0.170", "240.0.0.1", "64:ff9b::a9fe:a9fe", "64:ff9b::7f00:1", "2002:a00:1::1"}
	for _, s := range internal {
		if !Internal(netip.MustParseAddr(s)) {
			t.Errorf("%s is not refused", s)
		}
	}
	for _, s := range []string{"149.154.167.220", "31.13.66.1", "2a03:2880:f003:c07:face:b00c::2", "8.8.8.8", "64:ff9b::808:808", "2002:808:808::1"} {
		if Internal(netip.MustParseAddr(s)) {
			t.Errorf("public %s is refused", s)
		}
	}

	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) }))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	// Through another api_url, the same loopback server is refused, by IP and
	// by a name that resolves to loopback.
	other, _ := url.Parse("https://api.example.com")
	c := NewClient(10*time.Second, other, func(*url.URL) bool { return true })
	for _, target := range []string{srv.URL, "http://localhost:" + u.Port()} {
		resp, err := c.Get(target)
		if err == nil {
			resp.Body.Close()
			t.Errorf("%s was dialed", target)
		} else if !errors.Is(err, ErrAddressRefused) {
			t.Errorf("%s: %v, want ErrAddressRefused", target, err)
		}
	}
	// As the configured api_url, it is reachable (the tests' fakes).
	resp, err := NewClient(10*time.Second, u, nil).Get(srv.URL)
	if err != nil {
		t.Fatalf("the api_url origin itself: %v", err)
	}
	resp.Body.Close()
}

// TestRedirectHops: every hop is checked again; a redirect off the allowed
// hosts, to plain http, or past the hop limit is refused.
func TestRedirectHops(t *testing.T) {
	t.Parallel()
	var srv *httptest.Server
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/loop":
			http.Redirect(w, r, "/loop", http.StatusFound)
		case "/away":
			http.Redirect(w, r, "http://evil.example/x", http.StatusFound)
		case "/https-away":
			http.Redirect(w, r, "https://evil.example/x", http.StatusFound)
		case "/ok":
			w.Write([]byte(r.Header.Get("Referer")))
		default:
			http.Redirect(w, r, "/ok", http.StatusFound)
		}
	}))
	defer srv.Close()
	api, _ := url.Parse(srv.URL)
	c := NewClient(10*time.Second, api, func(u *url.URL) bool { return CredentialsAllowed(u, api, "example.org") })
	for _, path := range []string{"/loop", "/away", "/https-away"} {
		resp, err := c.Get(srv.URL + path)
		if err == nil {
			resp.Body.Close()
			t.Errorf("%s followed", path)
		} else if !errors.Is(err, ErrRedirectRefused) {
			t.Errorf("%s: %v, want ErrRedirectRefused", path, err)
		}
	}
	resp, err := c.Get(srv.URL + "/start")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b [64]byte
	if n, _ := resp.Body.Read(b[:]); n != 0 {
		t.Fatalf("the redirected request carried Referer %q", b[:n])
	}
}
