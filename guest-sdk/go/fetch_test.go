//go:build !wasip1

package bot

import (
	"errors"
	"testing"
)

// fetchHost answers fetch with a scripted result and code.
type fetchHost struct {
	fakeHost
	reqs []string
	res  string
	code int32
}

func (h *fetchHost) fetch(req []byte) ([]byte, int32) {
	h.reqs = append(h.reqs, string(req))
	return []byte(h.res), h.code
}

func TestEncodeFetchRequest(t *testing.T) {
	got := string(encodeFetchRequest("crm", Request{Method: "POST", Path: "/orders/42?x=1",
		Header: map[string]string{"X-B": "2", "Content-Type": "application/json"}, Body: []byte(`{"a":"é"}`)}))
	if want := `{"api":"crm","method":"POST","path":"/orders/42?x=1","headers":{"Content-Type":"application/json","X-B":"2"},"body":"{\"a\":\"é\"}"}`; got != want {
		t.Fatalf("%s\nwant %s", got, want)
	}
	if got := string(encodeFetchRequest("img", Request{Path: "/p", Body: []byte{0xff, 0}, Key: "k1"})); got != `{"api":"img","path":"/p","body_base64":"/wA=","key":"k1"}` {
		t.Fatalf("binary body: %s", got)
	}
}

func TestFetch(t *testing.T) {
	ctx := &Context{Event: Event{ID: "ev", Chat: "c1"}}
	if _, err := ctx.Fetch("crm", Request{Path: "/x"}); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("Fetch without a host: %v", err)
	}
	h := &fetchHost{res: `{"status":404,"headers":{"Content-Type":"text/plain"},"body":"no such order","replayed":true}`}
	newFakeHost(t)
	native = h
	r, err := ctx.Fetch("crm", Request{Path: "/orders/9"})
	if err != nil || r.Status != 404 || string(r.Body) != "no such order" || r.Header["Content-Type"] != "text/plain" || !r.Replayed {
		t.Fatalf("Fetch: %+v, %v", r, err)
	}
	h.res = `{"status":200,"body_base64":"AAE="}`
	if r, err := ctx.Fetch("crm", Request{Path: "/bin"}); err != nil || string(r.Body) != "\x00\x01" || r.Replayed {
		t.Fatalf("binary answer: %+v, %v", r, err)
	}
	h.code, h.res = -10, `{"reason":"timeout","message":"no answer within 10s"}`
	_, err = ctx.Fetch("crm", Request{Path: "/slow"})
	var fe *FetchError
	if !errors.Is(err, ErrFetchFailed) || !errors.As(err, &fe) || fe.Reason != "timeout" || CodeOf(err) != CodeFetchFailed ||
		err.Error() != "botrun.fetch crm: FETCH_FAILED: timeout: no answer within 10s" {
		t.Fatalf("FETCH_FAILED: %v", err)
	}
	h.code, h.res = -3, ""
	if _, err := ctx.Fetch("nope", Request{Path: "/"}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown api: %v", err)
	}
}
