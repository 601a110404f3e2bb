package httpchan

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/botrun/botrun/host/provider"
)

type admitter struct {
	mu   sync.Mutex
	seen map[string]bool
}

func (a *admitter) Admit(_ context.Context, prov string, m provider.Message) (provider.Admission, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	id := prov + ":" + m.ID
	if a.seen[id] {
		return provider.Admission{ID: id, Duplicate: true}, nil
	}
	a.seen[id] = true
	return provider.Admission{ID: id}, nil
}

func TestInboundVerifiesTheSignature(t *testing.T) {
	a := &admitter{seen: map[string]bool{}}
	p := New("gw", "http://unused", "s3cret", a)
	mux := http.NewServeMux()
	p.Routes(mux)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	post := func(body, sig string) int {
		req, _ := http.NewRequest("POST", srv.URL+"/webhooks/gw", strings.NewReader(body))
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
	body := `{"id":"1","chat":"c1","from":"u","text":"hi"}`
	for _, tt := range []struct {
		name, body, sig string
		code            int
	}{
		{"no signature", body, "", 401},
		{"wrong secret", body, Sign([]byte("other"), []byte(body)), 401},
		{"tampered body", strings.Replace(body, "hi", "HI", 1), Sign([]byte("s3cret"), []byte(body)), 401},
		{"good", body, Sign([]byte("s3cret"), []byte(body)), 202},
		{"repeat", body, Sign([]byte("s3cret"), []byte(body)), 200},
		{"bad json", `{"id":`, Sign([]byte("s3cret"), []byte(`{"id":`)), 400},
		{"no chat", `{"id":"2"}`, Sign([]byte("s3cret"), []byte(`{"id":"2"}`)), 400},
	} {
		if got := post(tt.body, tt.sig); got != tt.code {
			t.Errorf("%s: %d, want %d", tt.name, got, tt.code)
		}
	}
	if len(a.seen) != 1 {
		t.Fatalf("admitted %v", a.seen)
	}
}

func TestSendMapsErrors(t *testing.T) {
	status, retryAfter := 200, ""
	var gotSig, gotBody string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		gotBody, gotSig = string(b), r.Header.Get(SignatureHeader)
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
	p := New("gw", srv.URL, "s3cret", nil)
	ref, err := p.Send(context.Background(), provider.Outbound{Chat: "c1", Text: "hello"})
	if err != nil || ref != "msg-7" || gotBody != `{"chat":"c1","text":"hello"}` || !Verify([]byte("s3cret"), []byte(gotBody), gotSig) {
		t.Fatalf("send: %q %v body %s sig %s", ref, err, gotBody, gotSig)
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
		_, err := p.Send(context.Background(), provider.Outbound{Chat: "c1", Text: "x"})
		if err == nil || provider.Permanent(err) != tt.permanent || provider.RetryAfter(err) != tt.wait {
			t.Errorf("%d: err %v permanent %v wait %v", tt.status, err, provider.Permanent(err), provider.RetryAfter(err))
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
