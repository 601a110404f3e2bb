package messaging

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"regexp"

	"github.com/botrun/botrun/host/provider"
)

// maxMediaURL bounds a journaled attachment URL (Meta's signed CDN URLs are
// a few hundred bytes).
const maxMediaURL = 4096

// mediaURLAllowed reports whether u may be journaled and fetched: https on
// one of the media hosts or a subdomain, or api_url's own origin.
func (c *Channel) mediaURLAllowed(u *url.URL) bool {
	return provider.CredentialsAllowed(u, c.api, c.hosts...)
}

func (c *Channel) mediaAllowed(raw string) bool {
	if raw == "" || len(raw) > maxMediaURL {
		return false
	}
	u, err := url.Parse(raw)
	return err == nil && c.mediaURLAllowed(u)
}

// SerializeMediaRef implements provider.MediaRefCodec: the attachment's URL,
// only when it is on an allowed host. The URL is signed and expires (days);
// no token is stored, and none is sent to fetch it.
func (c *Channel) SerializeMediaRef(m provider.Media) (provider.StoredRef, bool) {
	if !c.mediaAllowed(m.Ref) {
		return provider.StoredRef{}, false
	}
	return provider.StoreURL(m.Ref), true
}

// RehydrateMediaRef implements provider.MediaRefCodec, checking the URL
// against the allowed hosts again.
func (c *Channel) RehydrateMediaRef(s provider.StoredRef) (provider.Media, error) {
	u, err := provider.StoredURL(s, c.mediaAllowed)
	if err != nil {
		return provider.Media{}, fmt.Errorf("%s: %w", c.spec.Type, err)
	}
	return provider.Media{Ref: u}, nil
}

// LoadMedia implements provider.MediaLoader: a GET of the attachment URL,
// without credentials (the URL is signed). An expired URL answers 403 or
// 404: the media is unavailable.
func (c *Channel) LoadMedia(ctx context.Context, m provider.Media, max int64) ([]byte, error) {
	if !c.mediaAllowed(m.Ref) {
		return nil, fmt.Errorf("%w: %s %s: the media URL is not https on an allowed host (media_ref_hosts) or on api_url", provider.ErrMediaUnavailable, c.spec.Type, c.spec.ID)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, m.Ref, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %s %s: %v", provider.ErrMediaUnavailable, c.spec.Type, c.spec.ID, err)
	}
	// The URL's query is its signature: errors name the host only.
	return provider.Download(c.client, req, max, provider.HostOnly(req.URL))
}

var hostName = regexp.MustCompile(`^([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z]{2,63}$`)

// CheckHosts checks a media_ref_hosts key: host names (a subdomain of one
// is allowed too), without a scheme, a port or a path.
func CheckHosts(problem provider.Problem, key string, hosts []string) {
	for i, h := range hosts {
		if !hostName.MatchString(h) {
			problem(fmt.Sprintf("%s[%d]", key, i), "%q is not a host name (like fbcdn.net: lower case, no scheme, port or path; its subdomains are allowed too)", h)
		}
	}
}
