package fetch

import (
	"context"
	"fmt"
	"net"
	"net/netip"
)

// refusal is a destination the Caller would not dial.
type refusal struct {
	host string
	addr netip.Addr
	kind string
}

func (r *refusal) Error() string {
	return fmt.Sprintf("%s resolves to %s, a %s address", r.host, r.addr, r.kind)
}

// dialChecked resolves addr's host (an IP literal is taken as is), refuses
// it if any of its addresses is not public and the API does not allow
// private ones, and dials the addresses it checked, in turn, until one
// answers: a second resolution cannot swap in another address.
func (c *Caller) dialChecked(ctx context.Context, network, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("address %q: %w", addr, err)
	}
	addrs, err := c.resolve(ctx, host)
	if err != nil {
		return nil, err
	}
	if !c.api.AllowPrivate {
		for _, a := range addrs {
			if kind := nonPublic(a); kind != "" {
				return nil, &refusal{host: host, addr: a, kind: kind}
			}
		}
	}
	var last error
	for _, a := range addrs {
		conn, err := c.dial(ctx, network, net.JoinHostPort(a.String(), port))
		if err == nil {
			return conn, nil
		}
		last = err
	}
	return nil, last
}

// resolve returns host's addresses: the literal itself, or what
// Options.LookupIP answers.
func (c *Caller) resolve(ctx context.Context, host string) ([]netip.Addr, error) {
	if a, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{a}, nil
	}
	ips, err := c.lookupIP(ctx, host)
	if err != nil {
		return nil, fmt.Errorf("resolve %s: %w", host, err)
	}
	addrs := make([]netip.Addr, 0, len(ips))
	for _, ip := range ips {
		a, ok := netip.AddrFromSlice(ip)
		if !ok {
			return nil, fmt.Errorf("resolve %s: the resolver answered a malformed address %v", host, ip)
		}
		addrs = append(addrs, a.Unmap())
	}
	if len(addrs) == 0 {
		return nil, fmt.Errorf("resolve %s: no address", host)
	}
	return addrs, nil
}

// lookupDefault is Options.LookupIP's default: the system resolver.
func lookupDefault(ctx context.Context, host string) ([]net.IP, error) {
	found, err := net.DefaultResolver.LookupIPAddr(ctx, host)
	if err != nil {
		return nil, err
	}
	ips := make([]net.IP, len(found))
	for i, f := range found {
		ips[i] = f.IP
	}
	return ips, nil
}

// reserved are the ranges, beyond those netip names, that are not public
// destinations.
var reserved = []struct {
	prefix netip.Prefix
	kind   string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "this-network"},
	{netip.MustParsePrefix("100.64.0.0/10"), "shared (CGNAT)"},
	{netip.MustParsePrefix("192.0.0.0/24"), "IETF protocol"},
	{netip.MustParsePrefix("198.18.0.0/15"), "benchmarking"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved"},
	{netip.MustParsePrefix("fec0::/10"), "site-local"},
	// Teredo hides the IPv4 address it reaches (obfuscated); documentation,
	// discard-only and local-use NAT64 prefixes are never a public API.
	{netip.MustParsePrefix("2001::/32"), "Teredo tunnel"},
	{netip.MustParsePrefix("2001:db8::/32"), "documentation"},
	{netip.MustParsePrefix("100::/64"), "discard-only"},
	{netip.MustParsePrefix("64:ff9b:1::/48"), "local-use NAT64"},
}

// nonPublic names the kind of a (loopback, private, link-local, which
// includes the 169.254.169.254 metadata service, unspecified, multicast,
// CGNAT, other reserved ranges, Teredo, and the IPv4-mapped,
// IPv4-compatible, NAT64 and 6to4 forms of those), or "" for a public
// address.
func nonPublic(a netip.Addr) string {
	a = a.Unmap()
	switch {
	case !a.IsValid():
		return "invalid"
	case a.IsLoopback():
		return "loopback"
	case a.IsPrivate():
		return "private"
	case a.IsLinkLocalUnicast():
		return "link-local (or metadata)"
	case a.IsUnspecified():
		return "unspecified"
	case a.IsMulticast():
		return "multicast"
	}
	for _, r := range reserved {
		if r.prefix.Contains(a) {
			return r.kind
		}
	}
	if a.Is6() {
		b := a.As16()
		switch {
		case nat64.Contains(a):
			return embedded(netip.AddrFrom4([4]byte(b[12:16])))
		case sixToFour.Contains(a):
			return embedded(netip.AddrFrom4([4]byte(b[2:6])))
		case compat.Contains(a):
			return embedded(netip.AddrFrom4([4]byte(b[12:16])))
		}
	}
	return ""
}

var (
	nat64     = netip.MustParsePrefix("64:ff9b::/96")
	sixToFour = netip.MustParsePrefix("2002::/16")
	// compat is the deprecated IPv4-compatible form (::a.b.c.d).
	compat = netip.MustParsePrefix("::/96")
)

// embedded names the kind of an IPv4 address carried inside an IPv6 one.
func embedded(v4 netip.Addr) string {
	if kind := nonPublic(v4); kind != "" {
		return kind + " (embedded in IPv6)"
	}
	return ""
}
