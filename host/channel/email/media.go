package email

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/emersion/go-imap/v2"
	"github.com/emersion/go-imap/v2/imapclient"

	"github.com/botrun/botrun/host/channel"
)

// mediaRef is an attachment's reference as journaled: which message (its
// Message-ID, and where it was: UID under UIDVALIDITY), which attachment,
// and the digest of its bytes. It holds no credentials.
type mediaRef struct {
	V           int    `json:"v"`
	MessageID   string `json:"mid"`
	Index       int    `json:"i"`
	Digest      string `json:"sha256"`
	UID         uint32 `json:"uid"`
	UIDValidity uint32 `json:"uidvalidity"`
}

func encodeRef(r mediaRef) string {
	b, _ := json.Marshal(r)
	return string(b)
}

// decodeRef parses a reference from the journal (untrusted bytes).
func decodeRef(s string) (mediaRef, error) {
	var r mediaRef
	if err := json.Unmarshal([]byte(s), &r); err != nil {
		return r, fmt.Errorf("%w: not an email attachment reference", channel.ErrMediaUnavailable)
	}
	if r.V != 1 || !validID(r.MessageID) || r.Index < 0 || r.Index >= maxParts || len(r.Digest) != 64 || r.UID == 0 {
		return r, fmt.Errorf("%w: an email attachment reference of an unknown version or with bad fields", channel.ErrMediaUnavailable)
	}
	return r, nil
}

// LoadMedia implements channel.MediaLoader: it fetches the message again
// (by UID, or by Message-ID when the mailbox was renumbered), takes the
// attachment and checks its digest.
func (p *Provider) LoadMedia(ctx context.Context, m channel.Media, max int64) ([]byte, error) {
	a, err := p.loadPart(ctx, m.Ref, max)
	if err != nil {
		return nil, err
	}
	return a.Data, nil
}

// loadPart fetches the attachment the journaled reference s names, its
// bytes at most max.
func (p *Provider) loadPart(ctx context.Context, s string, max int64) (part, error) {
	ref, err := decodeRef(s)
	if err != nil {
		return part{}, err
	}
	p.loadMu.Lock()
	defer p.loadMu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	c, release, err := p.dialIMAP(ctx, nil)
	if err != nil {
		return part{}, err
	}
	defer release()
	sel, err := c.Select(p.cfg.Mailbox, &imap.SelectOptions{ReadOnly: true}).Wait()
	if err != nil {
		return part{}, fmt.Errorf("email: selecting %q: %w", p.cfg.Mailbox, err)
	}
	uids := []imap.UID{imap.UID(ref.UID)}
	if sel.UIDValidity != ref.UIDValidity {
		if uids, err = searchMessageID(c, ref.MessageID); err != nil {
			return part{}, err
		}
	}
	for _, uid := range uids {
		raw, err := fetchRaw(c, uid)
		if errors.Is(err, errTooLarge) {
			return part{}, fmt.Errorf("%w (%d bytes)", channel.ErrMediaTooLarge, max)
		}
		if err != nil {
			return part{}, err
		}
		if raw == nil {
			continue
		}
		var msg *parsed
		err = p.env.Guard(fmt.Sprintf("parsing the message %q for its attachment %d", ref.MessageID, ref.Index), func() (err error) {
			msg, err = decodeMessage(raw, ref.Index)
			return err
		})
		if err != nil || msg.MessageID != ref.MessageID || ref.Index >= len(msg.Parts) {
			continue
		}
		a := msg.Parts[ref.Index]
		if subtle.ConstantTimeCompare([]byte(a.Digest), []byte(ref.Digest)) != 1 {
			return part{}, fmt.Errorf("%w: the attachment's digest does not match the journaled one", channel.ErrMediaUnavailable)
		}
		if int64(a.Size) > max {
			return part{}, fmt.Errorf("%w (%d bytes)", channel.ErrMediaTooLarge, max)
		}
		return a, nil
	}
	return part{}, fmt.Errorf("%w: the message is no longer in %q", channel.ErrMediaUnavailable, p.cfg.Mailbox)
}

// searchMessageID finds a message by its Message-ID header.
func searchMessageID(c *imapclient.Client, id string) ([]imap.UID, error) {
	data, err := c.UIDSearch(&imap.SearchCriteria{Header: []imap.SearchCriteriaHeaderField{{Key: "Message-Id", Value: "<" + id + ">"}}}, nil).Wait()
	if err != nil {
		return nil, fmt.Errorf("email: searching the Message-ID: %w", err)
	}
	return data.AllUIDs(), nil
}
