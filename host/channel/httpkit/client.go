package httpkit

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"syscall"
	"time"
)

// ErrAddressRefused is wrapped by a dial to a private, loopback, link-local
// or otherwise internal address that is not the channel's own api_url.
var ErrAddressRefused = errors.New("address refused: private, loopback and link-local addresses are reachable only as the configured api_url")

// ErrRedirectRefused is wrapped by a redirect the channel does not follow.
var ErrRedirectRefused = errors.New("redirect refused")

// maxRedirects is how many redirects one request may follow.
const maxRedirects = 5

// NewClient returns the HTTP client of a channel whose API lives at api.
//
//   - Redirects are followed only to https URLs (or to api's own origin) that
//     allowed accepts, checked again at every hop, at most five; nil allowed
//     follows none. No Referer is sent on a redirect, so a token in a URL
//     never reaches the next host.
//   - Dialing refuses private, loopback, link-local, multicast and
//     unspecified addresses (checked on the resolved IP), except api's own
//     host and port, and the proxy the environment names for api.
func NewClient(timeout time.Duration, api *url.URL, allowed func(*url.URL) bool) *http.Client {
	trusted := map[string]bool{}
	if api != nil {
		trusted[hostPort(api)] = true
		if proxy, err := http.ProxyFromEnvironment(&http.Request{URL: api}); err == nil && proxy != nil {
			trusted[hostPort(proxy)] = true
		}
	}
	open := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	guarded := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second, Control: refusePrivate}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if trusted[addr] {
			return open.DialContext(ctx, network, addr)
		}
		return guarded.DialContext(ctx, network, addr)
	}
	return &http.Client{
		Timeout:   timeout,
		Transport: tr,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			req.Header.Del("Referer")
			u := req.URL
			switch {
			case allowed == nil:
				return fmt.Errorf("%w: the channel follows no redirects (to %s)", ErrRedirectRefused, redactURL(u))
			case len(via) >= maxRedirects:
				return fmt.Errorf("%w: more than %d redirects", ErrRedirectRefused, maxRedirects)
			case u.Scheme != "https" && !(api != nil && u.Scheme == api.Scheme && u.Host == api.Host):
				return fmt.Errorf("%w: %s is not https", ErrRedirectRefused, redactURL(u))
			case !allowed(u):
				return fmt.Errorf("%w: %s is not on an allowed host", ErrRedirectRefused, redactURL(u))
			}
			return nil
		},
	}
}

// redactURL names a URL without its path and query, which may hold
// credentials.
func redactURL(u *url.URL) string {
	return u.Scheme + "://" + u.Host + "/…"
}

// hostPort is u's host:port with the scheme's default port filled in.
func hostPort(u *url.URL) string {
	port := u.Port()
	if port == "" {
		port = "443"
		if u.Scheme == "http" {
			port = "80"
		}
	}
	return net.JoinHostPort(u.Hostname(), port)
}

// refusePrivate is a net.Dialer Control hook: address is the resolved IP and
// port about to be dialed.
func refusePrivate(network, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("%w: %s is not an IP address", ErrAddressRefused, address)
	}
	if Internal(ap.Addr()) {
		return fmt.Errorf("%w (%s)", ErrAddressRefused, ap.Addr())
	}
	return nil
}

// nonPublic are ranges that are no public destination beyond what netip
// classifies: RFC 6598's carrier-grade NAT, this-network (0.0.0.0/8), IETF
// protocol assignments, benchmarking (198.18.0.0/15) and the reserved
// 240.0.0.0/4.
var nonPublic = []netip.Prefix{
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("192.0.0.0/24"),
	netip.MustParsePrefix("198.18.0.0/15"),
	netip.MustParsePrefix("240.0.0.0/4"),
}

// nat64 and sixToFour embed an IPv4 address in an IPv6 one; the embedded
// address is checked too.
var nat64, sixToFour = netip.MustParsePrefix("64:ff9b::/96"), netip.MustParsePrefix("2002::/16")

// Internal reports whether ip is an address a channel must not be sent to:
// loopback, private, link-local, multicast, unspecified, shared (CGNAT),
// this-network, reserved, or an IPv6 address embedding one of those (NAT64,
// 6to4).
func Internal(ip netip.Addr) bool {
	ip = ip.Unmap()
	if !ip.IsValid() || ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() ||
		ip.IsInterfaceLocalMulticast() || ip.IsMulticast() || ip.IsUnspecified() {
		return true
	}
	for _, p := range nonPublic {
		if p.Contains(ip) {
			return true
		}
	}
	b := ip.As16()
	switch {
	case ip.Is6() && nat64.Contains(ip):
		return Internal(netip.AddrFrom4([4]byte(b[12:16])))
	case ip.Is6() && sixToFour.Contains(ip):
		return Internal(netip.AddrFrom4([4]byte(b[2:6])))
	}
	return false
}
