package bot

import (
	"errors"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// A small JSON codec for the ABI payloads. encoding/json works in a guest, but
// its reflection and loops cost about 100 µs an event under the host's
// deadline checks; this costs a few. It decodes exactly the ABI's shapes and
// skips unknown fields, so a newer host's additions do not break an older SDK.

var errSyntax = errors.New("botrun sdk: malformed JSON from the host")

type decoder struct {
	b []byte
	i int
}

func (d *decoder) ws() {
	for d.i < len(d.b) && (d.b[d.i] == ' ' || d.b[d.i] == '\t' || d.b[d.i] == '\n' || d.b[d.i] == '\r') {
		d.i++
	}
}

func (d *decoder) expect(c byte) error {
	d.ws()
	if d.i >= len(d.b) || d.b[d.i] != c {
		return errSyntax
	}
	d.i++
	return nil
}

// object calls field for each key; field must consume the value.
func (d *decoder) object(field func(key string) error) error {
	if err := d.expect('{'); err != nil {
		return err
	}
	d.ws()
	if d.i < len(d.b) && d.b[d.i] == '}' {
		d.i++
		return nil
	}
	for {
		key, err := d.str()
		if err != nil {
			return err
		}
		if err := d.expect(':'); err != nil {
			return err
		}
		if err := field(key); err != nil {
			return err
		}
		d.ws()
		if d.i >= len(d.b) {
			return errSyntax
		}
		switch d.b[d.i] {
		case ',':
			d.i++
		case '}':
			d.i++
			return nil
		default:
			return errSyntax
		}
	}
}

func (d *decoder) null() bool {
	d.ws()
	if strings.HasPrefix(string(d.b[d.i:min(d.i+4, len(d.b))]), "null") {
		d.i += 4
		return true
	}
	return false
}

func (d *decoder) str() (string, error) {
	d.ws()
	if d.i >= len(d.b) || d.b[d.i] != '"' {
		return "", errSyntax
	}
	d.i++
	start, ascii := d.i, true
	b := d.b
	i := d.i
	for ; i < len(b); i++ {
		c := b[i]
		if c == '"' || c == '\\' || c < 0x20 {
			break
		}
		if c >= 0x80 {
			ascii = false
		}
	}
	d.i = i
	if i < len(b) && b[i] == '"' {
		s := string(b[start:i])
		d.i++
		if !ascii {
			s = strings.ToValidUTF8(s, "\uFFFD")
		}
		return s, nil
	}
	var sb strings.Builder
	sb.Write(d.b[start:d.i])
	for d.i < len(d.b) {
		c := d.b[d.i]
		switch {
		case c == '"':
			d.i++
			return strings.ToValidUTF8(sb.String(), "\uFFFD"), nil
		case c < 0x20:
			return "", errSyntax
		case c != '\\':
			sb.WriteByte(c)
			d.i++
			continue
		}
		d.i++
		if d.i >= len(d.b) {
			return "", errSyntax
		}
		e := d.b[d.i]
		d.i++
		switch e {
		case '"', '\\', '/':
			sb.WriteByte(e)
		case 'b':
			sb.WriteByte('\b')
		case 'f':
			sb.WriteByte('\f')
		case 'n':
			sb.WriteByte('\n')
		case 'r':
			sb.WriteByte('\r')
		case 't':
			sb.WriteByte('\t')
		case 'u':
			r, ok := d.hex4()
			if !ok {
				return "", errSyntax
			}
			if utf16.IsSurrogate(r) {
				r2 := rune(-1)
				if d.i+1 < len(d.b) && d.b[d.i] == '\\' && d.b[d.i+1] == 'u' {
					save := d.i
					d.i += 2
					var ok2 bool
					if r2, ok2 = d.hex4(); !ok2 {
						return "", errSyntax
					}
					if dec := utf16.DecodeRune(r, r2); dec != utf8.RuneError {
						r = dec
					} else {
						d.i = save
						r = utf8.RuneError
					}
				} else {
					r = utf8.RuneError
				}
			}
			sb.WriteRune(r)
		default:
			return "", errSyntax
		}
	}
	return "", errSyntax
}

func (d *decoder) hex4() (rune, bool) {
	if d.i+4 > len(d.b) {
		return 0, false
	}
	n, err := strconv.ParseUint(string(d.b[d.i:d.i+4]), 16, 32)
	if err != nil {
		return 0, false
	}
	d.i += 4
	return rune(n), true
}

func (d *decoder) num() (int64, error) {
	d.ws()
	b, i := d.b, d.i
	neg := i < len(b) && b[i] == '-'
	if neg {
		i++
	}
	start := i
	var n int64
	for ; i < len(b) && b[i] >= '0' && b[i] <= '9'; i++ {
		if n > (1<<63-1)/10 {
			return 0, errSyntax
		}
		n = n*10 + int64(b[i]-'0')
	}
	if i == start || (i < len(b) && (b[i] == '.' || b[i] == 'e' || b[i] == 'E')) || n < 0 {
		return 0, errSyntax
	}
	d.i = i
	if neg {
		n = -n
	}
	return n, nil
}

// skip consumes any JSON value.
func (d *decoder) skip() error {
	d.ws()
	if d.i >= len(d.b) {
		return errSyntax
	}
	switch c := d.b[d.i]; {
	case c == '"':
		_, err := d.str()
		return err
	case c == '{':
		return d.object(func(string) error { return d.skip() })
	case c == '[':
		return d.array(d.skip)
	case c == 't' || c == 'f' || c == 'n':
		for _, lit := range []string{"true", "false", "null"} {
			if strings.HasPrefix(string(d.b[d.i:]), lit) {
				d.i += len(lit)
				return nil
			}
		}
		return errSyntax
	default:
		start := d.i
		for d.i < len(d.b) && strings.IndexByte("+-0123456789.eE", d.b[d.i]) >= 0 {
			d.i++
		}
		if _, err := strconv.ParseFloat(string(d.b[start:d.i]), 64); err != nil {
			return errSyntax
		}
		return nil
	}
}

func (d *decoder) array(elem func() error) error {
	if err := d.expect('['); err != nil {
		return err
	}
	d.ws()
	if d.i < len(d.b) && d.b[d.i] == ']' {
		d.i++
		return nil
	}
	for {
		if err := elem(); err != nil {
			return err
		}
		d.ws()
		if d.i >= len(d.b) {
			return errSyntax
		}
		switch d.b[d.i] {
		case ',':
			d.i++
		case ']':
			d.i++
			return nil
		default:
			return errSyntax
		}
	}
}

func (d *decoder) end() error {
	d.ws()
	if d.i != len(d.b) {
		return errSyntax
	}
	return nil
}

func (d *decoder) strField(dst *string) error {
	if d.null() {
		return nil
	}
	s, err := d.str()
	*dst = s
	return err
}

func (d *decoder) media(m *Media) error {
	return d.object(func(k string) error {
		switch k {
		case "type":
			return d.strField(&m.Type)
		case "ref":
			return d.strField(&m.Ref)
		case "url":
			return d.strField(&m.URL)
		case "mime":
			return d.strField(&m.MIME)
		case "caption":
			return d.strField(&m.Caption)
		}
		return d.skip()
	})
}

func decodeEvent(b []byte) (Event, error) {
	var e Event
	d := &decoder{b: b}
	err := d.object(func(k string) error {
		var err error
		switch k {
		case "id":
			return d.strField(&e.ID)
		case "provider":
			return d.strField(&e.Provider)
		case "chat":
			return d.strField(&e.Chat)
		case "from":
			return d.strField(&e.From)
		case "text":
			return d.strField(&e.Text)
		case "attempt":
			var n int64
			n, err = d.num()
			e.Attempt = int(n)
		case "received_at":
			e.ReceivedAt, err = d.num()
		case "kind":
			return d.strField(&e.Kind)
		case "interaction":
			if d.null() {
				e.Interaction = nil
				return nil
			}
			in := &Interaction{}
			err = d.object(func(k string) error {
				switch k {
				case "id":
					return d.strField(&in.ID)
				case "title":
					return d.strField(&in.Title)
				case "message":
					return d.strField(&in.Message)
				}
				return d.skip()
			})
			e.Interaction = in
		case "media":
			if d.null() {
				return nil
			}
			err = d.array(func() error {
				var m Media
				if err := d.media(&m); err != nil {
					return err
				}
				e.Media = append(e.Media, m)
				return nil
			})
		default:
			err = d.skip()
		}
		return err
	})
	if err == nil {
		err = d.end()
	}
	if e.Kind == "" {
		// A host before interactions sends no kind: every event is a message.
		e.Kind = KindMessage
	}
	return e, err
}

func decodeSendResult(b []byte) (SendResult, error) {
	var r SendResult
	d := &decoder{b: b}
	err := d.object(func(k string) error {
		switch k {
		case "status":
			return d.strField(&r.Status)
		case "key":
			return d.strField(&r.Key)
		case "ref":
			return d.strField(&r.Ref)
		case "error":
			return d.strField(&r.Error)
		}
		return d.skip()
	})
	if err == nil {
		err = d.end()
	}
	return r, err
}

func decodeMediaUnavailable(b []byte) (*MediaUnavailableError, error) {
	var e MediaUnavailableError
	d := &decoder{b: b}
	err := d.object(func(k string) error {
		switch k {
		case "reason":
			return d.strField(&e.Reason)
		case "message":
			return d.strField(&e.Message)
		}
		return d.skip()
	})
	if err == nil {
		err = d.end()
	}
	return &e, err
}

// decodeChannelError reads CHANNEL_FAILED's result, {"error":"…"}.
func decodeChannelError(b []byte) (string, error) {
	var msg string
	d := &decoder{b: b}
	err := d.object(func(k string) error {
		if k == "error" {
			return d.strField(&msg)
		}
		return d.skip()
	})
	if err == nil {
		err = d.end()
	}
	return msg, err
}

// encodeEditRequest is edit's request: {"chat","message","text"}.
func encodeEditRequest(chat, message, text string) []byte {
	b := make([]byte, 0, 48+len(chat)+len(message)+len(text))
	b = append(b, `{"chat":`...)
	b = appendString(b, chat)
	b = append(b, `,"message":`...)
	b = appendString(b, message)
	b = append(b, `,"text":`...)
	b = appendString(b, text)
	return append(b, '}')
}

// encodeTypingRequest is typing's request: {"chat"}.
func encodeTypingRequest(chat string) []byte {
	return append(appendString([]byte(`{"chat":`), chat), '}')
}

const hexDigits = "0123456789abcdef"

func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x80 {
			r, size := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && size == 1 {
				b = append(b, "\uFFFD"...)
			} else {
				b = append(b, s[i:i+size]...)
			}
			i += size
			continue
		}
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c == '\n':
			b = append(b, '\\', 'n')
		case c == '\r':
			b = append(b, '\\', 'r')
		case c == '\t':
			b = append(b, '\\', 't')
		case c < 0x20:
			b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		default:
			b = append(b, c)
		}
		i++
	}
	return append(b, '"')
}

func encodeSendRequest(r sendRequest) []byte {
	b := make([]byte, 0, 64+len(r.Text))
	b = append(b, `{"chat":`...)
	b = appendString(b, r.Chat)
	b = append(b, `,"text":`...)
	b = appendString(b, r.Text)
	b = appendMedia(b, r.Media)
	if r.IdempotencyKey != "" {
		b = append(b, `,"idempotency_key":`...)
		b = appendString(b, r.IdempotencyKey)
	}
	if r.At != 0 {
		b = append(b, `,"at":`...)
		b = strconv.AppendInt(b, r.At, 10)
	}
	b = appendChoices(b, r.Buttons, r.List)
	return append(b, '}')
}

// appendChoices appends the "buttons" and "list" fields, each when given.
func appendChoices(b []byte, buttons []Button, list *List) []byte {
	if len(buttons) > 0 {
		b = append(b, `,"buttons":[`...)
		for i, btn := range buttons {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, '{')
			if btn.ID != "" {
				b = append(b, `"id":`...)
				b = appendString(b, btn.ID)
				b = append(b, ',')
			}
			b = append(b, `"title":`...)
			b = appendString(b, btn.Title)
			if btn.URL != "" {
				b = append(b, `,"url":`...)
				b = appendString(b, btn.URL)
			}
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	if list != nil {
		b = append(b, `,"list":{"button":`...)
		b = appendString(b, list.Button)
		b = append(b, `,"sections":[`...)
		for i, sec := range list.Sections {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, '{')
			if sec.Title != "" {
				b = append(b, `"title":`...)
				b = appendString(b, sec.Title)
				b = append(b, ',')
			}
			b = append(b, `"rows":[`...)
			for j, row := range sec.Rows {
				if j > 0 {
					b = append(b, ',')
				}
				b = append(b, `{"id":`...)
				b = appendString(b, row.ID)
				b = append(b, `,"title":`...)
				b = appendString(b, row.Title)
				if row.Description != "" {
					b = append(b, `,"description":`...)
					b = appendString(b, row.Description)
				}
				b = append(b, '}')
			}
			b = append(b, "]}"...)
		}
		b = append(b, "]}"...)
	}
	return b
}

// encodeBroadcastRequest is the broadcast request: r's text, media and at
// (its chat and key are not a broadcast's) to chats under keyPrefix.
func encodeBroadcastRequest(chats []string, r sendRequest, keyPrefix string) []byte {
	n := 64 + len(r.Text) + len(keyPrefix)
	for _, c := range chats {
		n += len(c) + 3
	}
	b := make([]byte, 0, n)
	b = append(b, `{"chats":[`...)
	for i, c := range chats {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, c)
	}
	b = append(b, `],"text":`...)
	b = appendString(b, r.Text)
	b = appendMedia(b, r.Media)
	b = append(b, `,"key_prefix":`...)
	b = appendString(b, keyPrefix)
	if r.At != 0 {
		b = append(b, `,"at":`...)
		b = strconv.AppendInt(b, r.At, 10)
	}
	// A broadcast carries no choices: passed on, the host refuses them.
	b = appendChoices(b, r.Buttons, r.List)
	return append(b, '}')
}

func decodeBroadcastResult(b []byte) (BroadcastResult, error) {
	var r BroadcastResult
	d := &decoder{b: b}
	err := d.object(func(k string) error {
		var n int64
		var err error
		switch k {
		case "journaled":
			n, err = d.num()
			r.Journaled = int(n)
		case "existing":
			n, err = d.num()
			r.Existing = int(n)
		case "cancelled":
			n, err = d.num()
			r.Cancelled = int(n)
		default:
			err = d.skip()
		}
		return err
	})
	if err == nil {
		err = d.end()
	}
	return r, err
}

func appendMedia(b []byte, m *Media) []byte {
	if m != nil {
		b = append(b, `,"media":{"type":`...)
		b = appendString(b, m.Type)
		for _, f := range []struct{ k, v string }{{"ref", m.Ref}, {"url", m.URL}, {"mime", m.MIME}, {"caption", m.Caption}} {
			if f.v != "" {
				b = append(b, `,"`+f.k+`":`...)
				b = appendString(b, f.v)
			}
		}
		b = append(b, '}')
	}
	return b
}
