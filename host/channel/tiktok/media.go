package tiktok

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/channel/httpkit"
)

// Coords are where TikTok keeps an inbound media: what media/download
// needs to find it. They hold no credential.
type Coords struct {
	ConversationID string `json:"conversation_id"`
	MessageID      string `json:"message_id"`
	MediaID        string `json:"media_id"`
	Type           string `json:"type"`
}

// Ref is the coordinates as a media reference: their JSON object.
func (c Coords) Ref() string {
	b, _ := json.Marshal(c)
	return string(b)
}

func (c Coords) valid() bool {
	return validID(c.ConversationID) && validID(c.MessageID) && validID(c.MediaID) && c.Type == "image"
}

// stored is a stored reference's data: coordinates, or a URL (a sticker's).
type stored struct {
	Coords
	URL string `json:"url"`
}

// decodeRef reads a media reference: coordinates (a JSON object) or a URL
// on an allowed host. Anything else, or both at once, is an error.
func (p *Provider) decodeRef(raw []byte) (Coords, string, error) {
	var s stored
	if err := strictJSON(raw, &s); err != nil {
		return Coords{}, "", fmt.Errorf("tiktok %s: the media reference is not a JSON object", p.cfg.ID)
	}
	switch {
	case s.URL != "" && s.Coords == (Coords{}):
		if !p.urls.Allowed(s.URL) {
			return Coords{}, "", fmt.Errorf("tiktok %s: the media URL is not https on an allowed host (media_ref_hosts) or on api_url", p.cfg.ID)
		}
		return Coords{}, s.URL, nil
	case s.URL == "" && s.Coords.valid():
		return s.Coords, "", nil
	}
	return Coords{}, "", fmt.Errorf("tiktok %s: the media reference is neither coordinates (conversation_id, message_id, media_id, type image) nor a URL", p.cfg.ID)
}

// ref reads a live reference: a JSON object is coordinates, anything else
// a URL.
func (p *Provider) ref(r string) (Coords, string, error) {
	if strings.HasPrefix(r, "{") {
		return p.decodeRef([]byte(r))
	}
	b, _ := json.Marshal(stored{URL: r})
	return p.decodeRef(b)
}

// SerializeMediaRef implements channel.MediaRefCodec: {"v":1,"data":…}
// with the coordinates, or {"url"} for a sticker on an allowed host.
func (p *Provider) SerializeMediaRef(m channel.Media) (channel.StoredRef, bool) {
	co, u, err := p.ref(m.Ref)
	switch {
	case err != nil:
		return channel.StoredRef{}, false
	case u != "":
		return httpkit.StoreURL(u), true
	}
	b, _ := json.Marshal(co)
	return channel.StoredRef{V: 1, Data: b}, true
}

// RehydrateMediaRef implements channel.MediaRefCodec.
func (p *Provider) RehydrateMediaRef(s channel.StoredRef) (channel.Media, error) {
	if s.V != 1 {
		return channel.Media{}, fmt.Errorf("tiktok %s: media ref version %d is unknown", p.cfg.ID, s.V)
	}
	co, u, err := p.decodeRef(s.Data)
	if err != nil {
		return channel.Media{}, err
	}
	if u != "" {
		return channel.Media{Type: "sticker", Ref: u}, nil
	}
	return channel.Media{Type: co.Type, Ref: co.Ref()}, nil
}

// LoadMedia implements channel.MediaLoader. A sticker's URL is fetched
// as it is; coordinates are asked of media/download, whose download_url is
// fetched without the token, only on an allowed host. TikTok answering
// 40002 (the media is unknown or expired) makes the media unavailable.
func (p *Provider) LoadMedia(ctx context.Context, m channel.Media, max int64) ([]byte, error) {
	co, u, err := p.ref(m.Ref)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", channel.ErrMediaUnavailable, err)
	}
	if u == "" {
		if u, err = p.downloadURL(ctx, co); err != nil {
			return nil, err
		}
	}
	return p.urls.LoadMedia(ctx, channel.Media{Ref: u}, max)
}

// downloadURL asks media/download where the bytes of co are.
func (p *Provider) downloadURL(ctx context.Context, co Coords) (string, error) {
	body, _ := json.Marshal(map[string]string{"business_id": p.cfg.BusinessID, "conversation_id": co.ConversationID,
		"message_id": co.MessageID, "media_id": co.MediaID, "media_type": strings.ToUpper(co.Type)})
	var out struct {
		DownloadURL string `json:"download_url"`
	}
	if err := p.call(ctx, DownloadPath, body, &out); err != nil {
		if errors.Is(err, channel.ErrUnsupportedContent) {
			return "", fmt.Errorf("%w: tiktok %s: %w", channel.ErrMediaUnavailable, p.cfg.ID, err)
		}
		return "", fmt.Errorf("tiktok %s: media/download: %w", p.cfg.ID, err)
	}
	if out.DownloadURL == "" {
		return "", fmt.Errorf("%w: tiktok %s: media/download gave no download_url", channel.ErrMediaUnavailable, p.cfg.ID)
	}
	return out.DownloadURL, nil
}

// call POSTs a JSON body to path below api_url with the token and decodes
// the answer's data into out; a code other than 0 is mapped by mapCode.
func (p *Provider) call(ctx context.Context, path string, body []byte, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.API.String()+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Access-Token", p.cfg.AccessToken)
	var ans answer
	if err := httpkit.CallJSON(p.Client, req, &ans, mapStatus); err != nil {
		return err
	}
	if ans.Code != 0 {
		return mapCode(ans.Code, ans.Message)
	}
	if out != nil && len(ans.Data) > 0 {
		if err := json.Unmarshal(ans.Data, out); err != nil {
			return fmt.Errorf("code 0 with unreadable data: %v", err)
		}
	}
	return nil
}

// answer is every Business API answer: {"code","message","request_id","data"}.
type answer struct {
	Code    int             `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data"`
}
