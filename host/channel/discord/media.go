package discord

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/channel/httpkit"
)

// MediaHosts are Discord's CDN hosts (and their subdomains), the only ones
// attachment URLs are accepted from (with the api_url's own origin), unless
// media_ref_hosts replaces them.
var MediaHosts = []string{"cdn.discordapp.com", "media.discordapp.net"}

// maxMediaURL bounds a stored attachment URL.
const maxMediaURL = 2048

// mediaAllowed reports whether an attachment may be fetched from u: https on
// the media hosts (MediaHosts or media_ref_hosts), or the API's own origin
// (a test fake).
func (p *Provider) mediaAllowed(u *url.URL) bool {
	return httpkit.CredentialsAllowed(u, p.API, p.mediaHosts...)
}

// attachmentURL parses an attachment reference and checks its host.
func (p *Provider) attachmentURL(ref string) (*url.URL, error) {
	u, err := url.Parse(ref)
	if err != nil || len(ref) > maxMediaURL || !p.mediaAllowed(u) {
		return nil, fmt.Errorf("discord attachment %q is not a URL on %v (media_ref_hosts)", ref, p.mediaHosts)
	}
	return u, nil
}

// expired reports whether an attachment URL's signature has expired: its
// ex parameter is the expiry in hexadecimal Unix seconds (a URL without one
// does not expire).
func expired(u *url.URL, now time.Time) bool {
	ex, err := strconv.ParseInt(u.Query().Get("ex"), 16, 64)
	return err == nil && now.Unix() >= ex
}

// mediaRef is the stored form of an attachment: its signed URL.
type mediaRef struct {
	URL string `json:"url"`
}

// SerializeMediaRef implements channel.MediaRefCodec: the attachment's URL
// (signed by Discord, valid about 24 hours; no credential of botrun's).
func (p *Provider) SerializeMediaRef(m channel.Media) (channel.StoredRef, bool) {
	if _, err := p.attachmentURL(m.Ref); err != nil {
		return channel.StoredRef{}, false
	}
	data, _ := json.Marshal(mediaRef{URL: m.Ref})
	return channel.StoredRef{V: 1, Data: data}, true
}

// RehydrateMediaRef implements channel.MediaRefCodec: the URL, checked
// again against the hosts. An expired one rehydrates; its load fails.
func (p *Provider) RehydrateMediaRef(s channel.StoredRef) (channel.Media, error) {
	if s.V != 1 {
		return channel.Media{}, fmt.Errorf("discord media ref version %d is unknown", s.V)
	}
	var d mediaRef
	if err := json.Unmarshal(s.Data, &d); err != nil {
		return channel.Media{}, errors.New("discord media ref is invalid")
	}
	if _, err := p.attachmentURL(d.URL); err != nil {
		return channel.Media{}, fmt.Errorf("discord media ref is invalid: %w", err)
	}
	return channel.Media{Ref: d.URL}, nil
}

// LoadMedia implements channel.MediaLoader: a GET of the attachment URL,
// without the bot token (the URL is signed). An expired URL is not fetched:
// the media is unavailable (a late replay reports rehydrate-failed).
func (p *Provider) LoadMedia(ctx context.Context, m channel.Media, max int64) ([]byte, error) {
	u, err := p.attachmentURL(m.Ref)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", channel.ErrMediaUnavailable, err)
	}
	if expired(u, p.now()) {
		return nil, fmt.Errorf("%w: discord %s: the attachment URL expired (Discord signs them for about 24 hours)", channel.ErrMediaUnavailable, p.cfg.ID)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("%w: discord %s: %w", channel.ErrMediaUnavailable, p.cfg.ID, err)
	}
	req.Header.Set("User-Agent", userAgent)
	// The URL's query is Discord's signature: errors name the host only.
	return httpkit.Download(p.media, req, max, httpkit.HostOnly(req.URL))
}
