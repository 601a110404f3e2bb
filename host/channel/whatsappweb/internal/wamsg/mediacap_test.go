package wamsg

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestMediaClientCapsTheBody: a download whose context carries a limit
// reads at most that many bytes, whatever the server says of the length
// (with or without a Content-Length); a request without a limit (an upload)
// is not capped; the error is not a network error whatsmeow would retry.
func TestMediaClientCapsTheBody(t *testing.T) {
	body := strings.Repeat("x", 1000)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("chunked") != "" {
			w.(http.Flusher).Flush() // no Content-Length
		}
		io.WriteString(w, body)
	}))
	defer srv.Close()
	cli := MediaClient()
	get := func(ctx context.Context, url string) ([]byte, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := cli.Do(req)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		return io.ReadAll(resp.Body)
	}
	for _, url := range []string{srv.URL, srv.URL + "?chunked=1"} {
		if _, err := get(WithMediaLimit(context.Background(), 999), url); !errors.Is(err, ErrMediaOverLimit) {
			t.Errorf("%s: a 1,000-byte body under a 999-byte limit: %v", url, err)
		}
		var ne interface{ Timeout() bool }
		if _, err := get(WithMediaLimit(context.Background(), 999), url); errors.As(err, &ne) {
			t.Errorf("%s: the over-limit error is a network error (whatsmeow would retry it): %T", url, err)
		}
		if b, err := get(WithMediaLimit(context.Background(), 1000), url); err != nil || len(b) != 1000 {
			t.Errorf("%s: a body at the limit: %d bytes, %v", url, len(b), err)
		}
		if b, err := get(context.Background(), url); err != nil || len(b) != 1000 {
			t.Errorf("%s: no limit: %d bytes, %v", url, len(b), err)
		}
	}
}
