package email

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/emersion/go-imap/v2"
	"github.com/emersion/go-imap/v2/imapclient"

	"github.com/botrun/botrun/host/channel"
)

// dialIMAP connects and logs in; onExists (may be nil) is called, without
// blocking, when the selected mailbox grows. The client closes when ctx
// ends; release closes it and lets go of ctx, and must be called once the
// client is done with.
func (p *Provider) dialIMAP(ctx context.Context, onExists func()) (c *imapclient.Client, release func(), err error) {
	opts := &imapclient.Options{TLSConfig: p.imap.tls, Dialer: &net.Dialer{Timeout: p.cfg.Timeout}}
	if onExists != nil {
		opts.UnilateralDataHandler = &imapclient.UnilateralDataHandler{Mailbox: func(d *imapclient.UnilateralDataMailbox) {
			if d.NumMessages != nil {
				onExists()
			}
		}}
	}
	if p.imap.implicit {
		c, err = imapclient.DialTLS(p.imap.addr, opts)
	} else {
		c, err = imapclient.DialStartTLS(p.imap.addr, opts)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("email: connecting to the IMAP server %s: %w", p.imap.addr, err)
	}
	stop := context.AfterFunc(ctx, func() { c.Close() })
	release = func() {
		stop()
		c.Close()
	}
	if err := c.Login(p.cfg.Username, p.cfg.Password).Wait(); err != nil {
		release()
		return nil, nil, fmt.Errorf("email: logging in to the IMAP server %s as %q: %w", p.imap.addr, p.cfg.Username, err)
	}
	return c, release, nil
}

// Run implements channel.Runner: one IMAP session after another, with a
// backoff between failed ones, until ctx ends.
func (p *Provider) Run(ctx context.Context) {
	wait := time.Second
	for ctx.Err() == nil {
		started := time.Now()
		err := p.session(ctx)
		if ctx.Err() != nil {
			return
		}
		if time.Since(started) > time.Minute {
			wait = time.Second
		}
		p.env.Log().Warn("email: the IMAP session ended; reconnecting", "provider", p.ID(), "err", err, "after", wait)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Minute)
	}
}

// session logs in, selects the mailbox and journals what arrives, waiting
// in IDLE (or polling) in between.
func (p *Provider) session(ctx context.Context) error {
	c, release, err := p.dialIMAP(ctx, p.signal)
	if err != nil {
		return err
	}
	defer release()
	sel, err := c.Select(p.cfg.Mailbox, nil).Wait()
	if err != nil {
		return fmt.Errorf("email: selecting %q: %w", p.cfg.Mailbox, err)
	}
	idle := c.Caps().Has(imap.CapIdle)
	p.env.Log().Info("email: the mailbox is open", "provider", p.ID(), "mailbox", p.cfg.Mailbox, "idle", idle)
	for {
		if err := p.drain(ctx, c, sel); err != nil {
			return err
		}
		if !idle {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(p.poll):
			}
			continue
		}
		cmd, err := c.Idle()
		if err != nil {
			return fmt.Errorf("email: IDLE: %w", err)
		}
		select {
		case <-ctx.Done():
		case <-p.updates:
		case <-time.After(min(p.cfg.IdleRefresh, p.poll)):
			// Renewed at least every poll: a server that did not announce
			// a message appended just before IDLE began (between the
			// search and IDLE) delays it by one poll at most.
		case <-c.Closed():
		}
		if err := cmd.Close(); err != nil {
			return fmt.Errorf("email: ending IDLE: %w", err)
		}
		if err := cmd.Wait(); err != nil {
			return fmt.Errorf("email: IDLE: %w", err)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

// signal notes that the mailbox grew.
func (p *Provider) signal() {
	select {
	case p.updates <- struct{}{}:
	default:
	}
}

// drain journals every message after the cursor, in UID order. Without a
// cursor (a first start), or with one of another UIDVALIDITY (a renumbered
// mailbox), it takes the unread messages and then sets the cursor to at
// least the last UID the SELECT reported, so that mail read before is never
// taken.
func (p *Provider) drain(ctx context.Context, c *imapclient.Client, sel *imap.SelectData) error {
	uidValidity := sel.UIDValidity
	cur, known, err := p.store.cursor(ctx)
	if err != nil {
		return fmt.Errorf("email: reading the cursor: %w", err)
	}
	criteria := &imap.SearchCriteria{}
	fresh := false // the cursor is set only once every unread message is journaled
	switch {
	case !known:
		// The first start: what nobody has read yet.
		criteria.NotFlag = []imap.Flag{imap.FlagSeen}
		cur, fresh = cursor{UIDValidity: uidValidity}, true
	case cur.UIDValidity != uidValidity:
		// The server renumbered the mailbox: rescan it for what is unread
		// (botrun sets \Seen on what it journals), as a first start does;
		// the inbox deduplicates on Message-ID what was journaled but not
		// yet marked. Mail journaled long ago, past the inbox's dedupe
		// retention, is thus not answered again.
		p.env.Log().Warn("email: the mailbox's UIDVALIDITY changed: rescanning its unread messages", "provider", p.ID(),
			"was", cur.UIDValidity, "now", uidValidity)
		criteria.NotFlag = []imap.Flag{imap.FlagSeen}
		cur, fresh = cursor{UIDValidity: uidValidity}, true
	default:
		var set imap.UIDSet
		set.AddRange(imap.UID(cur.UID+1), 0)
		criteria.UID = []imap.UIDSet{set}
	}
	var floor uint32 // the last UID at the SELECT, for a fresh cursor
	if fresh {
		if floor, err = lastUID(c, sel); err != nil {
			return err
		}
	}
	data, err := c.UIDSearch(criteria, nil).Wait()
	if err != nil {
		return fmt.Errorf("email: UID SEARCH: %w", err)
	}
	uids := data.AllUIDs()
	slices.Sort(uids)
	for _, uid := range uids {
		if uint32(uid) <= cur.UID {
			continue // "n:*" names the last message even below n
		}
		err := p.env.Guard(fmt.Sprintf("taking UID %d (UIDVALIDITY %d) from the mailbox", uint32(uid), uidValidity), func() error { return p.journal(ctx, c, uidValidity, uid) })
		switch {
		case errors.Is(err, channel.ErrPanicked):
			// Final: the same bytes would panic again at every restart.
			// Skipped as a message that does not parse is: \Seen, and the
			// cursor moves past it.
		case err != nil:
			return err
		}
		cur.UID = uint32(uid)
		// A fresh cursor is saved only at the end: saved here, it would
		// make the next search "UID n:*" take the read mail above n. Until
		// then a restart searches the unread ones again, and \Seen keeps
		// the journaled ones out.
		if !fresh {
			if err := p.store.setCursor(ctx, cur); err != nil {
				return fmt.Errorf("email: saving the cursor: %w", err)
			}
		}
		// \Seen only now that the message is journaled.
		if err := c.Store(imap.UIDSetNum(uid), &imap.StoreFlags{Op: imap.StoreFlagsAdd, Silent: true,
			Flags: []imap.Flag{imap.FlagSeen}}, nil).Close(); err != nil {
			return fmt.Errorf("email: marking UID %d \\Seen: %w", uid, err)
		}
	}
	if fresh {
		cur.UID = max(cur.UID, floor)
		if err := p.store.setCursor(ctx, cur); err != nil {
			return fmt.Errorf("email: saving the cursor: %w", err)
		}
	}
	return nil
}

// lastUID returns the highest UID the mailbox had at the SELECT: UIDNEXT-1,
// or, from a server that did not report UIDNEXT, the highest UID a search
// finds (0 in an empty mailbox).
func lastUID(c *imapclient.Client, sel *imap.SelectData) (uint32, error) {
	if sel.UIDNext > 0 {
		return uint32(sel.UIDNext) - 1, nil
	}
	data, err := c.UIDSearch(&imap.SearchCriteria{}, nil).Wait()
	if err != nil {
		return 0, fmt.Errorf("email: UID SEARCH for the last UID: %w", err)
	}
	var last uint32
	for _, u := range data.AllUIDs() {
		last = max(last, uint32(u))
	}
	return last, nil
}

// fetchRaw returns the source of the message with uid, at most
// MaxMessageBytes; nil when it is gone.
func fetchRaw(c *imapclient.Client, uid imap.UID) ([]byte, error) {
	msgs, err := c.Fetch(imap.UIDSetNum(uid), &imap.FetchOptions{UID: true, RFC822Size: true,
		BodySection: []*imap.FetchItemBodySection{{Peek: true, Partial: &imap.SectionPartial{Offset: 0, Size: MaxMessageBytes + 1}}}}).Collect()
	if err != nil {
		return nil, fmt.Errorf("email: fetching UID %d: %w", uid, err)
	}
	for _, m := range msgs {
		if m.UID != uid {
			continue
		}
		if m.RFC822Size > MaxMessageBytes {
			return nil, errTooLarge
		}
		if len(m.BodySection) == 0 {
			return nil, nil
		}
		return m.BodySection[0].Bytes, nil
	}
	return nil, nil
}

var errTooLarge = fmt.Errorf("the message is larger than %d bytes", MaxMessageBytes)

// journal admits the message with uid.
func (p *Provider) journal(ctx context.Context, c *imapclient.Client, uidValidity uint32, uid imap.UID) error {
	raw, err := fetchRaw(c, uid)
	log := p.env.Log().With("provider", p.ID(), "uid", uint32(uid))
	switch {
	case errors.Is(err, errTooLarge):
		log.Warn("email: skipping a message over the size limit", "limit", MaxMessageBytes)
		return nil
	case err != nil:
		return err
	case raw == nil:
		return nil // expunged meanwhile
	}
	m, err := decodeMessage(raw, -1)
	if errors.Is(err, errSender) {
		// Final, and counted: a Sender or a second From address speaks for
		// someone the server did not check.
		log.Warn("email: skipping a message whose sender is not one address", "err", err)
		p.env.CountSkipped("sender")
		return nil
	}
	if err != nil {
		// Final: no retry makes it parse or gives it a Message-ID.
		log.Warn("email: skipping a message botrun cannot admit", "err", err)
		return nil
	}
	if strings.EqualFold(m.From, p.from) {
		return nil // the bot's own (a copy, a bounce loop)
	}
	if m.Automatic != "" {
		// RFC 3834: an auto-reply answering an auto-reply loops.
		log.Info("email: not answering an automatic message (RFC 3834)", "field", m.Automatic)
		p.env.CountSkipped("automatic")
		return nil
	}
	chat, err := p.chatOf(ctx, m)
	if err != nil {
		return fmt.Errorf("email: reading the thread: %w", err)
	}
	subject := m.Subject
	if !strings.HasPrefix(strings.ToLower(subject), "re:") {
		subject = "Re: " + subject
	}
	refs := append(slices.Clone(m.References), m.MessageID)
	// What the reply needs, durable before the message is.
	if err := p.store.record(ctx, chat, thread{To: m.From, Subject: subject, References: refs, V: threadChecked}, ""); err != nil {
		return fmt.Errorf("email: recording the thread: %w", err)
	}
	msg := channel.Message{ID: m.MessageID, Chat: chat, From: m.From, Text: m.Text}
	for i, a := range m.Parts {
		msg.Media = append(msg.Media, channel.Media{Type: mediaType(a.MIME), MIME: a.MIME, Caption: a.Filename,
			Ref: encodeRef(mediaRef{V: 1, MessageID: m.MessageID, Index: i, Digest: a.Digest, UID: uint32(uid), UIDValidity: uidValidity})})
	}
	if _, err := p.env.Admitter.Admit(ctx, p.ID(), msg); err != nil {
		if errors.Is(err, channel.ErrInvalidMessage) {
			log.Warn("email: the inbox refused a message", "err", err)
			return nil
		}
		return fmt.Errorf("email: admitting UID %d: %w", uint32(uid), err)
	}
	return nil
}

// chatOf is the chat message m goes to. A reply joins the chat botrun sent
// the message it answers in (a Message-ID botrun minted, named in its
// References or In-Reply-To) only when its sender is that chat's
// correspondent; any other message goes to its sender's own chat, named by
// the address. So no one joins another's conversation by naming one of its
// Message-IDs (a root, the bot's), and a chat's recipient is never
// re-pointed at another address. A chat an earlier version recorded (a
// thread's root) is not joined: those are retired.
func (p *Provider) chatOf(ctx context.Context, m *parsed) (string, error) {
	refs := m.References
	if len(refs) > maxReferences {
		refs = refs[len(refs)-maxReferences:] // the latest: the bot's is last
	}
	for i := len(refs) - 1; i >= 0; i-- {
		chat, err := p.store.sentIn(ctx, refs[i])
		if err != nil {
			return "", err
		}
		if chat == "" || chat == m.From {
			continue
		}
		t, ok, err := p.store.thread(ctx, chat)
		if err != nil {
			return "", err
		}
		if ok && t.V >= threadChecked && t.To == m.From {
			return chat, nil
		}
	}
	return m.From, nil
}

// mediaType names the kind of an attachment by its MIME type.
func mediaType(mimeType string) string {
	for _, t := range []string{"image", "video", "audio"} {
		if strings.HasPrefix(mimeType, t+"/") {
			return t
		}
	}
	return "document"
}
