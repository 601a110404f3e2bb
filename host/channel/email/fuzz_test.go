package email

import (
	"encoding/base64"
	"testing"
)

// FuzzDecodeMessage feeds untrusted RFC 822 bytes to the parser (MIME,
// charsets, HTML to text, reply trimming): it must not panic or hang.
func FuzzDecodeMessage(f *testing.F) {
	f.Add([]byte("From: a@b.c\r\nMessage-ID: <x@y>\r\n\r\nhello\r\n> quoted\r\n-- \r\nsig"))
	f.Add([]byte("From: a@b.c\r\nMessage-ID: <x@y>\r\nContent-Type: multipart/mixed; boundary=B\r\n\r\n--B\r\nContent-Type: text/html\r\n\r\n<p>a<br>b</p><script>x</script>\r\n--B\r\nContent-Type: image/png\r\nContent-Disposition: attachment\r\nContent-Transfer-Encoding: base64\r\n\r\n" + base64.StdEncoding.EncodeToString([]byte("png")) + "\r\n--B--\r\n"))
	f.Add([]byte("From: =?utf-8?q?A?= <a@b.c>\r\nMessage-ID: <x@y>\r\nReferences: <r@s> <t@u>\r\nContent-Type: text/plain; charset=iso-8859-1\r\n\r\n\xe9t\xe9"))
	// An unknown transfer encoding of the whole message (mail.CreateReader
	// returns no reader; it is read raw): found by the fuzzer, it crashed
	// the IMAP loop.
	f.Add([]byte("Content-TrAnsfer-EnCoding:0"))
	f.Add([]byte("From: a@b.c\r\nMessage-ID: <x@y>\r\nContent-Transfer-Encoding: 0\r\n\r\nhello"))
	f.Add([]byte("From: a@b.c\r\nMessage-ID: <x@y>\r\nContent-Type: multipart/mixed; boundary=B\r\nContent-Transfer-Encoding: 8-bit\r\n\r\n--B\r\nContent-Transfer-Encoding: 8-bit\r\n\r\nhi\r\n--B--\r\n"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		m, err := decodeMessage(raw, 0)
		if err != nil {
			return
		}
		if !validID(m.MessageID) {
			t.Fatalf("admitted an invalid Message-ID %q", m.MessageID)
		}
		for _, r := range m.References {
			if !validID(r) {
				t.Fatalf("kept an invalid reference %q", r)
			}
		}
		htmlToText(string(raw))
	})
}

func TestHTMLToTextAndTrimming(t *testing.T) {
	cases := map[string]string{
		"<html><head><title>T</title><style>p{}</style></head><body><p>Hello &amp; welcome</p><div>line<br>two</div><blockquote>old</blockquote></body></html>": "Hello & welcome\n\nline\ntwo",
		"<p>unclosed <b>bold": "unclosed bold",
		"<html><head><title>T</title><body><p>Hello there</p>":                  "Hello there",
		"<head><title>T</title><p>No body tag":                                  "No body tag",
		"<head><script>x</script><body><blockquote>old<p>q</p></blockquote>new": "new",
	}
	for in, want := range cases {
		if got := htmlToText(in); got != want {
			t.Errorf("htmlToText(%q) = %q, want %q", in, got, want)
		}
	}
	trims := map[string]string{
		"Yes\n\nOn Mon, 2 Jan 2006, Alice <a@b.c>\nwrote:\n> earlier\n> text\n": "Yes",
		"Sure\r\n-- \r\nBob\r\n":                     "Sure",
		"Top\n-----Original Message-----\nFrom: x\n": "Top",
		"> only quoted":                              "",
		"inline\n> quote\nanswer":                    "inline\nanswer",
	}
	for in, want := range trims {
		if got := trimReply(in); got != want {
			t.Errorf("trimReply(%q) = %q, want %q", in, got, want)
		}
	}
}

// A misspelled transfer encoding of the whole message ("8-bit", "0") is
// read as it stands, as a part's is: a customer with a broken mailer is
// still answered.
func TestAnUnknownTransferEncodingIsReadRaw(t *testing.T) {
	for _, enc := range []string{"8-bit", "0"} {
		raw := "From: alice@example.org\r\nMessage-ID: <x@y>\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Transfer-Encoding: " + enc + "\r\n\r\nhello caf\xc3\xa9\r\n"
		m, err := decodeMessage([]byte(raw), -1)
		if err != nil || m.Text != "hello café" || m.From != "alice@example.org" {
			t.Errorf("Content-Transfer-Encoding %q: %+v, %v", enc, m, err)
		}
	}
}
