// Package urlmedia is inbound media that a channel's webhook references by a
// URL on the channel's storage (Messenger's and Instagram's CDN, Gupshup's
// file manager, GoHighLevel's buckets): the URL itself is the durable
// reference (httpkit.StoreURL), journaled and fetched only when it is https
// on one of the channel's media hosts (or a subdomain), on one of its URL
// prefixes, or on api_url's own origin, and fetched without credentials.
//
// urlmedia is internal to host/channel: Messenger's and Instagram's base
// (graph/messaging), Gupshup, GoHighLevel, TikTok and Discord use it. It
// imports the standard library, the SPI (host/channel) and the toolkit
// (host/channel/httpkit).
package urlmedia

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/channel/httpkit"
)

// MaxURL bounds a journaled media URL (signed CDN URLs are a few hundred
// bytes).
const MaxURL = 4096

// Media journals and loads one channel's URL media references. Its methods
// implement channel.MediaRefCodec and channel.MediaLoader.
type Media struct {
	name     string
	api      *url.URL
	hosts    []string
	prefixes []string
	client   *http.Client
}

// New returns the media of the channel name ("messenger fb", for errors)
// whose API is api: URLs on hosts (or their subdomains), starting with one of
// prefixes ("https://host/path/", a bucket on a shared storage host), or on
// api's origin. Downloads follow redirects to the same URLs only.
func New(name string, api *url.URL, hosts, prefixes []string) *Media {
	m := &Media{name: name, api: api, hosts: hosts, prefixes: prefixes}
	m.client = httpkit.NewClient(60*time.Second, api, m.URLAllowed)
	return m
}

// URLAllowed reports whether u may be journaled and fetched.
func (m *Media) URLAllowed(u *url.URL) bool {
	if httpkit.CredentialsAllowed(u, m.api, m.hosts...) {
		return true
	}
	if u == nil || u.User != nil || u.Scheme != "https" {
		return false
	}
	p := u.EscapedPath()
	if strings.Contains(p, "..") || strings.Contains(strings.ToLower(p), "%2e") || strings.Contains(strings.ToLower(p), "%2f") {
		return false
	}
	for _, pre := range m.prefixes {
		if strings.HasPrefix("https://"+strings.ToLower(u.Host)+p, pre) {
			return true
		}
	}
	return false
}

// Allowed reports whether the raw URL may be journaled and fetched.
func (m *Media) Allowed(raw string) bool {
	if raw == "" || len(raw) > MaxURL {
		return false
	}
	u, err := url.Parse(raw)
	return err == nil && m.URLAllowed(u)
}

// SerializeMediaRef implements channel.MediaRefCodec: the media's URL, only
// when it is allowed. No credential is stored (none is needed to fetch it).
func (m *Media) SerializeMediaRef(md channel.Media) (channel.StoredRef, bool) {
	if !m.Allowed(md.Ref) {
		return channel.StoredRef{}, false
	}
	return httpkit.StoreURL(md.Ref), true
}

// RehydrateMediaRef implements channel.MediaRefCodec, checking the URL
// against the allowed hosts again.
func (m *Media) RehydrateMediaRef(s channel.StoredRef) (channel.Media, error) {
	u, err := httpkit.StoredURL(s, m.Allowed)
	if err != nil {
		return channel.Media{}, fmt.Errorf("%s: %w", m.name, err)
	}
	return channel.Media{Ref: u}, nil
}

// LoadMedia implements channel.MediaLoader: a GET of the URL without
// credentials. An expired or deleted file answers 403, 404 or 410: the media
// is unavailable.
func (m *Media) LoadMedia(ctx context.Context, md channel.Media, max int64) ([]byte, error) {
	if !m.Allowed(md.Ref) {
		return nil, fmt.Errorf("%w: %s: the media URL is not https on an allowed host (media_ref_hosts) or on api_url", channel.ErrMediaUnavailable, m.name)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, md.Ref, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", channel.ErrMediaUnavailable, m.name, err)
	}
	// The URL's query may be its signature: errors name the host only.
	return httpkit.Download(m.client, req, max, httpkit.HostOnly(req.URL))
}

var hostName = regexp.MustCompile(`^([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z]{2,63}$`)

// CheckHosts checks a media_ref_hosts key: host names (a subdomain of one
// is allowed too), without a scheme, a port or a path.
func CheckHosts(problem channel.Problem, key string, hosts []string) {
	for i, h := range hosts {
		if !hostName.MatchString(h) {
			problem(fmt.Sprintf("%s[%d]", key, i), "%q is not a host name (like fbcdn.net: lower case, no scheme, port or path; its subdomains are allowed too)", h)
		}
	}
}
