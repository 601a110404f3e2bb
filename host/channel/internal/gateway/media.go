package gateway

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/channel/httpkit"
)

// messageID is what a gateway's message id looks like: Evolution's key.id
// ("3EB0…", "BAE5…"), WPPConnect's serialized id
// ("false_5511…@c.us_3EB0…"). Nothing else is journaled or sent in a path.
var messageID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_@.:+=-]{0,255}$`)

// ValidID reports whether id may be a media reference.
func ValidID(id string) bool { return messageID.MatchString(id) }

// storedMessage is the data of a stored media reference: the message's id on
// the instance or session that received it. No credential, no bytes.
type storedMessage struct {
	Owner string `json:"owner"`
	ID    string `json:"id"`
}

// SerializeMediaRef implements channel.MediaRefCodec: {"owner","id"}, the
// message's id on this channel's instance or session; its bytes are asked
// of the gateway when a handler loads them.
func (c *Channel) SerializeMediaRef(m channel.Media) (channel.StoredRef, bool) {
	if !ValidID(m.Ref) {
		return channel.StoredRef{}, false
	}
	data, _ := json.Marshal(storedMessage{Owner: c.spec.Owner, ID: m.Ref})
	return channel.StoredRef{V: 1, Data: data}, true
}

// RehydrateMediaRef implements channel.MediaRefCodec: the reference must be
// of this channel's instance or session (a renamed one loads nothing).
func (c *Channel) RehydrateMediaRef(s channel.StoredRef) (channel.Media, error) {
	if s.V != 1 {
		return channel.Media{}, c.Errorf("media ref version %d is unknown", s.V)
	}
	var d storedMessage
	if err := json.Unmarshal(s.Data, &d); err != nil || !ValidID(d.ID) {
		return channel.Media{}, c.Errorf("media ref is not a message id")
	}
	if d.Owner != c.spec.Owner {
		return channel.Media{}, c.Errorf("media ref is of %q, not of this channel's %q", d.Owner, c.spec.Owner)
	}
	return channel.Media{Ref: d.ID}, nil
}

// LoadMedia implements channel.MediaLoader: the bytes of the message m.Ref
// (its id), asked of the gateway (Spec.Media). A message the gateway no
// longer has answers 400: the media is unavailable.
func (c *Channel) LoadMedia(ctx context.Context, m channel.Media, max int64) ([]byte, error) {
	if !ValidID(m.Ref) {
		return nil, fmt.Errorf("%w: %w", channel.ErrMediaUnavailable, c.Errorf("%q is not a message id", m.Ref))
	}
	b, _, err := c.load(ctx, m.Ref, max)
	return b, err
}

// load is the media of the message id, at most max bytes, and its MIME
// type.
func (c *Channel) load(ctx context.Context, id string, max int64) ([]byte, string, error) {
	method, path, in := c.spec.Media(id)
	return c.LoadBase64(ctx, method, path, in, max)
}

// answerSlack is what a media answer may hold beside the base64 (mimetype,
// file name, caption).
const answerSlack = 64 << 10

// LoadBase64 asks the API path for a media's bytes (in: the request's JSON
// body, or nil) and decodes the answer's base64, at most max bytes; mime is
// the answer's mimetype. A reference the gateway refuses (400, 403, 404,
// 410) is unavailable for good; other failures are worth a retry.
func (c *Channel) LoadBase64(ctx context.Context, method, path string, in any, max int64) (b []byte, mime string, err error) {
	req, err := c.request(ctx, method, path, in)
	if err != nil {
		return nil, "", fmt.Errorf("%w: %w", channel.ErrMediaUnavailable, c.Errorf("%w", err))
	}
	limit := max
	if limit < 1<<40 {
		limit = (max+2)/3*4 + answerSlack // base64's length, and the rest of the answer
	}
	body, err := httpkit.Download(c.Client, req, limit, func(err error) string { return err.Error() })
	if err != nil {
		return nil, "", c.Errorf("%w", err)
	}
	b, mime, err = DecodeMedia(body, max)
	if err != nil {
		return nil, "", c.Errorf("%w", err)
	}
	return b, mime, nil
}

// errUnreadable is a media answer botrun cannot read: worth a retry (the
// gateway may have answered an error page).
var errUnreadable = errors.New("the gateway's media answer is not JSON with a base64")

// DecodeMedia decodes a gateway's media answer, {"base64": "…", "mimetype":
// "…", …} (a data: URI is accepted too), into at most max bytes and their
// MIME type: untrusted bytes. An empty base64 is unavailable media; more
// than max bytes is channel.ErrMediaTooLarge.
func DecodeMedia(body []byte, max int64) (b []byte, mime string, err error) {
	var a struct {
		Base64   *string `json:"base64"`
		Mimetype string  `json:"mimetype"`
	}
	if err := json.Unmarshal(body, &a); err != nil || a.Base64 == nil {
		return nil, "", errUnreadable
	}
	s, mime := *a.Base64, a.Mimetype
	if rest, ok := strings.CutPrefix(s, "data:"); ok {
		if typ, data, ok := strings.Cut(rest, ";base64,"); ok {
			s = data
			if mime == "" {
				mime = typ
			}
		}
	}
	if s == "" {
		return nil, "", fmt.Errorf("%w: the gateway answered no bytes", channel.ErrMediaUnavailable)
	}
	if int64(base64.StdEncoding.DecodedLen(len(s)))-2 > max {
		return nil, "", fmt.Errorf("%w (%d bytes)", channel.ErrMediaTooLarge, max)
	}
	if b, err = base64.StdEncoding.DecodeString(s); err != nil {
		return nil, "", errUnreadable
	}
	if int64(len(b)) > max {
		return nil, "", fmt.Errorf("%w (%d bytes)", channel.ErrMediaTooLarge, max)
	}
	return b, mime, nil
}
