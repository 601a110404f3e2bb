package email_test

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/emersion/go-smtp"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/durability/sqlite"
	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/channel/channeltest"
	"github.com/botrun/botrun/host/channel/email"
	"github.com/botrun/botrun/host/channel/email/emailtest"
	"github.com/botrun/botrun/host/channel/httpkit"
	"github.com/botrun/botrun/host/channel/internal/fakekit"
)

const within = 30 * time.Second

// counting counts every Admit call, duplicates included.
type counting struct {
	*channeltest.Journal
	calls atomic.Int32
}

func (c *counting) Admit(ctx context.Context, prov string, m channel.Message) (channel.Admission, error) {
	c.calls.Add(1)
	return c.Journal.Admit(ctx, prov, m)
}

func servers(t *testing.T, opts emailtest.Options) *emailtest.Server {
	t.Helper()
	s, err := emailtest.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func newKv(t *testing.T) durability.Kv {
	t.Helper()
	s, err := sqlite.OpenStore(filepath.Join(t.TempDir(), "bot.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func config(s *emailtest.Server) email.Config {
	return email.Config{ID: "mail", IMAPURL: "imaps://" + s.IMAPAddr, SMTPURL: "smtps://" + s.SMTPAddr,
		Username: emailtest.Username, Password: emailtest.Password, From: "bot@example.test",
		Mailbox: "INBOX", Poll: "1s", TLSInsecure: true, Timeout: within}
}

// open opens a provider on kv with journal j.
func open(t *testing.T, cfg email.Config, kv durability.Kv, j channel.Admitter) *email.Provider {
	t.Helper()
	p, err := email.Open(cfg, channel.Env{ID: "mail", Admitter: j, Kv: kv, KeyPrefix: "/bot/default/",
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// run runs p until the returned stop is called (or the test ends).
func run(t *testing.T, p *email.Provider) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); p.Run(ctx) }()
	var once atomic.Bool
	stop = func() {
		if once.CompareAndSwap(false, true) {
			cancel()
			<-done
		}
	}
	t.Cleanup(stop)
	return stop
}

// running starts the servers and a provider on a fresh Kv, run until the
// test ends.
func running(t *testing.T) (*emailtest.Server, durability.Kv, *counting, *email.Provider) {
	s := servers(t, emailtest.Options{})
	kv := newKv(t)
	j := &counting{Journal: channeltest.NewJournal()}
	p := open(t, config(s), kv, j)
	run(t, p)
	return s, kv, j, p
}

func withAttachment(id string, data []byte) []byte {
	return []byte("From: alice@example.org\r\nTo: bot@example.test\r\nSubject: photo\r\nMessage-ID: <" + id + ">\r\n" +
		"MIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary=XX\r\n\r\n" +
		"--XX\r\nContent-Type: text/html; charset=utf-8\r\n\r\n<p>Here is the <b>photo</b></p><blockquote>old</blockquote>\r\n" +
		"--XX\r\nContent-Type: image/png\r\nContent-Disposition: attachment; filename=cat.png\r\nContent-Transfer-Encoding: base64\r\n\r\n" +
		b64(data) + "\r\n--XX--\r\n")
}

func TestIdleDeliveryThreadingAndReplies(t *testing.T) {
	s, _, j, p := running(t)
	uid, err := s.Append(emailtest.Mail("Alice@Example.org", "m1@example.org", "Hello", "Hi bot!\r\n\r\n-- \r\nAlice, CEO"))
	if err != nil {
		t.Fatal(err)
	}
	fakekit.WaitFor(t, "the message admitted", func() bool { return len(j.Admitted()) == 1 })
	m := j.Admitted()[0]
	if m.ID != "m1@example.org" || m.Chat != "alice@example.org" || m.From != "alice@example.org" || m.Text != "Hi bot!" {
		t.Fatalf("admitted %+v", m)
	}
	fakekit.WaitFor(t, "\\Seen", func() bool { seen, _ := s.Seen(); return len(seen) == 1 && seen[0] == uid })

	ref, err := p.Send(context.Background(), channel.Outbound{Chat: m.Chat, Text: "Hello Alice", Key: "k1"})
	if err != nil {
		t.Fatal(err)
	}
	sent := s.Sent()
	if len(sent) != 1 || sent[0].To != "alice@example.org" || sent[0].From != "bot@example.test" {
		t.Fatalf("sent %+v", sent)
	}
	raw := string(sent[0].Raw)
	for _, want := range []string{"Subject: Re: Hello", "In-Reply-To: <m1@example.org>", "References: <m1@example.org>", "Message-Id: <" + ref + ">", "Hello Alice"} {
		if !strings.Contains(raw, want) {
			t.Errorf("the reply lacks %q:\n%s", want, raw)
		}
	}
	if again, _ := p.Send(context.Background(), channel.Outbound{Chat: m.Chat, Text: "x", Key: "k1"}); again != ref {
		t.Errorf("the same key made Message-ID %q, then %q", ref, again)
	}

	// Alice answers the bot's reply: the same chat.
	s.Append(emailtest.Mail("alice@example.org", "m2@example.org", "Re: Hello", "Thanks\r\n\r\nOn Mon, Alice wrote:\r\n> Hello Alice",
		"In-Reply-To: <"+ref+">", "References: <m1@example.org> <"+ref+">"))
	fakekit.WaitFor(t, "the answer admitted", func() bool { return len(j.Admitted()) == 2 })
	if m := j.Admitted()[1]; m.Chat != "alice@example.org" || m.Text != "Thanks" {
		t.Fatalf("answer %+v", m)
	}
	// Bob writes in a thread rooted elsewhere: his own chat, the reply
	// threaded under his message.
	s.Append(emailtest.Mail("bob@example.org", "m3@example.org", "Re: plans", "ok", "References: <root@example.org>"))
	fakekit.WaitFor(t, "bob's admitted", func() bool { return len(j.Admitted()) == 3 })
	if m := j.Admitted()[2]; m.Chat != "bob@example.org" {
		t.Fatalf("bob's chat %q", m.Chat)
	}
	if _, err := p.Send(context.Background(), channel.Outbound{Chat: "bob@example.org", Text: "noted", Key: "k3"}); err != nil {
		t.Fatal(err)
	}
	if got := s.Sent(); got[len(got)-1].To != "bob@example.org" || !strings.Contains(string(got[len(got)-1].Raw), "References: <root@example.org> <m3@example.org>") {
		t.Fatalf("bob's reply %s", got[len(got)-1].Raw)
	}
}

func TestRestartMidMailboxLosesAndDoublesNothing(t *testing.T) {
	s := servers(t, emailtest.Options{})
	kv := newKv(t)
	j := &counting{Journal: channeltest.NewJournal()}
	for i := range 3 {
		s.Append(emailtest.Mail("alice@example.org", fmt.Sprintf("a%d@example.org", i), "s", "text"))
	}
	stop := run(t, open(t, config(s), kv, j))
	fakekit.WaitFor(t, "three admitted", func() bool { return len(j.Admitted()) == 3 })
	fakekit.WaitFor(t, "three seen", func() bool { seen, _ := s.Seen(); return len(seen) == 3 })
	stop()
	for i := 3; i < 5; i++ {
		s.Append(emailtest.Mail("alice@example.org", fmt.Sprintf("a%d@example.org", i), "s", "text"))
	}
	run(t, open(t, config(s), kv, j))
	fakekit.WaitFor(t, "five admitted", func() bool { return len(j.Admitted()) == 5 })
	if n := j.calls.Load(); n != 5 {
		t.Errorf("Admit was called %d times for 5 messages", n)
	}
	for i, m := range j.Admitted() {
		if m.ID != fmt.Sprintf("a%d@example.org", i) {
			t.Errorf("message %d is %s", i, m.ID)
		}
	}
}

// stopping stops the run from inside Admit: the call numbered at (from 1)
// cancels the context and fails, as a shutdown mid-mailbox does.
type stopping struct {
	*counting
	at     int32
	cancel context.CancelFunc
}

func (s *stopping) Admit(ctx context.Context, prov string, m channel.Message) (channel.Admission, error) {
	if s.counting.calls.Load()+1 == s.at {
		s.counting.calls.Add(1)
		s.cancel()
		return channel.Admission{}, ctx.Err()
	}
	return s.counting.Admit(ctx, prov, m)
}

// A restart in the middle of the mailbox (the third of five admissions
// interrupted) resumes where the first run stopped: five admitted in all,
// each once.
func TestRestartInsideTheMailbox(t *testing.T) {
	for _, tc := range []struct {
		name  string
		first bool // no cursor yet (a first start), else one saved
	}{{"first start", true}, {"resumed", false}} {
		t.Run(tc.name, func(t *testing.T) {
			s := servers(t, emailtest.Options{})
			kv := newKv(t)
			j := &counting{Journal: channeltest.NewJournal()}
			if !tc.first {
				// A cursor saved on an empty mailbox.
				stop := run(t, open(t, config(s), kv, j))
				fakekit.WaitFor(t, "the cursor saved", func() bool {
					b, _, err := kv.Get(context.Background(), "/bot/default/email/mail/cursor")
					return err == nil && b != nil
				})
				stop()
			}
			for i := range 5 {
				s.Append(emailtest.Mail("alice@example.org", fmt.Sprintf("r%d@example.org", i), "s", "text"))
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan struct{})
			go func() {
				defer close(done)
				open(t, config(s), kv, &stopping{counting: j, at: 3, cancel: cancel}).Run(ctx)
			}()
			select {
			case <-done:
			case <-time.After(within):
				t.Fatal("the run did not stop when Admit cancelled it")
			}
			if n := len(j.Admitted()); n != 2 {
				t.Fatalf("%d admitted before the stop, want 2", n)
			}
			if seen, _ := s.Seen(); len(seen) != 2 {
				t.Fatalf("seen before the restart: %v", seen)
			}
			run(t, open(t, config(s), kv, j))
			fakekit.WaitFor(t, "five admitted", func() bool { return len(j.Admitted()) == 5 })
			fakekit.WaitFor(t, "five seen", func() bool { seen, _ := s.Seen(); return len(seen) == 5 })
			// Two admitted, the interrupted third, then the three left.
			if n := j.calls.Load(); n != 6 {
				t.Errorf("Admit was called %d times; want 6 (one interrupted)", n)
			}
			for i, m := range j.Admitted() {
				if m.ID != fmt.Sprintf("r%d@example.org", i) {
					t.Errorf("message %d is %s", i, m.ID)
				}
			}
		})
	}
}

// A first start must not take the mail read before it, even when nothing is
// unread: the next wake-up starts after what was in the mailbox.
func TestFirstStartSkipsReadMail(t *testing.T) {
	s := servers(t, emailtest.Options{})
	j := &counting{Journal: channeltest.NewJournal()}
	for i := range 2 {
		if _, err := s.AppendSeen(emailtest.Mail("alice@example.org", fmt.Sprintf("old%d@example.org", i), "s", "old")); err != nil {
			t.Fatal(err)
		}
	}
	kv := newKv(t)
	run(t, open(t, config(s), kv, j))
	// The first drain saves the cursor; the new message arrives after it.
	fakekit.WaitFor(t, "the cursor saved", func() bool {
		b, _, err := kv.Get(context.Background(), "/bot/default/email/mail/cursor")
		return err == nil && b != nil
	})
	s.Append(emailtest.Mail("alice@example.org", "new@example.org", "s", "new"))
	fakekit.WaitFor(t, "the new one admitted", func() bool { return len(j.Admitted()) >= 1 })
	fakekit.WaitFor(t, "the new one seen", func() bool { seen, _ := s.Seen(); return len(seen) == 3 })
	if got := j.Admitted(); len(got) != 1 || got[0].ID != "new@example.org" || j.calls.Load() != 1 {
		t.Fatalf("admitted %+v in %d calls; want only new@example.org", got, j.calls.Load())
	}
}

func TestAMessageIsSeenOnlyOnceJournaled(t *testing.T) {
	s := servers(t, emailtest.Options{NoIdle: true})
	j := &counting{Journal: channeltest.NewJournal()}
	j.Fail(errors.New("the journal is down"))
	s.Append(emailtest.Mail("alice@example.org", "x@example.org", "s", "text"))
	run(t, open(t, config(s), newKv(t), j))
	fakekit.WaitFor(t, "an attempt", func() bool { return j.calls.Load() > 0 })
	if seen, _ := s.Seen(); len(seen) != 0 {
		t.Fatalf("\\Seen before journaled: %v", seen)
	}
	j.Fail(nil)
	fakekit.WaitFor(t, "admitted after the journal is back (polling)", func() bool { return len(j.Admitted()) == 1 })
	fakekit.WaitFor(t, "seen", func() bool { seen, _ := s.Seen(); return len(seen) == 1 })
}

// oneAdmitted runs a provider on a fresh Kv over a mailbox holding one
// message (v1@example.org) until it is admitted, and returns the stop of
// that run.
func oneAdmitted(t *testing.T) (*emailtest.Server, durability.Kv, *counting, func()) {
	s := servers(t, emailtest.Options{})
	kv := newKv(t)
	j := &counting{Journal: channeltest.NewJournal()}
	s.Append(emailtest.Mail("alice@example.org", "v1@example.org", "s", "one"))
	stop := run(t, open(t, config(s), kv, j))
	fakekit.WaitFor(t, "admitted", func() bool { return len(j.Admitted()) == 1 })
	return s, kv, j, stop
}

func TestUIDValidityChangeRescansDeduplicated(t *testing.T) {
	s, kv, j, stop := oneAdmitted(t)
	stop()
	if err := s.Renumber(); err != nil {
		t.Fatal(err)
	}
	s.Append(emailtest.Mail("alice@example.org", "v1@example.org", "s", "one")) // the same message, renumbered
	s.Append(emailtest.Mail("alice@example.org", "v2@example.org", "s", "two"))
	run(t, open(t, config(s), kv, j))
	fakekit.WaitFor(t, "the new one admitted", func() bool { return len(j.Admitted()) == 2 })
	if j.Admitted()[1].ID != "v2@example.org" {
		t.Fatalf("admitted %+v", j.Admitted())
	}
}

// A renumbered mailbox is rescanned for unread mail only: a message
// journaled long ago (\Seen, and past the inbox's dedupe retention, here a
// fresh journal) is not answered again.
func TestUIDValidityChangeRescansOnlyUnread(t *testing.T) {
	s, kv, _, stop := oneAdmitted(t)
	fakekit.WaitFor(t, "seen", func() bool { seen, _ := s.Seen(); return len(seen) == 1 })
	stop()
	if err := s.Renumber(); err != nil {
		t.Fatal(err)
	}
	s.AppendSeen(emailtest.Mail("alice@example.org", "v1@example.org", "s", "one")) // renumbered, still \Seen
	s.AppendSeen(emailtest.Mail("alice@example.org", "read@example.org", "s", "read elsewhere"))
	s.Append(emailtest.Mail("alice@example.org", "v2@example.org", "s", "two"))
	later := &counting{Journal: channeltest.NewJournal()} // remembers nothing
	run(t, open(t, config(s), kv, later))
	fakekit.WaitFor(t, "the new one admitted", func() bool { return len(later.Admitted()) >= 1 })
	fakekit.WaitFor(t, "all seen", func() bool { seen, _ := s.Seen(); return len(seen) == 3 })
	// One more after the rescan: the cursor moved past the read ones.
	s.Append(emailtest.Mail("alice@example.org", "v3@example.org", "s", "three"))
	fakekit.WaitFor(t, "the next one admitted", func() bool { return len(later.Admitted()) >= 2 })
	fakekit.WaitFor(t, "all seen", func() bool { seen, _ := s.Seen(); return len(seen) == 4 })
	if got := later.Admitted(); len(got) != 2 || got[0].ID != "v2@example.org" || got[1].ID != "v3@example.org" || later.calls.Load() != 2 {
		t.Fatalf("admitted %+v in %d calls; want v2 and v3 only", got, later.calls.Load())
	}
}

func TestAttachmentRoundTrip(t *testing.T) {
	s, _, j, _ := running(t)
	png := []byte("\x89PNG\r\n\x1a\nnot really a png")
	s.Append(withAttachment("att@example.org", png))
	fakekit.WaitFor(t, "admitted", func() bool { return len(j.Admitted()) == 1 })
	m := j.Admitted()[0]
	if m.Text != "Here is the photo" || len(m.Media) != 1 || m.Media[0].Type != "image" || m.Media[0].MIME != "image/png" {
		t.Fatalf("admitted %+v", m)
	}
	if strings.Contains(m.Media[0].Ref, emailtest.Password) {
		t.Fatal("the ref holds the password")
	}
	// A fresh provider (a restart) loads it from the journaled ref.
	p2 := open(t, config(s), newKv(t), j)
	got, err := p2.LoadMedia(context.Background(), m.Media[0], 1<<20)
	if err != nil || string(got) != string(png) {
		t.Fatalf("LoadMedia = %q, %v", got, err)
	}
	if _, err := p2.LoadMedia(context.Background(), m.Media[0], 4); !errors.Is(err, channel.ErrMediaTooLarge) {
		t.Errorf("over max: %v", err)
	}
	// A reply carries it back as an attachment.
	if _, err := p2.Send(context.Background(), channel.Outbound{Chat: m.Chat, Text: "Your photo", Media: &m.Media[0], Key: "att"}); err != nil {
		t.Fatal(err)
	}
	sent := s.Sent()
	// The caption (the filename it arrived under) heads the text.
	if text, atts := sent[len(sent)-1].Text(); strings.ReplaceAll(strings.TrimSpace(text), "\r\n", "\n") != "cat.png\n\nYour photo" || len(atts) != 1 || atts[0] != len(png) {
		t.Errorf("the reply has %q and attachments of %v bytes; want the text and %d bytes", text, atts, len(png))
	}
	// Media alone: the caption is the text.
	captioned := m.Media[0]
	captioned.Caption = "A cat"
	if _, err := p2.Send(context.Background(), channel.Outbound{Chat: m.Chat, Media: &captioned, Key: "att-caption"}); err != nil {
		t.Fatalf("a media-only send with a caption: %v", err)
	}
	sent = s.Sent()
	if text, atts := sent[len(sent)-1].Text(); strings.TrimSpace(text) != "A cat" || len(atts) != 1 || atts[0] != len(png) {
		t.Errorf("the media-only reply has %q and attachments of %v bytes; want the caption and %d bytes", text, atts, len(png))
	}
	captioned.Caption = ""
	if _, err := p2.Send(context.Background(), channel.Outbound{Chat: m.Chat, Media: &captioned, Key: "att-bare"}); err != nil {
		t.Fatalf("a media-only send without a caption: %v", err)
	}
	if sent = s.Sent(); len(sent) != 3 {
		t.Errorf("%d sent, want 3", len(sent))
	} else if _, atts := sent[2].Text(); len(atts) != 1 {
		t.Errorf("the bare media reply has attachments %v", atts)
	}
	tampered := m.Media[0]
	i := strings.Index(tampered.Ref, `"sha256":"`) + len(`"sha256":"`)
	flip := byte('0')
	if tampered.Ref[i] == '0' {
		flip = '1'
	}
	tampered.Ref = tampered.Ref[:i] + string(flip) + tampered.Ref[i+1:]
	if _, err := p2.LoadMedia(context.Background(), tampered, 1<<20); !httpkit.MediaGone(err) || !strings.Contains(fmt.Sprint(err), "digest") {
		t.Errorf("tampered digest: %v", err)
	}
	if _, err := p2.Send(context.Background(), channel.Outbound{Chat: m.Chat, Text: "x", Media: &tampered}); !errors.Is(err, channel.ErrUnsupportedContent) {
		t.Errorf("a reply with a tampered attachment: %v", err)
	}
	if _, err := p2.LoadMedia(context.Background(), channel.Media{Ref: `{"v":9}`}, 1<<20); !httpkit.MediaGone(err) {
		t.Errorf("foreign ref: %v", err)
	}
	// Gone after a renumbering without it.
	s.Renumber()
	if _, err := p2.LoadMedia(context.Background(), m.Media[0], 1<<20); !httpkit.MediaGone(err) {
		t.Errorf("gone: %v", err)
	}
}

func TestSendErrorsMapOntoTheTaxonomy(t *testing.T) {
	s := servers(t, emailtest.Options{})
	p := open(t, config(s), newKv(t), channeltest.NewJournal())
	out := channel.Outbound{Chat: "carol@example.org", Text: "hi", Key: "k"}
	cases := []struct {
		stage string
		e     *smtp.SMTPError
		check func(error) bool
	}{
		{"MAIL", &smtp.SMTPError{Code: 451, EnhancedCode: smtp.EnhancedCode{4, 3, 0}, Message: "try later"}, func(err error) bool { return !httpkit.Permanent(err) }},
		{"RCPT", &smtp.SMTPError{Code: 450, EnhancedCode: smtp.EnhancedCode{4, 2, 1}, Message: "busy"}, func(err error) bool { return !httpkit.Permanent(err) }},
		{"RCPT", &smtp.SMTPError{Code: 550, EnhancedCode: smtp.EnhancedCode{5, 1, 1}, Message: "no such user"}, func(err error) bool { return errors.Is(err, channel.ErrRecipientUnreachable) }},
		{"DATA", &smtp.SMTPError{Code: 552, EnhancedCode: smtp.EnhancedCode{5, 3, 4}, Message: "too big"}, func(err error) bool { return errors.Is(err, channel.ErrPayloadTooLarge) }},
		{"DATA", &smtp.SMTPError{Code: 554, EnhancedCode: smtp.EnhancedCode{5, 7, 1}, Message: "policy"}, httpkit.Permanent},
	}
	for _, tc := range cases {
		s.Fail(func(stage string) *smtp.SMTPError {
			if stage == tc.stage {
				return tc.e
			}
			return nil
		})
		_, err := p.Send(context.Background(), out)
		if err == nil || !tc.check(err) {
			t.Errorf("%s %d: %v", tc.stage, tc.e.Code, err)
		}
		if err != nil && strings.Contains(err.Error(), emailtest.Password) {
			t.Errorf("the error shows the password: %v", err)
		}
	}
	s.Fail(nil)
	for _, bad := range []channel.Outbound{
		{Chat: "carol@example.org", Text: "pick", Buttons: []abi.Button{{ID: "a", Title: "A"}}},
		{Chat: "carol@example.org", Text: ""},
		{Chat: "unknown-root@example.org>", Text: "x"},
	} {
		if _, err := p.Send(context.Background(), bad); !httpkit.Permanent(err) {
			t.Errorf("%+v: %v", bad, err)
		}
	}
	if n := len(s.Sent()); n != 0 {
		t.Errorf("%d sent", n)
	}
	// A wrong password is permanent and does not show.
	cfg := config(s)
	cfg.Password = "wrong-password"
	_, err := open(t, cfg, newKv(t), channeltest.NewJournal()).Send(context.Background(), out)
	if !httpkit.Permanent(err) || strings.Contains(err.Error(), "wrong-password") {
		t.Errorf("bad AUTH: %v", err)
	}
}

func TestCheck(t *testing.T) {
	ok := email.Config{IMAPURL: "imaps://imap.example.com:993", SMTPURL: "smtp://smtp.example.com:587",
		Username: "u", Password: "p", From: "bot@example.com"}
	cases := []struct {
		tweak func(*email.Config)
		key   string
	}{
		{func(*email.Config) {}, ""},
		{func(c *email.Config) { c.TLSInsecure = true }, "tls_insecure"},
		{func(c *email.Config) {
			c.IMAPURL, c.SMTPURL, c.TLSInsecure = "imaps://127.0.0.1:993", "smtps://localhost:465", true
		}, ""},
		{func(c *email.Config) { c.IMAPURL = "https://imap.example.com" }, "imap_url"},
		{func(c *email.Config) { c.SMTPURL = "smtps://user:pw@smtp.example.com:465" }, "smtp_url"},
		{func(c *email.Config) { c.From = "Bot <bot@example.com>" }, "from"},
		{func(c *email.Config) { c.Poll = "soon" }, "poll"},
		{func(c *email.Config) { c.Password = "" }, "password"},
	}
	for i, tc := range cases {
		c := ok
		tc.tweak(&c)
		var keys []string
		c.Check(channel.Setting{ID: "mail"}, func(key, format string, args ...any) {
			keys = append(keys, key)
			if strings.Contains(fmt.Sprintf(format, args...), "pw@") {
				t.Errorf("a problem shows credentials")
			}
		})
		if (tc.key == "" && len(keys) > 0) || (tc.key != "" && (len(keys) == 0 || keys[0] != tc.key || keys[len(keys)-1] != tc.key)) {
			t.Errorf("case %d: problems %v, want %q", i, keys, tc.key)
		}
	}
	if typ, ok := channel.Lookup("email"); !ok {
		t.Fatal("email is not registered")
	} else if c := typ.Config().(*email.Config); c.Mailbox != "INBOX" {
		t.Errorf("default mailbox %q", c.Mailbox)
	}
}

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

// A message with an unknown transfer encoding once crashed the IMAP loop,
// and every restart on it again (it was never marked \Seen): it is read
// raw and answered; a message that does not parse (no Message-ID) is
// skipped and \Seen, and the message after it is admitted and answered.
func TestAnUnparsableMessageIsSkippedAndTheBotLives(t *testing.T) {
	s, _, j, p := running(t)
	odd, err := s.Append(emailtest.Mail("mallory@evil.example", "bad@evil.example", "boom", "x", "Content-Transfer-Encoding: 0"))
	if err != nil {
		t.Fatal(err)
	}
	bad, _ := s.Append(emailtest.Mail("mallory@evil.example", "", "no id", "y"))
	good, _ := s.Append(emailtest.Mail("alice@example.org", "good@example.org", "Hello", "Hi bot"))
	fakekit.WaitFor(t, "the good message admitted", func() bool { return len(j.Admitted()) == 2 })
	if m := j.Admitted(); m[0].ID != "bad@evil.example" || m[0].Text != "x" || m[1].ID != "good@example.org" {
		t.Fatalf("admitted %+v", m)
	}
	fakekit.WaitFor(t, "all seen", func() bool {
		seen, _ := s.Seen()
		return len(seen) == 3 && seen[0] == odd && seen[1] == bad && seen[2] == good
	})
	if _, err := p.Send(context.Background(), channel.Outbound{Chat: j.Admitted()[1].Chat, Text: "Hello Alice", Key: "k"}); err != nil {
		t.Fatal(err)
	}
	if sent := s.Sent(); len(sent) != 1 || sent[0].To != "alice@example.org" {
		t.Fatalf("sent %+v", sent)
	}
}

// skipping runs a provider on s that counts the inputs it skips for
// reason.
func skipping(t *testing.T, s *emailtest.Server, reason string) (*counting, *email.Provider, *atomic.Int32) {
	j := &counting{Journal: channeltest.NewJournal()}
	skipped := &atomic.Int32{}
	p, err := email.Open(config(s), channel.Env{ID: "mail", Admitter: j, Kv: newKv(t), KeyPrefix: "/bot/default/",
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Skipped: func(r string) {
			if r == reason {
				skipped.Add(1)
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	run(t, p)
	return j, p, skipped
}

// putThread writes a thread record for chat as an earlier version did
// (no "v"), straight into the Kv.
func putThread(t *testing.T, kv durability.Kv, chat, record string) {
	t.Helper()
	sum := sha256.Sum256([]byte(chat))
	key := "/bot/default/email/mail/chat/" + hex.EncodeToString(sum[:16])
	if err := kv.Commit(context.Background(), []durability.Write{{Key: key, Version: durability.AnyVersion, Value: []byte(record)}}); err != nil {
		t.Fatal(err)
	}
}

// Mallory cannot join Alice's conversation: not by naming her address as
// the thread's root, nor by answering a Message-ID of her thread that he
// learned; his mail goes to his own chat, and the bot's later sends to
// Alice's chat still go to Alice.
func TestAStrangerCannotJoinAnotherUsersThread(t *testing.T) {
	s, _, j, p := running(t)
	s.Append(emailtest.Mail("alice@example.org", "a1@example.org", "My account", "What is my balance?"))
	fakekit.WaitFor(t, "alice's admitted", func() bool { return len(j.Admitted()) == 1 })
	ref, err := p.Send(context.Background(), channel.Outbound{Chat: "alice@example.org", Text: "Your balance is 1,234", Key: "k1"})
	if err != nil {
		t.Fatal(err)
	}
	s.Append(emailtest.Mail("mallory@evil.example", "m1@evil.example", "Re: My account", "and my balance?", "References: <alice@example.org>"))
	s.Append(emailtest.Mail("mallory@evil.example", "m2@evil.example", "Re: My account", "again?",
		"In-Reply-To: <"+ref+">", "References: <a1@example.org> <"+ref+">"))
	fakekit.WaitFor(t, "mallory's admitted", func() bool { return len(j.Admitted()) == 3 })
	for _, m := range j.Admitted()[1:] {
		if m.Chat != "mallory@evil.example" {
			t.Errorf("mallory's %s went to chat %q", m.ID, m.Chat)
		}
	}
	if _, err := p.Send(context.Background(), channel.Outbound{Chat: "alice@example.org", Text: "A reminder", Key: "k2"}); err != nil {
		t.Fatal(err)
	}
	sent := s.Sent()
	if last := sent[len(sent)-1]; last.To != "alice@example.org" || strings.Contains(string(last.Raw), "evil.example") {
		t.Fatalf("the send to alice's chat went to %s:\n%s", last.To, last.Raw)
	}
	// Alice answering the bot still lands in her chat.
	s.Append(emailtest.Mail("alice@example.org", "a2@example.org", "Re: My account", "thanks", "In-Reply-To: <"+ref+">"))
	fakekit.WaitFor(t, "alice's answer admitted", func() bool { return len(j.Admitted()) == 4 })
	if m := j.Admitted()[3]; m.Chat != "alice@example.org" {
		t.Fatalf("alice's answer went to chat %q", m.Chat)
	}
}

// A Reply-To is not an identity: Mallory's mail (From his own address,
// which DMARC aligns) naming Alice in Reply-To goes to Mallory's chat, is
// answered at his From, and leaves Alice's thread (subject, references)
// as it was. A message with two From addresses, or a Sender other than
// its From, is refused: skipped, counted, \Seen.
func TestAReplyToDoesNotJoinAnotherUsersChat(t *testing.T) {
	s := servers(t, emailtest.Options{})
	j, p, skipped := skipping(t, s, "sender")
	s.Append(emailtest.Mail("alice@example.org", "a1@example.org", "My account", "What is my balance?"))
	fakekit.WaitFor(t, "alice's admitted", func() bool { return len(j.Admitted()) == 1 })
	s.Append(emailtest.Mail("mallory@evil.example", "m1@evil.example", "Give me alice's", "and my balance?", "Reply-To: alice@example.org"))
	fakekit.WaitFor(t, "mallory's admitted", func() bool { return len(j.Admitted()) == 2 })
	if m := j.Admitted()[1]; m.Chat != "mallory@evil.example" || m.From != "mallory@evil.example" {
		t.Fatalf("mallory's message with Reply-To alice went to chat %q from %q", m.Chat, m.From)
	}
	if _, err := p.Send(context.Background(), channel.Outbound{Chat: "alice@example.org", Text: "Your balance is 1,234", Key: "k1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Send(context.Background(), channel.Outbound{Chat: "mallory@evil.example", Text: "hello", Key: "k2"}); err != nil {
		t.Fatal(err)
	}
	sent := s.Sent()
	if sent[0].To != "alice@example.org" || sent[0].Header("Subject") != "Re: My account" || strings.Contains(string(sent[0].Raw), "evil.example") {
		t.Fatalf("the send to alice's chat went to %s:\n%s", sent[0].To, sent[0].Raw)
	}
	if sent[1].To != "mallory@evil.example" {
		t.Fatalf("the answer to mallory went to %s, not his From", sent[1].To)
	}
	s.Append(emailtest.Mail("mallory@evil.example", "m2@evil.example", "two", "x", "From: alice@example.org"))
	s.Append(emailtest.Mail("mallory@evil.example", "m3@evil.example", "three", "x", "Sender: alice@example.org"))
	s.Append([]byte("From: alice@example.org, mallory@evil.example\r\nMessage-ID: <m4@evil.example>\r\nSubject: four\r\n\r\nx\r\n"))
	s.Append(emailtest.Mail("alice@example.org", "a2@example.org", "Re: My account", "thanks", "Sender: Alice <ALICE@example.org>"))
	fakekit.WaitFor(t, "all seen", func() bool { seen, _ := s.Seen(); return len(seen) == 6 })
	if got := j.Admitted(); len(got) != 3 || got[2].ID != "a2@example.org" || got[2].Chat != "alice@example.org" || skipped.Load() != 3 {
		t.Fatalf("admitted %+v, %d skipped; want alice's second only, 3 skipped", got, skipped.Load())
	}
}

// Chats an earlier botrun named after a thread's root are retired: a send
// to one is refused, naming the chat its correspondent's mail goes to now
// (their address), whether the root parses as an address or not, and a
// reply to the bot's earlier mail in it goes to the sender's own chat. A
// chat an earlier version re-pointed at another address is not sent to
// until the address writes again.
func TestLegacyThreadChatsAreRetired(t *testing.T) {
	s, kv, j, p := running(t)
	putThread(t, kv, "root-1", `{"to":"bob@example.org","subject":"Re: plans","references":["root-1"]}`)
	putThread(t, kv, "CAxyz@mail.gmail.com", `{"to":"bob@example.org","subject":"Re: plans","references":["CAxyz@mail.gmail.com"]}`)
	putThread(t, kv, "root-2", `{"to":"mallory@evil.example","subject":"Re: plans","references":["root-2"]}`)
	for _, chat := range []string{"root-1", "CAxyz@mail.gmail.com", "root-2"} {
		_, err := p.Send(context.Background(), channel.Outbound{Chat: chat, Text: "noted", Key: "r-" + chat})
		if !errors.Is(err, channel.ErrRecipientUnreachable) || chat != "root-2" && !strings.Contains(err.Error(), `"bob@example.org"`) {
			t.Errorf("a send to the legacy chat %q: %v", chat, err)
		}
	}
	if sent := s.Sent(); len(sent) != 0 {
		t.Fatalf("sent to a legacy chat, to %s", sent[0].To)
	}
	s.Append(emailtest.Mail("bob@example.org", "b1@example.org", "Re: plans", "ok", "In-Reply-To: <root-1>", "References: <CAxyz@mail.gmail.com>"))
	fakekit.WaitFor(t, "bob's admitted", func() bool { return len(j.Admitted()) == 1 })
	if m := j.Admitted()[0]; m.Chat != "bob@example.org" {
		t.Fatalf("bob's went to %q", m.Chat)
	}
	// Alice's chat, re-pointed at mallory by an earlier version.
	putThread(t, kv, "alice@example.org", `{"to":"mallory@evil.example","subject":"Re: x"}`)
	if _, err := p.Send(context.Background(), channel.Outbound{Chat: "alice@example.org", Text: "secret", Key: "r2"}); !errors.Is(err, channel.ErrRecipientUnreachable) {
		t.Fatalf("a send to a re-pointed chat: %v", err)
	}
	// An address chat an earlier version recorded for its own address is
	// sent to.
	putThread(t, kv, "carol@example.org", `{"to":"carol@example.org","subject":"Re: y"}`)
	if _, err := p.Send(context.Background(), channel.Outbound{Chat: "carol@example.org", Text: "hi carol", Key: "r4"}); err != nil {
		t.Fatal(err)
	}
	s.Append(emailtest.Mail("alice@example.org", "a1@example.org", "Hi", "hello"))
	fakekit.WaitFor(t, "alice's admitted", func() bool { return len(j.Admitted()) == 2 })
	if _, err := p.Send(context.Background(), channel.Outbound{Chat: "alice@example.org", Text: "hello", Key: "r3"}); err != nil {
		t.Fatal(err)
	}
	for _, m := range s.Sent() {
		if m.To == "mallory@evil.example" || m.To == "bob@example.org" {
			t.Fatalf("sent to %s: %s", m.To, m.Raw)
		}
	}
}

// The Message-IDs botrun mints come from the channel's random key, kept
// in the Kv: the same send's key gives the same id after a restart, and
// another bot's (another key) a different one.
func TestMessageIDsAreUnguessable(t *testing.T) {
	s := servers(t, emailtest.Options{})
	kv := newKv(t)
	send := func(kv durability.Kv) string {
		id, err := open(t, config(s), kv, channeltest.NewJournal()).Send(context.Background(), channel.Outbound{Chat: "carol@example.org", Text: "hi", Key: "k"})
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	first, again, other := send(kv), send(kv), send(newKv(t))
	sum := sha256.Sum256([]byte("mail\x00k"))
	if first != again || first == other || strings.Contains(first, hex.EncodeToString(sum[:16])) {
		t.Fatalf("ids %s, after a restart %s, another bot's %s", first, again, other)
	}
}

// RFC 3834: an auto-reply, bulk or list mail, or a bounce is not answered
// (not admitted, counted); the bot's own mail says it is automatic, so that
// two responders do not loop.
func TestAutomaticMailIsNotAnswered(t *testing.T) {
	s := servers(t, emailtest.Options{})
	j, p, skipped := skipping(t, s, "automatic")
	for i, h := range []string{"Auto-Submitted: auto-replied", "auto-submitted: Auto-Generated; owner-email=x@y", "Precedence: bulk",
		"Precedence: list", "List-Id: <news.example.org>", "Return-Path: <>"} {
		s.Append(emailtest.Mail("responder@example.org", fmt.Sprintf("auto%d@example.org", i), "Out of office", "I am away", h))
	}
	s.Append(emailtest.Mail("carol@example.org", "human@example.org", "Hi", "a person", "Auto-Submitted: no", "Return-Path: <carol@example.org>"))
	fakekit.WaitFor(t, "the person's admitted", func() bool { return len(j.Admitted()) >= 1 })
	fakekit.WaitFor(t, "all seen", func() bool { seen, _ := s.Seen(); return len(seen) == 7 })
	if got := j.Admitted(); len(got) != 1 || got[0].ID != "human@example.org" || skipped.Load() != 6 {
		t.Fatalf("admitted %+v, %d skipped; want the person's only, 6 skipped", got, skipped.Load())
	}
	if _, err := p.Send(context.Background(), channel.Outbound{Chat: "carol@example.org", Text: "hello", Key: "k1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Send(context.Background(), channel.Outbound{Chat: "dave@example.org", Text: "news", Key: "k2"}); err != nil {
		t.Fatal(err)
	}
	sent := s.Sent()
	if got := sent[0].Header("Auto-Submitted"); got != "auto-replied" {
		t.Errorf("a reply has Auto-Submitted %q", got)
	}
	if got := sent[1].Header("Auto-Submitted"); got != "auto-generated" {
		t.Errorf("a first message has Auto-Submitted %q", got)
	}
}

// A message whose taking panics is skipped, \Seen, counted, and its log
// line names its UID (never its text), so an operator can find it.
func TestAPanicOnAMessageIsSkippedAndNamesItsUID(t *testing.T) {
	s := servers(t, emailtest.Options{})
	j := &counting{Journal: channeltest.NewJournal()}
	boom := channeltest.Panicking{Admitter: j, Boom: func(m channel.Message) bool { return m.ID == "boom@evil.example" }}
	var panics atomic.Int32
	logged := &fakekit.Log{}
	p, err := email.Open(config(s), channel.Env{ID: "mail", Admitter: boom, Kv: newKv(t), KeyPrefix: "/bot/default/",
		Logger: slog.New(slog.NewTextHandler(logged, nil)), Panicked: func() { panics.Add(1) }})
	if err != nil {
		t.Fatal(err)
	}
	run(t, p)
	bad, _ := s.Append(emailtest.Mail("mallory@evil.example", "boom@evil.example", "boom", "the secret text"))
	s.Append(emailtest.Mail("alice@example.org", "a1@example.org", "Hi", "hello"))
	fakekit.WaitFor(t, "alice's admitted", func() bool { return len(j.Admitted()) == 1 })
	fakekit.WaitFor(t, "both seen", func() bool { seen, _ := s.Seen(); return len(seen) == 2 })
	if panics.Load() != 1 || !strings.Contains(logged.String(), fmt.Sprintf("taking UID %d (UIDVALIDITY", bad)) || strings.Contains(logged.String(), "secret text") {
		t.Fatalf("%d panics; the log does not name UID %d (or shows the text):\n%s", panics.Load(), bad, logged.String())
	}
}
