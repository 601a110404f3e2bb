package httpkit

import (
	"fmt"
	"net/url"
	"strings"
)

// APIBase parses a channel's api_url (def when it is empty), without its
// trailing slash; it must be an absolute http(s) URL.
func APIBase(raw, def string) (*url.URL, error) {
	if raw == "" {
		raw = def
	}
	u, err := url.Parse(strings.TrimRight(raw, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("api_url %q is not an absolute http(s) URL", raw)
	}
	return u, nil
}

// CredentialsAllowed reports whether a request to u may carry a channel's
// credentials: u is on the API's own origin (scheme, host and port), or is
// https on one of domains or a subdomain of one. A URL with userinfo never is.
func CredentialsAllowed(u, api *url.URL, domains ...string) bool {
	if u == nil || u.User != nil {
		return false
	}
	if u.Scheme == api.Scheme && u.Host == api.Host {
		return true
	}
	if u.Scheme != "https" {
		return false
	}
	h := u.Hostname()
	for _, d := range domains {
		if h == d || strings.HasSuffix(h, "."+d) {
			return true
		}
	}
	return false
}
