package httpchan

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/channel/channeltest"
	"github.com/botrun/botrun/host/channel/httpkit"
)

// server serves the channel's routes with admit as the host.
func server(t *testing.T, a *channeltest.Journal) string {
	p, err := Open(Config{ID: "gw", URL: "http://unused", Secret: "s3cret"}, channel.Env{Admitter: a})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	p.Routes(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}

// post sends body with the given timestamp and signature headers ("" leaves
// one out).
func post(t *testing.T, url, body, ts, sig string) int {
	t.Helper()
	req, _ := http.NewRequest("POST", url+"/webhooks/gw", strings.NewReader(body))
	if ts != "" {
		req.Header.Set(TimestampHeader, ts)
	}
	if sig != "" {
		req.Header.Set(SignatureHeader, sig)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// hmacHex is the signature a gateway computes: HMAC-SHA256 of msg, hex.
func hmacHex(secret, msg string) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(msg))
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

func TestInboundVerifiesTheSignature(t *testing.T) {
	a := channeltest.NewJournal()
	url := server(t, a)
	body := `{"id":"1","chat":"c1","from":"u","text":"hi"}`
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	sign := func(secret, b string) string { return hmacHex(secret, ts+"."+b) }
	for _, tt := range []struct {
		name, body, sig string
		code            int
	}{
		{"no signature", body, "", 401},
		{"wrong secret", body, sign("other", body), 401},
		{"tampered body", strings.Replace(body, "hi", "HI", 1), sign("s3cret", body), 401},
		{"good", body, sign("s3cret", body), 202},
		{"repeat", body, sign("s3cret", body), 200},
		{"bad json", `{"id":`, sign("s3cret", `{"id":`), 400},
		{"no chat", `{"id":"2"}`, sign("s3cret", `{"id":"2"}`), 400},
	} {
		if got := post(t, url, tt.body, ts, tt.sig); got != tt.code {
			t.Errorf("%s: %d, want %d", tt.name, got, tt.code)
		}
	}
	if len(a.Admitted()) != 1 {
		t.Fatalf("admitted %v", a.Admitted())
	}
}

// TestSignedRequestReplayRefused: a request captured once is accepted again
// after retention purged its record unless its signing time is checked. The
// signature covers "<timestamp>.<body>"; outside the window, or without a
// timestamp (the old body-only signature), the request is refused.
func TestSignedRequestReplayRefused(t *testing.T) {
	body := `{"id":"m1","chat":"c1","from":"u","text":"pay 10"}`
	now := time.Now()
	at := func(d time.Duration) string { return strconv.FormatInt(now.Add(d).Unix(), 10) }
	captured := at(-6 * time.Minute)
	for _, tt := range []struct {
		name, ts, sig string
		code          int
	}{
		{"body-only signature, no timestamp", "", hmacHex("s3cret", body), 401},
		{"body-only signature, fresh timestamp", at(0), hmacHex("s3cret", body), 401},
		{"captured 6 minutes ago, replayed", captured, hmacHex("s3cret", captured+"."+body), 401},
		{"timestamp moved to now, old signature", at(0), hmacHex("s3cret", captured+"."+body), 401},
		{"signed 6 minutes ahead", at(6 * time.Minute), hmacHex("s3cret", at(6*time.Minute)+"."+body), 401},
		{"not a number", "1e9", hmacHex("s3cret", "1e9."+body), 401},
		{"fresh", at(-time.Minute), hmacHex("s3cret", at(-time.Minute)+"."+body), 202},
	} {
		// A new admitter: the record of an earlier delivery has been purged.
		url := server(t, channeltest.NewJournal())
		if got := post(t, url, body, tt.ts, tt.sig); got != tt.code {
			t.Errorf("%s: %d, want %d", tt.name, got, tt.code)
		}
	}
}

func TestSendMapsErrors(t *testing.T) {
	status, retryAfter := 200, ""
	var gotBody string
	var gotHeader http.Header
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		gotBody, gotHeader = string(b), r.Header
		if retryAfter != "" {
			w.Header().Set("Retry-After", retryAfter)
		}
		w.WriteHeader(status)
		if status == 200 {
			w.Write([]byte(`{"id":"msg-7"}`))
		} else {
			w.Write([]byte(`{"error":"nope"}`))
		}
	}))
	defer srv.Close()
	p, err := Open(Config{ID: "gw", URL: srv.URL, Secret: "s3cret"}, channel.Env{})
	if err != nil {
		t.Fatal(err)
	}
	ref, err := p.Send(context.Background(), channel.Outbound{Chat: "c1", Text: "hello"})
	if err != nil || ref != "msg-7" || gotBody != `{"chat":"c1","text":"hello"}` || VerifyRequest(gotHeader, []byte("s3cret"), []byte(gotBody), time.Now(), time.Minute) != nil {
		t.Fatalf("send: %q %v body %s headers %v", ref, err, gotBody, gotHeader)
	}
	if k := gotHeader.Get(IdempotencyKeyHeader); k != "" {
		t.Fatalf("a send without a key carried Idempotency-Key %q", k)
	}
	// Choices travel to the gateway, never dropped.
	if _, err := p.Send(context.Background(), channel.Outbound{Chat: "c1", Text: "pick", Buttons: []abi.Button{{ID: "y", Title: "Yes"}},
		List: &abi.List{Button: "Open", Sections: []abi.ListSection{{Rows: []abi.ListRow{{ID: "r", Title: "R"}}}}}}); err != nil ||
		gotBody != `{"chat":"c1","text":"pick","buttons":[{"id":"y","title":"Yes"}],"list":{"button":"Open","sections":[{"rows":[{"id":"r","title":"R"}]}]}}` {
		t.Fatalf("a send with choices: %v, body %s", err, gotBody)
	}
	// Without dedupes = true, a keyed send carries no Idempotency-Key.
	if _, err := p.Send(context.Background(), channel.Outbound{Chat: "c1", Text: "hello", Key: "web:m1:1"}); err != nil {
		t.Fatal(err)
	}
	if k := gotHeader.Get(IdempotencyKeyHeader); k != "" {
		t.Fatalf("a send without dedupes = true carried Idempotency-Key %q", k)
	}
	if p.IdempotentSends() {
		t.Fatal("IdempotentSends without dedupes = true")
	}
	dp, _ := Open(Config{ID: "gw", URL: srv.URL, Secret: "s3cret", Dedupes: true}, channel.Env{})
	if !dp.IdempotentSends() {
		t.Fatal("dedupes = true is not IdempotentSends")
	}
	// With it, the key travels on every attempt, the same each time.
	for range 2 {
		if _, err := dp.Send(context.Background(), channel.Outbound{Chat: "c1", Text: "hello", Key: "web:m1:1"}); err != nil {
			t.Fatal(err)
		}
		if k := gotHeader.Get(IdempotencyKeyHeader); k != "web:m1:1" {
			t.Fatalf("Idempotency-Key = %q, want the outbox key", k)
		}
	}
	for _, tt := range []struct {
		status    int
		permanent bool
		wait      time.Duration
	}{{400, true, 0}, {404, true, 0}, {413, true, 0}, {422, true, 0}, {500, false, 0}, {503, false, 0}, {429, false, 7 * time.Second}} {
		status, retryAfter = tt.status, ""
		if tt.status == 429 {
			retryAfter = "7"
		}
		_, err := p.Send(context.Background(), channel.Outbound{Chat: "c1", Text: "x"})
		if err == nil || httpkit.Permanent(err) != tt.permanent || httpkit.RetryAfter(err) != tt.wait {
			t.Errorf("%d: err %v permanent %v wait %v", tt.status, err, httpkit.Permanent(err), httpkit.RetryAfter(err))
		}
	}
}

func FuzzDecodeInbound(f *testing.F) {
	f.Add([]byte(`{"id":"1","chat":"c1","from":"u","text":"hi"}`))
	f.Add([]byte(`{"id":""}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		in, err := DecodeInbound(b)
		if err != nil {
			if !errors.Is(err, ErrBadRequest) {
				t.Fatal(err)
			}
			return
		}
		if in.ID == "" || in.Chat == "" {
			t.Fatalf("accepted %+v", in)
		}
	})
}

// FuzzVerifyRequest feeds untrusted timestamp and signature headers: only a
// request signed with the secret within the window passes.
func FuzzVerifyRequest(f *testing.F) {
	now := time.Unix(1_700_000_000, 0)
	f.Add("1700000000", "sha256=00", []byte(`{}`))
	f.Add("", "", []byte(nil))
	f.Add("-1", "sha256=", []byte("x"))
	f.Add("99999999999999999999", "x", []byte("x"))
	f.Fuzz(func(t *testing.T, ts, sig string, body []byte) {
		h := http.Header{}
		h.Set(TimestampHeader, ts)
		h.Set(SignatureHeader, sig)
		err := VerifyRequest(h, []byte("s3cret"), body, now, time.Minute)
		if err == nil && sig != Sign([]byte("s3cret"), h.Get(TimestampHeader), body) {
			t.Fatalf("accepted ts %q sig %q", ts, sig)
		}
		if err != nil && !errors.Is(err, ErrStale) && !errors.Is(err, ErrBadSignature) {
			t.Fatalf("unexpected error %v", err)
		}
		h = http.Header{}
		SignRequest(h, []byte("s3cret"), body, now)
		if err := VerifyRequest(h, []byte("s3cret"), body, now, time.Minute); err != nil {
			t.Fatalf("own signature refused: %v", err)
		}
	})
}
