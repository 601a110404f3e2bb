package fetch

import (
	"errors"
	"net/url"
	"path"
	"strings"
	"testing"
)

// escapes are paths that try to leave the base or smuggle something in.
var escapes = []string{
	"", "x", "orders/42", "//evil.com/x", "http://x", "https://evil.com/x", "\\x", "/a\\b",
	"/../x", "/a/../../x", "/./x", "/a/.", "/..", "/%2e%2e/x", "/%2E%2e/x", "/.%2e/x", "/%2e/x", "/..;/x", "/a/..;jsessionid=1/x", "/.;x/y", "/%2e%2e%3b/x",
	"/a/%2F/b", "/a%2fb", "/a%5cb", "/a#b", "/a b", "/\x00", "/a\r\nHost: evil", "/a\tb",
	"/%00", "/a%0d%0a", "/%zz", "/a%", "/é", "/a\x7f",
}

func TestJoinPathRefusesEscapes(t *testing.T) {
	base, _ := url.Parse("https://api.example.com/v1")
	for _, p := range escapes {
		if u, err := joinPath(base, p); !errors.Is(err, ErrBadPath) {
			t.Errorf("joinPath(%q) = %v, %v; want ErrBadPath", p, u, err)
		}
	}
}

func TestJoinPathKeepsPrefixAndQuery(t *testing.T) {
	for _, tc := range []struct{ base, path, want string }{
		{"https://api.example.com/v1", "/chat", "https://api.example.com/v1/chat"},
		{"https://api.example.com/v1/", "/chat", "https://api.example.com/v1/chat"},
		{"https://api.example.com", "/orders/42?x=1&y=%2F", "https://api.example.com/orders/42?x=1&y=%2F"},
		{"http://127.0.0.1:8080/api", "/", "http://127.0.0.1:8080/api/"},
		{"https://api.example.com/v1", "/a%20b/c..d/.e/f.?q=../..", "https://api.example.com/v1/a%20b/c..d/.e/f.?q=../.."},
		{"https://api.example.com/p%20q", "/a:b@c", "https://api.example.com/p%20q/a:b@c"},
	} {
		base, err := url.Parse(tc.base)
		if err != nil {
			t.Fatal(err)
		}
		u, err := joinPath(base, tc.path)
		if err != nil || u.String() != tc.want {
			t.Errorf("joinPath(%s, %q) = %v, %v; want %s", tc.base, tc.path, u, err, tc.want)
		}
	}
}

// FuzzJoinPath proves that joinPath never panics and that what it accepts
// stays on the base's origin, under its prefix, with no "." or ".."
// segment, as the request line sends it.
func FuzzJoinPath(f *testing.F) {
	for _, p := range escapes {
		f.Add(p)
	}
	for _, p := range []string{"/chat", "/orders/42?x=1", "/a%20b", "/a/b/", "/?", "/%41"} {
		f.Add(p)
	}
	base, _ := url.Parse("https://api.example.com:8443/v1")
	f.Fuzz(func(t *testing.T, p string) {
		u, err := joinPath(base, p)
		if err != nil {
			if !errors.Is(err, ErrBadPath) {
				t.Fatalf("joinPath(%q): %v, not ErrBadPath", p, err)
			}
			return
		}
		sent, err := url.Parse(u.String())
		if err != nil {
			t.Fatalf("joinPath(%q) = %s, which does not parse: %v", p, u, err)
		}
		if sent.Scheme != base.Scheme || sent.Host != base.Host || sent.User != nil || sent.Fragment != "" {
			t.Fatalf("joinPath(%q) = %s: off the base's origin", p, u)
		}
		for _, got := range []string{sent.Path, u.Path} {
			if got != "/v1" && !strings.HasPrefix(got, "/v1/") || !strings.HasPrefix(path.Clean(got)+"/", "/v1/") {
				t.Fatalf("joinPath(%q) = %s: path %q is not under /v1", p, u, got)
			}
		}
		for _, seg := range strings.Split(sent.EscapedPath(), "/") {
			if dec, _ := url.PathUnescape(seg); dec == "." || dec == ".." {
				t.Fatalf("joinPath(%q) = %s: a %q segment", p, u, dec)
			}
		}
	})
}
