// Package emailtest runs real mail servers in process for the email
// channel's tests: go-imap v2's imapmemserver (IMAPS) and a go-smtp
// submission server (SMTPS) that checks AUTH and records what it accepts.
package emailtest

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/emersion/go-imap/v2"
	"github.com/emersion/go-imap/v2/imapclient"
	"github.com/emersion/go-imap/v2/imapserver"
	"github.com/emersion/go-imap/v2/imapserver/imapmemserver"
	"github.com/emersion/go-message/mail"
	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"
)

// The account both servers accept.
const (
	Username = "bot@example.test"
	Password = "s3cret-password"
)

// Options shape the servers.
type Options struct {
	// NoIdle leaves IDLE out of the IMAP capabilities (the channel polls).
	NoIdle bool
}

// Sent is a message the SMTP server accepted.
type Sent struct {
	From, To string
	Raw      []byte
}

// Header returns the message's header field key, "" when it has none or
// does not parse.
func (m Sent) Header(key string) string {
	r, err := mail.CreateReader(bytes.NewReader(m.Raw))
	if err != nil {
		return ""
	}
	return r.Header.Get(key)
}

// Text returns the message's text/plain part, decoded, and the sizes of its
// attachments; "" and nil when it does not parse.
func (m Sent) Text() (text string, attachments []int) {
	r, err := mail.CreateReader(bytes.NewReader(m.Raw))
	if err != nil {
		return "", nil
	}
	for {
		p, err := r.NextPart()
		if err != nil {
			return text, attachments
		}
		b, err := io.ReadAll(p.Body)
		if err != nil {
			return "", nil
		}
		if _, ok := p.Header.(*mail.AttachmentHeader); ok {
			attachments = append(attachments, len(b))
		} else if text == "" {
			text = string(b)
		}
	}
}

// Server is the pair of servers.
type Server struct {
	IMAPAddr, SMTPAddr string

	user *imapmemserver.User
	imap *imapserver.Server
	smtp *smtp.Server

	// down makes both servers refuse new sessions (Down).
	down atomic.Bool

	mu      sync.Mutex
	sent    []Sent
	fail    func(stage string) *smtp.SMTPError
	held    bool
	reached chan struct{}
	release chan struct{}
}

// Start starts both servers on loopback; Close stops them.
func Start(opts Options) (*Server, error) {
	cert, err := selfSigned()
	if err != nil {
		return nil, err
	}
	tcfg := &tls.Config{Certificates: []tls.Certificate{cert}}
	s := &Server{release: make(chan struct{})}
	mem := imapmemserver.New()
	s.user = imapmemserver.NewUser(Username, Password)
	if err := s.user.Create("INBOX", nil); err != nil {
		return nil, err
	}
	mem.AddUser(s.user)
	caps := imap.CapSet{imap.CapIMAP4rev1: {}, imap.CapIMAP4rev2: {}}
	if opts.NoIdle {
		caps = imap.CapSet{imap.CapIMAP4rev1: {}}
	}
	s.imap = imapserver.New(&imapserver.Options{
		NewSession: func(*imapserver.Conn) (imapserver.Session, *imapserver.GreetingData, error) {
			if s.down.Load() {
				return nil, nil, &imap.Error{Type: imap.StatusResponseTypeBye, Text: "service unavailable"}
			}
			return &session{SessionIMAP4rev2: mem.NewSession().(imapserver.SessionIMAP4rev2), s: s}, nil, nil
		},
		Caps:   caps,
		Logger: log.New(io.Discard, "", 0),
	})
	il, err := tls.Listen("tcp", "127.0.0.1:0", tcfg)
	if err != nil {
		return nil, err
	}
	go s.imap.Serve(il)
	s.IMAPAddr = il.Addr().String()

	s.smtp = smtp.NewServer(backend{s})
	s.smtp.Domain = "localhost"
	s.smtp.ReadTimeout, s.smtp.WriteTimeout = time.Minute, time.Minute
	s.smtp.ErrorLog = log.New(io.Discard, "", 0)
	sl, err := tls.Listen("tcp", "127.0.0.1:0", tcfg)
	if err != nil {
		s.imap.Close()
		return nil, err
	}
	go s.smtp.Serve(sl)
	s.SMTPAddr = sl.Addr().String()
	return s, nil
}

// Close stops both servers (and releases a held FETCH).
func (s *Server) Close() {
	s.Release()
	s.imap.Close()
	s.smtp.Close()
}

// Append delivers a message to INBOX and returns its UID.
func (s *Server) Append(raw []byte) (uint32, error) {
	d, err := s.user.Append("INBOX", literal{bytes.NewReader(raw)}, &imap.AppendOptions{})
	if err != nil {
		return 0, err
	}
	return uint32(d.UID), nil
}

// AppendSeen delivers a message to INBOX already flagged \Seen (read
// before botrun looked) and returns its UID.
func (s *Server) AppendSeen(raw []byte) (uint32, error) {
	d, err := s.user.Append("INBOX", literal{bytes.NewReader(raw)}, &imap.AppendOptions{Flags: []imap.Flag{imap.FlagSeen}})
	if err != nil {
		return 0, err
	}
	return uint32(d.UID), nil
}

// Renumber deletes and recreates INBOX: a new UIDVALIDITY, and no messages.
func (s *Server) Renumber() error {
	if err := s.user.Delete("INBOX"); err != nil {
		return err
	}
	return s.user.Create("INBOX", nil)
}

// Seen returns the UIDs in INBOX flagged \Seen, asked through IMAP.
func (s *Server) Seen() ([]uint32, error) {
	c, err := imapclient.DialTLS(s.IMAPAddr, &imapclient.Options{TLSConfig: &tls.Config{InsecureSkipVerify: true}})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if err := c.Login(Username, Password).Wait(); err != nil {
		return nil, err
	}
	if _, err := c.Select("INBOX", &imap.SelectOptions{ReadOnly: true}).Wait(); err != nil {
		return nil, err
	}
	d, err := c.UIDSearch(&imap.SearchCriteria{Flag: []imap.Flag{imap.FlagSeen}}, nil).Wait()
	if err != nil {
		return nil, err
	}
	var out []uint32
	for _, u := range d.AllUIDs() {
		out = append(out, uint32(u))
	}
	return out, nil
}

// Fail makes the SMTP server answer with the error f returns for a stage
// ("MAIL", "RCPT", "DATA"), nil for none.
func (s *Server) Fail(f func(stage string) *smtp.SMTPError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fail = f
}

// Down makes both servers refuse new sessions (true), as a mail service
// that is down does, IMAP with a BYE greeting and SMTP with a 451 to EHLO,
// or accept them again (false). Sessions already open go on.
func (s *Server) Down(down bool) { s.down.Store(down) }

// Sent returns what the SMTP server accepted.
func (s *Server) Sent() []Sent {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Sent(nil), s.sent...)
}

// WaitSent waits until the SMTP server accepted n messages, or the deadline.
func (s *Server) WaitSent(n int, within time.Duration) []Sent {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if got := s.Sent(); len(got) >= n {
			return got
		}
		time.Sleep(10 * time.Millisecond)
	}
	return s.Sent()
}

func (s *Server) failure(stage string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail != nil {
		if e := s.fail(stage); e != nil {
			return e
		}
	}
	return nil
}

type literal struct{ *bytes.Reader }

func (l literal) Size() int64 { return l.Reader.Size() }

type backend struct{ s *Server }

func (b backend) NewSession(*smtp.Conn) (smtp.Session, error) {
	if b.s.down.Load() {
		return nil, errors.New("service unavailable")
	}
	return &submission{s: b.s}, nil
}

// submission is one SMTP submission: AUTH PLAIN first, then one message.
type submission struct {
	s        *Server
	authed   bool
	from, to string
}

func (ss *submission) AuthMechanisms() []string { return []string{sasl.Plain} }

func (ss *submission) Auth(mech string) (sasl.Server, error) {
	return sasl.NewPlainServer(func(identity, username, password string) error {
		if username != Username || password != Password {
			return &smtp.SMTPError{Code: 535, EnhancedCode: smtp.EnhancedCode{5, 7, 8}, Message: "authentication failed"}
		}
		ss.authed = true
		return nil
	}), nil
}

func (ss *submission) Mail(from string, _ *smtp.MailOptions) error {
	if !ss.authed {
		return smtp.ErrAuthRequired
	}
	if err := ss.s.failure("MAIL"); err != nil {
		return err
	}
	ss.from = from
	return nil
}

func (ss *submission) Rcpt(to string, _ *smtp.RcptOptions) error {
	if err := ss.s.failure("RCPT"); err != nil {
		return err
	}
	ss.to = to
	return nil
}

func (ss *submission) Data(r io.Reader) error {
	raw, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	if err := ss.s.failure("DATA"); err != nil {
		return err
	}
	if ss.to == "" {
		return errors.New("no recipient")
	}
	ss.s.mu.Lock()
	ss.s.sent = append(ss.s.sent, Sent{From: ss.from, To: ss.to, Raw: raw})
	ss.s.mu.Unlock()
	return nil
}

func (ss *submission) Reset()        { ss.from, ss.to = "", "" }
func (ss *submission) Logout() error { return nil }

// Mail is a plain-text message from the address from to Username, its
// Message-ID id (none when id is ""), with extra header lines.
func Mail(from, id, subject, body string, headers ...string) []byte {
	h := fmt.Sprintf("From: Alice <%s>\r\nTo: %s\r\nSubject: %s\r\nDate: Mon, 2 Jan 2006 15:04:05 +0000\r\n", from, Username, subject)
	if id != "" {
		h += "Message-ID: <" + id + ">\r\n"
	}
	for _, x := range headers {
		h += x + "\r\n"
	}
	return []byte(h + "Content-Type: text/plain; charset=utf-8\r\n\r\n" + body + "\r\n")
}

// HoldMedia makes the server hold, until Release, every FETCH of message
// bodies in a read-only (EXAMINE) session: how the channel loads an
// attachment, its inbound session selecting read-write. reached receives
// (without blocking) when a FETCH is held.
func (s *Server) HoldMedia() (reached <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.held = true
	s.reached = make(chan struct{}, 1)
	s.release = make(chan struct{})
	return s.reached
}

// Release lets the held FETCHes (and later ones) through.
func (s *Server) Release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held {
		s.held = false
		close(s.release)
	}
}

// session is an IMAP session of imapmemserver's that HoldMedia can hold.
type session struct {
	imapserver.SessionIMAP4rev2
	s        *Server
	readOnly bool
}

func (ss *session) Select(mailbox string, options *imap.SelectOptions) (*imap.SelectData, error) {
	ss.readOnly = options != nil && options.ReadOnly
	return ss.SessionIMAP4rev2.Select(mailbox, options)
}

// Idle first sends what is pending: imapserver's tracker delivers in IDLE
// only what arrives after it starts, so a message appended between the
// client's last command and its IDLE would not be announced until the next
// one (real servers announce it; the channel would sleep until its IDLE
// refresh).
func (ss *session) Idle(w *imapserver.UpdateWriter, stop <-chan struct{}) error {
	if err := ss.SessionIMAP4rev2.Poll(w, true); err != nil {
		return err
	}
	return ss.SessionIMAP4rev2.Idle(w, stop)
}

func (ss *session) Fetch(w *imapserver.FetchWriter, numSet imap.NumSet, options *imap.FetchOptions) error {
	ss.s.mu.Lock()
	held, reached, release := ss.s.held, ss.s.reached, ss.s.release
	ss.s.mu.Unlock()
	if held && ss.readOnly && len(options.BodySection) > 0 {
		select {
		case reached <- struct{}{}:
		default:
		}
		<-release
	}
	return ss.SessionIMAP4rev2.Fetch(w, numSet, options)
}

// selfSigned makes a certificate for 127.0.0.1 and localhost.
func selfSigned() (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "localhost"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}
