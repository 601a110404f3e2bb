package wamsg

import (
	"context"
	"errors"
	"io"
	"net/http"
)

// whatsmeow reads a media download whole into memory, and the file length a
// Message states is the sender's word. So the client whatsmeow downloads
// media with caps each body at the limit a download's context carries
// (WithMediaLimit); past it the read fails with ErrMediaOverLimit, which is
// not a network error, so whatsmeow does not retry it.

// ErrMediaOverLimit is a media body longer than its download's limit.
var ErrMediaOverLimit = errors.New("whatsapp-web: the media file is over the download's limit")

type mediaLimitKey struct{}

// MediaOverhead is what encryption adds to a file: padding (at most 16
// bytes) and the 10-byte MAC.
const MediaOverhead = 32

// WithMediaLimit makes downloads under ctx read at most n bytes of body.
func WithMediaLimit(ctx context.Context, n int64) context.Context {
	return context.WithValue(ctx, mediaLimitKey{}, n)
}

// cappedTransport caps the body of each response whose request carries a
// limit (uploads carry none).
type cappedTransport struct{ base http.RoundTripper }

func (t cappedTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(r)
	if err != nil {
		return resp, err
	}
	if n, ok := r.Context().Value(mediaLimitKey{}).(int64); ok {
		resp.Body = &cappedBody{ReadCloser: resp.Body, left: n, over: resp.ContentLength > n}
	}
	return resp, nil
}

// cappedBody reads at most left bytes; one more is ErrMediaOverLimit.
type cappedBody struct {
	io.ReadCloser
	left int64
	over bool
}

func (b *cappedBody) Read(p []byte) (int, error) {
	if b.over {
		return 0, ErrMediaOverLimit
	}
	if int64(len(p)) > b.left+1 {
		p = p[:b.left+1]
	}
	n, err := b.ReadCloser.Read(p)
	b.left -= int64(n)
	if b.left < 0 {
		b.over = true
		return 0, ErrMediaOverLimit
	}
	return n, err
}

// MediaClient is the HTTP client whatsmeow downloads and uploads media with.
func MediaClient() *http.Client {
	return &http.Client{Transport: cappedTransport{base: http.DefaultTransport.(*http.Transport).Clone()}}
}
