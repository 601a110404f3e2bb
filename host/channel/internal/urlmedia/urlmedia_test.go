package urlmedia

import (
	"net/url"
	"strings"
	"testing"
)

// TestAllowed: https on a host or a subdomain, on a prefix (no way out of
// it by dots), or api_url's origin; nothing with userinfo, plain http
// elsewhere, or an overlong URL.
func TestAllowed(t *testing.T) {
	api, _ := url.Parse("http://127.0.0.1:8080")
	m := New("test x", api, []string{"example.com"}, []string{"https://storage.example.net/bucket/"})
	for raw, want := range map[string]bool{
		"https://example.com/a.jpg":                          true,
		"https://cdn.example.com/a.jpg?sig=1":                true,
		"http://cdn.example.com/a.jpg":                       false,
		"https://evilexample.com/a.jpg":                      false,
		"https://example.com.evil.net/a.jpg":                 false,
		"https://user:pw@example.com/a.jpg":                  false,
		"http://127.0.0.1:8080/media/a.jpg":                  true,
		"http://127.0.0.1:8081/media/a.jpg":                  false,
		"https://storage.example.net/bucket/loc/a.jpg":       true,
		"https://STORAGE.example.net/bucket/loc/a.jpg":       true,
		"https://storage.example.net/bucketeer/a.jpg":        false,
		"https://storage.example.net/other/a.jpg":            false,
		"https://storage.example.net/bucket/../other/a.jpg":  false,
		"https://storage.example.net/bucket/%2e%2e/other/a":  false,
		"https://storage.example.net/bucket%2f..%2fother/a":  false,
		"http://storage.example.net/bucket/a.jpg":            false,
		"https://example.com/" + strings.Repeat("a", MaxURL): false,
		"": false,
	} {
		if got := m.Allowed(raw); got != want {
			t.Errorf("%.80s: allowed %v, want %v", raw, got, want)
		}
	}
}

func TestCheckHosts(t *testing.T) {
	var keys []string
	CheckHosts(func(key, _ string, _ ...any) { keys = append(keys, key) }, "media_ref_hosts",
		[]string{"gupshup.io", "https://x.io", "x.io:443", "x.io/p", "X.IO", ""})
	if strings.Join(keys, ",") != "media_ref_hosts[1],media_ref_hosts[2],media_ref_hosts[3],media_ref_hosts[4],media_ref_hosts[5]" {
		t.Fatalf("refused %v", keys)
	}
}
