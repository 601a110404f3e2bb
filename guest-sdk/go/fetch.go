package bot

import (
	"encoding/base64"
	"errors"
	"sort"
	"unicode/utf8"
)

// Request is one call of a configured API (Fetch).
type Request struct {
	// Method is GET (the default when empty), HEAD, POST, PUT, PATCH or
	// DELETE.
	Method string
	// Path is the path under the API's url, with its query:
	// "/orders/42?expand=items".
	Path string
	// Header holds the request's headers; the headers bot.toml sets for
	// the API replace those of the same name.
	Header map[string]string
	// Body is the request's body, at most 1 MiB.
	Body []byte
	// Key replaces the call's Idempotency-Key ("<event id>:fetch:<n>",
	// the n-th call of the event).
	Key string
}

// Response is the API's answer, whatever its status: a 404 or a 500 is a
// Response, not an error.
type Response struct {
	Status int
	// Header holds the answer's headers (canonical names, the first value
	// of each).
	Header map[string]string
	Body   []byte
	// Replayed is true when the answer came from the journal: the event is
	// handled again (after a crash, a retry or a replay) and the call it
	// made the first time is not made again; or, in a flow, from the calls
	// kept with it (a replayed step's call, see Fetch).
	Replayed bool
}

// ErrFetchFailed is matched (errors.Is) by a *FetchError.
var ErrFetchFailed = errors.New("FETCH_FAILED")

// FetchError is a call that got no response: Reason is "refused" (the
// destination is not allowed), "connection", "timeout" or "too-large"
// (the response is over the API's max_response); Message says more.
type FetchError struct {
	API, Reason, Message string
}

func (e *FetchError) Error() string {
	s := "botrun.fetch " + e.API + ": FETCH_FAILED: " + e.Reason
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

// Is makes errors.Is(err, ErrFetchFailed) work.
func (e *FetchError) Is(target error) bool { return target == ErrFetchFailed }

// Fetch calls api, an [[apis]] entry of bot.toml, through the host, which
// adds the entry's headers (the bot never sees them) and an
// Idempotency-Key. The answer is journaled before Fetch returns: when the
// event is handled again, the same call gets the same answer without
// calling the API again. Errors: a *FetchError when the call got no
// response; ErrNotFound for an api bot.toml does not name; ErrBadPayload
// for a path that is not under the API's url or a header the host
// refuses; ErrTooLarge past bot.max_fetches calls in one event or a body
// over 1 MiB; ErrUnsupported from a host without fetch.
//
// In a flow, a step's calls are kept with the flow (the chat's state key
// "botrun.flow.calls", committed with each message): when a later message
// replays the step, its calls are answered from there, marked Replayed,
// and not made again, however many messages the flow takes. A call whose
// API, method or path differs from the kept one at its place (the module
// changed) is made anew. An answer too large for the chat's state is not
// kept (logged): the replayed step calls again under that message's
// Idempotency-Key. The kept calls' format is SPEC.md section 7's, shared
// by every SDK.
func (c *Context) Fetch(api string, req Request) (*Response, error) {
	fc := c.flowCalls
	if fc == nil {
		return c.fetch(api, req)
	}
	method := req.Method
	if method == "" {
		method = "GET"
	}
	id := api + " " + method + " " + req.Path
	if c.replaying {
		if res, err, ok := fc.take(c, id); ok {
			return res, err
		}
	}
	res, err := c.fetch(api, req)
	if !c.replaying {
		fc.keep(id, res, err)
	}
	return res, err
}

// fetch makes the call through the host.
func (c *Context) fetch(api string, req Request) (*Response, error) {
	b := encodeFetchRequest(api, req)
	n := hostFetch(ptr(b), int32(len(b)))
	if Code(n) == CodeFetchFailed {
		buf := make([]byte, 4096)
		got := hostResultRead(ptr(buf), int32(len(buf)))
		if got < 0 {
			return nil, &HostError{Func: "result_read", Code: Code(got)}
		}
		e, err := decodeMediaUnavailable(buf[:got])
		if err != nil {
			return nil, errors.New("botrun.fetch: bad result: " + err.Error())
		}
		return nil, &FetchError{API: api, Reason: e.Reason, Message: e.Message}
	}
	res, err := result("fetch", n)
	if err != nil {
		return nil, err
	}
	r, err := decodeFetchResponse(res)
	if err != nil {
		return nil, errors.New("botrun.fetch: bad result: " + err.Error())
	}
	return r, nil
}

// encodeFetchRequest is fetch's request: the body as text when it is
// UTF-8, in base64 otherwise.
func encodeFetchRequest(api string, r Request) []byte {
	b := make([]byte, 0, 64+len(api)+len(r.Path)+len(r.Body)*4/3)
	b = append(b, `{"api":`...)
	b = appendString(b, api)
	if r.Method != "" {
		b = append(b, `,"method":`...)
		b = appendString(b, r.Method)
	}
	b = append(b, `,"path":`...)
	b = appendString(b, r.Path)
	if len(r.Header) > 0 {
		names := make([]string, 0, len(r.Header))
		for k := range r.Header {
			names = append(names, k)
		}
		sort.Strings(names) // the same request, the same bytes
		b = append(b, `,"headers":{`...)
		for i, k := range names {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, k)
			b = append(b, ':')
			b = appendString(b, r.Header[k])
		}
		b = append(b, '}')
	}
	if len(r.Body) > 0 {
		if utf8.Valid(r.Body) {
			b = append(b, `,"body":`...)
			b = appendString(b, string(r.Body))
		} else {
			b = append(b, `,"body_base64":"`...)
			b = base64.StdEncoding.AppendEncode(b, r.Body)
			b = append(b, '"')
		}
	}
	if r.Key != "" {
		b = append(b, `,"key":`...)
		b = appendString(b, r.Key)
	}
	return append(b, '}')
}

func decodeFetchResponse(b []byte) (*Response, error) {
	r := &Response{Header: map[string]string{}}
	d := &decoder{b: b}
	err := d.object(func(k string) error {
		switch k {
		case "status":
			n, err := d.num()
			r.Status = int(n)
			return err
		case "headers":
			return d.object(func(name string) error {
				v, err := d.str()
				r.Header[name] = v
				return err
			})
		case "body":
			s, err := d.str()
			r.Body = []byte(s)
			return err
		case "body_base64":
			s, err := d.str()
			if err != nil {
				return err
			}
			r.Body, err = base64.StdEncoding.DecodeString(s)
			return err
		case "replayed":
			d.ws()
			if d.i+4 <= len(d.b) && string(d.b[d.i:d.i+4]) == "true" {
				r.Replayed = true
			}
			return d.skip()
		}
		return d.skip()
	})
	if err == nil {
		err = d.end()
	}
	return r, err
}
