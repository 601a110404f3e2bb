package email

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"mime"
	"strings"
	"unicode/utf8"

	"github.com/emersion/go-message"
	_ "github.com/emersion/go-message/charset" // decode the charsets mail uses
	"github.com/emersion/go-message/mail"
)

// parsed is one message as the channel reads it.
type parsed struct {
	MessageID  string
	From       string // the sender's address: the From field's only one, lowercased
	Subject    string
	References []string // References, else In-Reply-To
	Text       string   // the plain-text part, or the HTML part as text, trimmed
	Parts      []part
	// Automatic names the header field for which the message must not be
	// answered (RFC 3834: it is itself automatic, a list's, or a bounce);
	// "" for none.
	Automatic string
}

// part is an attachment: its index among the message's attachments, type
// and content digest. Its bytes are kept only when asked for (LoadMedia).
type part struct {
	MIME     string
	Filename string
	Digest   string // hex SHA-256 of the decoded bytes
	Size     int
	Data     []byte
}

// maxParts caps the parts read from one message.
const maxParts = 100

// errNoMessageID is returned for a message without a Message-ID: it cannot
// be admitted once.
var errNoMessageID = errors.New("the message has no valid Message-ID")

// decodeMessage parses an RFC 822 message from untrusted bytes. keep is the
// index of the attachment whose bytes to keep (-1 for none).
func decodeMessage(raw []byte, keep int) (*parsed, error) {
	// message.Read, not mail.CreateReader: an unknown (misspelled)
	// Content-Transfer-Encoding of the whole message, "8-bit", comes back
	// with its body as it stands, read raw as a part's is below, where
	// mail.CreateReader returns no reader at all.
	e, err := message.Read(bytes.NewReader(raw))
	if e == nil || (err != nil && !message.IsUnknownCharset(err) && !message.IsUnknownEncoding(err)) {
		return nil, fmt.Errorf("parsing the message: %w", err)
	}
	r := mail.NewReader(e)
	defer r.Close()
	m := &parsed{}
	m.MessageID, err = r.Header.MessageID()
	if err != nil || m.MessageID == "" || !validID(m.MessageID) {
		return nil, errNoMessageID
	}
	if m.From, err = sender(r.Header); err != nil {
		return nil, err
	}
	m.Automatic = automatic(r.Header.Header)
	m.Subject, _ = r.Header.Subject()
	refs, _ := r.Header.MsgIDList("References")
	if len(refs) == 0 {
		refs, _ = r.Header.MsgIDList("In-Reply-To")
	}
	for _, id := range refs {
		if validID(id) {
			m.References = append(m.References, id)
		}
	}
	var plain, html string
	for i := 0; ; i++ {
		if i >= maxParts {
			return nil, fmt.Errorf("the message has more than %d parts", maxParts)
		}
		p, err := r.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil && !message.IsUnknownCharset(err) && !message.IsUnknownEncoding(err) {
			return nil, fmt.Errorf("parsing the message: %w", err)
		}
		if p == nil {
			break
		}
		var disposition, filename string
		ct, _, _ := mime.ParseMediaType(p.Header.Get("Content-Type"))
		if ct == "" {
			ct = "text/plain"
		}
		if h, ok := p.Header.(*mail.AttachmentHeader); ok {
			disposition = "attachment"
			filename, _ = h.Filename()
		}
		body, err := io.ReadAll(io.LimitReader(p.Body, MaxMessageBytes))
		if err != nil {
			return nil, fmt.Errorf("reading a part: %w", err)
		}
		switch {
		case disposition == "" && ct == "text/plain" && plain == "":
			plain = string(body)
			continue
		case disposition == "" && ct == "text/html" && html == "":
			html = string(body)
			continue
		case disposition == "" && strings.HasPrefix(ct, "text/"):
			continue // an alternative or a second body
		}
		sum := sha256.Sum256(body)
		a := part{MIME: ct, Filename: filename, Digest: hex.EncodeToString(sum[:]), Size: len(body)}
		if len(m.Parts) == keep {
			a.Data = body
		}
		m.Parts = append(m.Parts, a)
	}
	text := plain
	if text == "" && html != "" {
		text = htmlToText(html)
	}
	m.Text = trimReply(strings.ToValidUTF8(text, "\uFFFD"))
	return m, nil
}

// errSender is wrapped by the error for a message whose sender is not one
// address: it is refused, never admitted under one of its addresses.
var errSender = errors.New("the message's sender is ambiguous")

// sender returns the message's sender: the address of its From field, the
// one DMARC aligns with the signing domain, lowercased. Reply-To is no
// identity (anyone may name anyone there) and is ignored. A message with
// more than one From field or address, or a Sender other than its From,
// is refused (errSender): which address it speaks for is not one the
// server checked.
func sender(h mail.Header) (string, error) {
	if n := len(h.Values("From")); n > 1 {
		return "", fmt.Errorf("%w: it has %d From fields", errSender, n)
	}
	l, err := h.AddressList("From")
	if err != nil || len(l) == 0 || l[0].Address == "" {
		return "", errors.New("the message has no sender address")
	}
	if len(l) > 1 {
		return "", fmt.Errorf("%w: its From names %d addresses", errSender, len(l))
	}
	from := strings.ToLower(l[0].Address)
	if h.Has("Sender") {
		s, err := h.AddressList("Sender")
		if err != nil || len(s) != 1 || !strings.EqualFold(s[0].Address, from) || len(h.Values("Sender")) > 1 {
			return "", fmt.Errorf("%w: its Sender is not its From address", errSender)
		}
	}
	return from, nil
}

// automatic names the field for which a message with header h must not be
// answered, after
// RFC 3834 section 2, or returns "": an Auto-Submitted other than "no" (an
// auto-reply, an auto-generated notice), a Precedence of bulk, junk or
// list, a List-Id (a mailing list's), or a null Return-Path (a bounce).
func automatic(h message.Header) string {
	if v := h.Get("Auto-Submitted"); v != "" {
		token, _, _ := strings.Cut(v, ";")
		if !strings.EqualFold(strings.TrimSpace(token), "no") {
			return "Auto-Submitted"
		}
	}
	switch strings.ToLower(strings.TrimSpace(h.Get("Precedence"))) {
	case "bulk", "junk", "list":
		return "Precedence"
	}
	if h.Has("List-Id") {
		return "List-Id"
	}
	if h.Has("Return-Path") && strings.TrimSpace(h.Get("Return-Path")) == "<>" {
		return "Return-Path"
	}
	return ""
}

// validID reports whether a Message-ID can key a message: printable, short.
func validID(id string) bool {
	if id == "" || len(id) > 512 || !utf8.ValidString(id) {
		return false
	}
	for _, r := range id {
		if r <= ' ' || r == 0x7f || r == '<' || r == '>' {
			return false
		}
	}
	return true
}

// trimReply drops the quoted history and the signature of a reply: lines
// quoted with ">", the "On … wrote:" line that introduces them, an Outlook
// "-----Original Message-----" and what follows, and everything after the
// "-- " signature separator.
func trimReply(text string) string {
	text = strings.ReplaceAll(text, "\r\n", "\n")
	lines := strings.Split(text, "\n")
	var out []string
	for _, l := range lines {
		t := strings.TrimRight(l, " \t")
		if l == "-- " || t == "-----Original Message-----" || t == "________________________________" {
			break
		}
		if strings.HasPrefix(strings.TrimLeft(l, " "), ">") {
			continue
		}
		out = append(out, t)
	}
	// The attribution line: "On <date>, <someone> wrote:" (possibly
	// wrapped on two lines), now followed by nothing.
	for len(out) > 0 && strings.TrimSpace(out[len(out)-1]) == "" {
		out = out[:len(out)-1]
	}
	if n := len(out); n > 0 && strings.HasSuffix(out[n-1], "wrote:") {
		switch {
		case strings.HasPrefix(out[n-1], "On "):
			out = out[:n-1]
		case n > 1 && strings.HasPrefix(out[n-2], "On "):
			out = out[:n-2]
		}
	}
	return strings.TrimSpace(strings.Join(out, "\n"))
}
