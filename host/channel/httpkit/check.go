package httpkit

import (
	"net/netip"
	"net/url"
	"strings"

	"github.com/botrun/botrun/host/channel"
)

// LoopbackHost reports whether host (a listen or URL host, without the port)
// names only the local machine: localhost or a loopback IP. An empty host or
// 0.0.0.0 listens on every interface and is not loopback.
func LoopbackHost(host string) bool {
	host = strings.Trim(host, "[]")
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// CheckAPIURL checks an optional api_url key: https, or plain http on
// loopback only (a local fake or API server), since the channel's credentials
// travel in every request.
func CheckAPIURL(raw string, problem channel.Problem) {
	if raw == "" {
		return
	}
	u, err := url.Parse(raw)
	switch {
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		problem("api_url", "%q must be an http(s) URL", raw)
	case u.Scheme == "http" && !LoopbackHost(u.Hostname()):
		problem("api_url", "%q is plain http to another machine: the channel's credentials would cross the network in clear; use https (plain http is allowed on loopback only)", raw)
	}
}

// Required reports key as missing when value is empty; how says where to
// get it.
func Required(problem channel.Problem, key, value, how string) {
	if value == "" {
		problem(key, "missing: %s", how)
	}
}

// CheckHTTPURL reports key unless raw is an absolute http(s) URL.
func CheckHTTPURL(problem channel.Problem, key, raw, want string) {
	if u, err := url.Parse(raw); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		problem(key, "%q: %s", raw, want)
	}
}
