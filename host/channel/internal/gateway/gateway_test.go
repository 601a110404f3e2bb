package gateway

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/channel/httpkit"
)

func TestDecodeMedia(t *testing.T) {
	b := []byte("0123456789")
	enc := base64.StdEncoding.EncodeToString(b)
	for _, c := range []struct {
		body string
		max  int64
		want error // nil: the bytes
	}{
		{`{"base64":"` + enc + `","mimetype":"image/jpeg"}`, 10, nil},
		{`{"mediaType":"imageMessage","base64":"data:image/jpeg;base64,` + enc + `"}`, 10, nil},
		{`{"base64":"` + enc + `"}`, 9, channel.ErrMediaTooLarge},
		{`{"base64":"` + enc + enc + `"}`, 10, channel.ErrMediaTooLarge},
		{`{"base64":""}`, 10, channel.ErrMediaUnavailable},
		{`{"base64":"not base64!"}`, 10, errUnreadable},
		{`{"status":"error"}`, 10, errUnreadable},
		{`<html>`, 10, errUnreadable},
	} {
		got, mime, err := DecodeMedia([]byte(c.body), c.max)
		switch {
		case c.want == nil && (err != nil || string(got) != string(b) || mime != "image/jpeg"):
			t.Errorf("%s: %q (%s), %v", c.body, got, mime, err)
		case c.want != nil && !errors.Is(err, c.want):
			t.Errorf("%s: %v, want %v", c.body, err, c.want)
		}
	}
	if _, _, err := DecodeMedia([]byte(`{"base64":"x"}`), 10); httpkit.MediaGone(err) {
		t.Error("an unreadable answer is final; it may be the gateway's error page: retry")
	}
}

// TestResend: an inbound media sent again fails for good when the gateway
// no longer has it or it is too large, and is retried on other failures.
func TestResend(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/media/gone":
			http.Error(w, `{"status":"error","message":"Message not found"}`, http.StatusBadRequest)
		case "/media/big":
			fmt.Fprintf(w, `{"base64":"%s"}`, strings.Repeat("A", (MaxResend+3)/3*4+4))
		case "/media/ok":
			fmt.Fprint(w, `{"base64":"eA==","mimetype":"image/png"}`)
		default:
			http.Error(w, "down", http.StatusInternalServerError)
		}
	}))
	defer srv.Close()
	c, err := New(Spec{Type: "gw", ID: "g", APIURL: srv.URL, Owner: "o", Auth: func(http.Header) {},
		Media: func(id string) (string, string, any) { return http.MethodGet, Path("media", id), nil }}, channel.Env{})
	if err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]func(error) bool{
		"big":  func(err error) bool { return errors.Is(err, channel.ErrPayloadTooLarge) },
		"gone": func(err error) bool { return errors.Is(err, channel.ErrUnsupportedContent) },
		"down": func(err error) bool { return err != nil && !httpkit.Permanent(err) },
	} {
		if _, _, err := c.Resend(context.Background(), id); !want(err) {
			t.Errorf("%s: %v", id, err)
		}
	}
	if b, mime, err := c.Resend(context.Background(), "ok"); string(b) != "x" || mime != "image/png" || err != nil {
		t.Errorf("%q %q %v", b, mime, err)
	}
}

func TestTimestamp(t *testing.T) {
	for in, want := range map[string]int64{
		`1764412800`: 1764412800, `"1764412800"`: 1764412800, `{"low":1764412800,"high":0,"unsigned":true}`: 1764412800,
		`-5`: 0, `"x"`: 0, `null`: 0, `1.5e9`: 0, `[1]`: 0, `99999999999999`: 0,
	} {
		var ts Timestamp
		if err := json.Unmarshal([]byte(in), &ts); err != nil || int64(ts) != want {
			t.Errorf("%s: %d, %v; want %d", in, ts, err, want)
		}
	}
	if !Timestamp(0).Time().IsZero() || Timestamp(1764412800).Time() != time.Unix(1764412800, 0) {
		t.Error("Time")
	}
}

func TestPathAndFileName(t *testing.T) {
	if got := Path("api", "my session", "get-media-by-message", "false_1@c.us_AB/../x"); got != "/api/my%20session/get-media-by-message/false_1@c.us_AB%2F..%2Fx" {
		t.Errorf("Path: %s", got)
	}
	for u, want := range map[string]string{"https://x.y/a/b.pdf?sig=1": "b.pdf", "https://x.y": "file", "https://x.y/": "file", "::": "file"} {
		if got := FileName(u); got != want {
			t.Errorf("FileName(%q) = %q, want %q", u, got, want)
		}
	}
}

func TestConversational(t *testing.T) {
	for jid, want := range map[string]bool{"5511999999999@s.whatsapp.net": true, "5511999999999@c.us": true, "1203@g.us": true,
		"1@lid": true, "status@broadcast": false, "1203@newsletter": false, "": false} {
		if Conversational(jid) != want {
			t.Errorf("%q: %v", jid, !want)
		}
	}
}

func FuzzDecodeMedia(f *testing.F) {
	f.Add([]byte(`{"base64":"MDEyMzQ1Njc4OQ==","mimetype":"image/jpeg"}`), int64(10))
	f.Add([]byte(`{"base64":"data:image/png;base64,AAAA"}`), int64(3))
	f.Add([]byte(`{"base64":null}`), int64(1))
	f.Fuzz(func(t *testing.T, body []byte, max int64) {
		b, _, err := DecodeMedia(body, max)
		if err == nil && (int64(len(b)) > max || len(b) == 0) {
			t.Fatalf("%d bytes under a limit of %d", len(b), max)
		}
	})
}
