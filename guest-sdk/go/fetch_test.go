//go:build !wasip1

package bot

import (
	"errors"
	"reflect"
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

// ordersHost answers fetch by path and records each call's path.
type ordersHost struct {
	*fakeHost
	paths []string
}

func (h *ordersHost) fetch(req []byte) ([]byte, int32) {
	var path string
	d := decoder{b: req}
	d.object(func(k string) error {
		s, err := d.str()
		if k == "path" {
			path = s
		}
		return err
	})
	h.paths = append(h.paths, path)
	switch path {
	case "/orders/42":
		return []byte(`{"status":200,"headers":{"Content-Type":"text/plain","X-Id":"42"},"body":"shipped"}`), 0
	case "/orders/42/cancel":
		return []byte(`{"reason":"timeout","message":"no answer within 10s"}`), int32(CodeFetchFailed)
	}
	return []byte(`{"status":404,"body":"no such order"}`), 0
}

// lookupFlow asks for an order, looks it up, then asks whether to cancel
// it and tries to.
var lookupFlow = NewFlow("lookup", func(f *FlowContext) error {
	id, err := f.Ask("Which order?")
	if err != nil {
		return err
	}
	res, err := f.Fetch("orders", Request{Path: "/orders/" + id})
	if err != nil {
		return err
	}
	lookups = append(lookups, res)
	if _, err := f.Reply("Order " + id + ": " + string(res.Body)); err != nil {
		return err
	}
	yes, err := f.Ask("Cancel it?")
	if err != nil || yes != "yes" {
		return err
	}
	_, err = f.Fetch("orders", Request{Method: "POST", Path: "/orders/" + id + "/cancel"})
	cancelErr = err
	return nil
})

var (
	lookups   []*Response
	cancelErr error
)

// TestFlowKeepsItsCalls: a flow step's API call is made once, by the
// message that takes the step; the later message that replays the step
// gets the same answer from the flow's kept calls, marked replayed, with
// no call to the host; a call that got no response is kept too; the
// finished flow leaves no state.
func TestFlowKeepsItsCalls(t *testing.T) {
	h := &ordersHost{fakeHost: newFakeHost(t)}
	native = h
	lookups, cancelErr = nil, nil
	h.handle(t, "web:1", "/lookup")
	h.handle(t, "web:2", "42")
	if len(h.paths) != 1 || len(lookups) != 1 || lookups[0].Replayed {
		t.Fatalf("the step's first run: calls %q, lookups %+v", h.paths, lookups)
	}
	if _, ok := h.state[flowCallsKey]; !ok {
		t.Fatal("the step's call was not kept with the flow")
	}
	h.handle(t, "web:3", "yes")
	if want := []string{"/orders/42", "/orders/42/cancel"}; !reflect.DeepEqual(h.paths, want) {
		t.Fatalf("the host got the calls %q, want %q: the replayed step called again", h.paths, want)
	}
	if r := lookups[1]; !r.Replayed || r.Status != 200 || string(r.Body) != "shipped" || r.Header["X-Id"] != "42" || r.Header["Content-Type"] != "text/plain" {
		t.Fatalf("the replayed step's answer: %+v", r)
	}
	var fe *FetchError
	if !errors.As(cancelErr, &fe) || fe.Reason != "timeout" || fe.API != "orders" {
		t.Fatalf("the cancel: %v", cancelErr)
	}
	for _, k := range []string{flowKey, flowCallsKey} {
		if _, ok := h.state[k]; ok {
			t.Fatalf("the finished flow left %s", k)
		}
	}
	if want := []string{"Which order?", "Order 42: shipped", "Cancel it?"}; !reflect.DeepEqual(h.delivered, want) {
		t.Fatalf("transcript %q, want %q", h.delivered, want)
	}
}

// TestDecodeFlowCalls: the kept calls' format (SPEC.md section 7) reads
// back to the bytes it was written as; a value encode cannot have written
// is no kept calls at all, not the calls of a prefix of it.
func TestDecodeFlowCalls(t *testing.T) {
	const ok = "21:orders GET /orders/42,1:R,3:200,1:2,12:Content-Type,10:text/plain,4:X-Id,2:42,5:\x00,1:x,"
	const failed = "26:orders POST /orders/42/pay,1:E,7:timeout,0:,"
	for _, v := range []string{"", ok, failed, ok + failed, "3:a b,1:R,1:0,1:0,0:,"} {
		fc := &flowCalls{kept: decodeFlowCalls([]byte(v))}
		if got := string(fc.encode()); got != v {
			t.Errorf("%q reads back as %q", v, got)
		}
	}
	for _, v := range []string{
		ok + "junk",
		ok + "3:abc,",                           // a call cut short
		ok + "3:abc,1:E,7:timeout,",             // an E without its message
		"3:abc,1:X,1:0,",                        // no such kind
		"3:abc,1:R,4:0200,1:0,0:,",              // a leading zero
		"3:abc,1:R,2:+2,1:0,0:,",                // a sign
		"3:abc,1:R,10:2000000000,1:0,0:,",       // over 9 digits
		"3:abc,1:R,3:200,9:999999999,0:,",       // more headers than fields
		"3:abc,1:R,3:200,1:2,1:b,0:,1:a,0:,0:,", // not sorted
		"3:abc,1:R,3:200,1:2,1:a,0:,1:a,0:,0:,", // a name twice
		"99999999999999999999:x,",
	} {
		if kept := decodeFlowCalls([]byte(v)); kept != nil {
			t.Errorf("%q reads as %d kept calls, want none", v, len(kept))
		}
	}
}
