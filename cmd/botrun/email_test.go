package main

import (
	"encoding/base64"
	"fmt"
	"strings"
	"syscall"
	"testing"

	"github.com/botrun/botrun/host/channel/email/emailtest"
	"github.com/botrun/botrun/internal/wasmbuild"
)

// TestEmailEndToEnd runs botrun (a real process, the Go echo example,
// SQLite) against in-process IMAP and SMTP servers: a message appended to
// the mailbox is answered once, in its thread, however often it is
// delivered again (the same Message-ID under a new UID); the bot's own mail
// and a message without a Message-ID are refused. Then an image arrives, is
// journaled, and botrun is SIGKILLed while the guest's fetch of the
// attachment is held; restarted, the guest loads the bytes from the
// journaled reference and its reply carries their size and the attachment.
func TestEmailEndToEnd(t *testing.T) {
	bin := buildBotrun(t)
	module := wasmbuild.Go(t, "../../examples/echo")
	s, err := emailtest.Start(emailtest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const user = "alice@example.org"
	byText := func(text string) (emailtest.Sent, bool) {
		for _, m := range s.Sent() {
			if got, _ := m.Text(); strings.TrimSpace(got) == text {
				return m, true
			}
		}
		return emailtest.Sent{}, false
	}
	c := channelCase{name: "email", provider: "mail", chat: user,
		toml: func(string) string {
			return fmt.Sprintf("id = \"mail\"\ntype = \"email\"\nimap_url = \"imaps://%s\"\nsmtp_url = \"smtps://%s\"\nusername = %q\npassword = %q\nfrom = %q\ntls_insecure = true\npoll = \"1s\"\n",
				s.IMAPAddr, s.SMTPAddr, emailtest.Username, emailtest.Password, emailtest.Username)
		},
		replies: func() []string {
			var out []string
			for _, m := range s.Sent() {
				text, _ := m.Text()
				out = append(out, strings.TrimSpace(text))
			}
			return out
		},
	}
	r, _, _ := channelBot(t, bin, module, t.TempDir(), "", c)
	appendMail := func(raw []byte) {
		t.Helper()
		if _, err := s.Append(raw); err != nil {
			t.Fatal(err)
		}
	}

	hola := emailtest.Mail(user, "e2e-1@example.org", "Hello", "hola")
	appendMail(hola)
	waitReply(t, c, r, "echo: hola")
	if m, _ := byText("echo: hola"); m.To != user || m.Header("In-Reply-To") != "<e2e-1@example.org>" {
		t.Errorf("the reply went to %q in reply to %q; want %q, <e2e-1@example.org>", m.To, m.Header("In-Reply-To"), user)
	}
	// Delivered again (the same Message-ID, a new UID), the bot's own mail,
	// a message without a Message-ID, an auto-reply: none is answered. One
	// with an unknown transfer encoding (it once crashed the process at
	// every start) is read as it stands and answered. The bot lives, which
	// the answer to a later message shows (the mailbox is read in UID
	// order).
	appendMail(hola)
	appendMail(emailtest.Mail(emailtest.Username, "e2e-own@example.test", "Loop", "forged"))
	appendMail(emailtest.Mail(user, "", "Anonymous", "anonymous"))
	appendMail(emailtest.Mail(user, "e2e-crash@example.org", "Crash", "boom", "Content-Transfer-Encoding: 0"))
	appendMail(emailtest.Mail(user, "e2e-auto@example.org", "Out of office", "away", "Auto-Submitted: auto-replied"))
	appendMail(emailtest.Mail(user, "e2e-2@example.org", "Bye", "adios"))
	waitReply(t, c, r, "echo: adios")
	if n := count(c.replies(), "echo: hola"); n != 1 {
		t.Fatalf("\"echo: hola\" sent %d times: %q", n, c.replies())
	}

	reached := s.HoldMedia()
	appendMail([]byte("From: " + user + "\r\nTo: " + emailtest.Username + "\r\nSubject: photo\r\nMessage-ID: <e2e-img@example.org>\r\n" +
		"MIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary=XX\r\n\r\n" +
		"--XX\r\nContent-Type: image/jpeg\r\nContent-Disposition: attachment; filename=photo.jpg\r\nContent-Transfer-Encoding: base64\r\n\r\n" +
		base64.StdEncoding.EncodeToString(photo) + "\r\n--XX--\r\n"))
	killWhileHeld(t, reached, s.Release, r, bin)
	img := fmt.Sprintf("echo: [image, %d bytes]", len(photo))
	waitReply(t, c, r, img)
	if m, _ := byText(img); m.Header("In-Reply-To") != "<e2e-img@example.org>" {
		t.Errorf("the image's reply is in reply to %q", m.Header("In-Reply-To"))
	} else if _, atts := m.Text(); len(atts) != 1 || atts[0] != len(photo) {
		t.Errorf("the image's reply has attachments of %v bytes; want one of %d", atts, len(photo))
	}

	r.cmd.Process.Signal(syscall.SIGTERM)
	r.cmd.Wait()
	got := c.replies()
	for _, once := range []string{"echo: hola", "echo: boom", "echo: adios", img} {
		if n := count(got, once); n != 1 {
			t.Errorf("%q sent %d times: %q", once, n, got)
		}
	}
	if len(got) != 4 {
		t.Errorf("the SMTP server accepted %q; want the four replies only (not to the bot's own mail, one without a Message-ID, nor an auto-reply)", got)
	}
}
