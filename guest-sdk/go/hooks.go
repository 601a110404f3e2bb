package bot

import (
	"errors"
	"reflect"
)

// Outgoing is one send as a send hook sees it (SPEC.md section 4.7).
type Outgoing struct {
	// Hook is "before_send" or "after_send".
	Hook string
	// Event is the id of the event whose handler made the send.
	Event    string
	Provider string
	Chat     string
	// Key is the send's idempotency key.
	Key     string
	Text    string
	Media   *Media
	Buttons []Button
	List    *List
	// At is an enqueued send's hold time in Unix milliseconds (0: now).
	At int64
	// Ref is the channel's message id of the send (after_send only).
	Ref string
	// Time is the hook's clock in Unix milliseconds.
	Time int64
}

// ErrCancelSend, returned by a before-send hook, cancels the send: it is
// not journaled, and the handler's send answers "cancelled".
var ErrCancelSend = errors.New("send cancelled by botrun_before_send")

// StatusCancelled is the status of a send a before-send hook cancelled.
const StatusCancelled = "cancelled"

// RunBeforeSend is the body of the botrun_before_send export: the package
// beforesend exports it (import it to have the hook). fn may change the
// Outgoing's Chat, Text, Media, Buttons and List to rewrite the send, return
// ErrCancelSend to cancel it, or another error to fail it (the send is dead).
func RunBeforeSend(n int32, fn func(*Outgoing) error) int32 {
	buf, ok := readHook(n)
	if !ok {
		return 1
	}
	out, err := decodeOutgoing(buf)
	if err != nil {
		logf(LevelError, "botrun sdk: bad send hook: %v", err)
		return 1
	}
	orig, _ := decodeOutgoing(buf)
	switch err := fn(&out); {
	case errors.Is(err, ErrCancelSend):
		return 2
	case err != nil:
		logf(LevelError, "%v", err)
		return 1
	}
	if out.Chat == orig.Chat && out.Text == orig.Text && reflect.DeepEqual(out.Media, orig.Media) &&
		reflect.DeepEqual(out.Buttons, orig.Buttons) && reflect.DeepEqual(out.List, orig.List) {
		return 0
	}
	b := encodeSendRequest(sendRequest{Chat: out.Chat, Text: out.Text, Media: out.Media, Buttons: out.Buttons, List: out.List})
	if err := check("rewrite", hostRewrite(ptr(b), int32(len(b)))); err != nil {
		logf(LevelError, "%v", err)
		return 1
	}
	return 0
}

// RunAfterSend is the body of the botrun_after_send export: the package
// aftersend exports it. An error fn returns is logged, not retried.
func RunAfterSend(n int32, fn func(Outgoing) error) int32 {
	buf, ok := readHook(n)
	if !ok {
		return 1
	}
	out, err := decodeOutgoing(buf)
	if err != nil {
		logf(LevelError, "botrun sdk: bad send hook: %v", err)
		return 1
	}
	if err := fn(out); err != nil {
		logf(LevelError, "%v", err)
		return 1
	}
	return 0
}

func readHook(n int32) ([]byte, bool) {
	buf := make([]byte, n)
	if got := hostEventRead(ptr(buf), n); got != n {
		logf(LevelError, "botrun sdk: event_read returned %d, want %d", got, n)
		return nil, false
	}
	return buf, true
}

func decodeOutgoing(b []byte) (Outgoing, error) {
	var o Outgoing
	d := &decoder{b: b}
	err := d.object(func(k string) error {
		var err error
		switch k {
		case "hook":
			return d.strField(&o.Hook)
		case "event":
			return d.strField(&o.Event)
		case "provider":
			return d.strField(&o.Provider)
		case "chat":
			return d.strField(&o.Chat)
		case "key":
			return d.strField(&o.Key)
		case "text":
			return d.strField(&o.Text)
		case "ref":
			return d.strField(&o.Ref)
		case "at":
			o.At, err = d.num()
		case "time":
			o.Time, err = d.num()
		case "media":
			if d.null() {
				return nil
			}
			o.Media = &Media{}
			err = d.media(o.Media)
		case "buttons":
			if d.null() {
				return nil
			}
			err = d.array(func() error {
				var btn Button
				err := d.object(func(k string) error {
					switch k {
					case "id":
						return d.strField(&btn.ID)
					case "title":
						return d.strField(&btn.Title)
					case "url":
						return d.strField(&btn.URL)
					}
					return d.skip()
				})
				o.Buttons = append(o.Buttons, btn)
				return err
			})
		case "list":
			if d.null() {
				return nil
			}
			o.List = &List{}
			err = d.list(o.List)
		default:
			err = d.skip()
		}
		return err
	})
	if err == nil {
		err = d.end()
	}
	return o, err
}

func (d *decoder) list(l *List) error {
	return d.object(func(k string) error {
		switch k {
		case "button":
			return d.strField(&l.Button)
		case "sections":
			return d.array(func() error {
				var sec ListSection
				err := d.object(func(k string) error {
					switch k {
					case "title":
						return d.strField(&sec.Title)
					case "rows":
						return d.array(func() error {
							var row ListRow
							err := d.object(func(k string) error {
								switch k {
								case "id":
									return d.strField(&row.ID)
								case "title":
									return d.strField(&row.Title)
								case "description":
									return d.strField(&row.Description)
								}
								return d.skip()
							})
							sec.Rows = append(sec.Rows, row)
							return err
						})
					}
					return d.skip()
				})
				l.Sections = append(l.Sections, sec)
				return err
			})
		}
		return d.skip()
	})
}

// Logf writes a line to the host log at level (LevelDebug … LevelError),
// outside a Context: from a send hook.
func Logf(level int32, format string, args ...any) { logf(level, format, args...) }
