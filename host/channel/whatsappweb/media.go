package whatsappweb

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"go.mau.fi/whatsmeow"
	"go.mau.fi/whatsmeow/proto/waMmsRetry"
	"go.mau.fi/whatsmeow/types"
	"go.mau.fi/whatsmeow/types/events"

	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/channel/whatsappweb/internal/wamsg"
)

// SerializeMediaRef implements channel.MediaRefCodec: the reference's JSON
// (media fields and message key; no bytes, no thumbnail). View-once media
// are not made durable unless durable_view_once.
func (p *Provider) SerializeMediaRef(m channel.Media) (channel.StoredRef, bool) {
	r, err := wamsg.DecodeRef(m.Ref)
	if err != nil || (r.ViewOnce && !p.cfg.DurableViewOnce) {
		return channel.StoredRef{}, false
	}
	data, _ := json.Marshal(r)
	return channel.StoredRef{V: 1, Data: data}, true
}

// RehydrateMediaRef implements channel.MediaRefCodec: the same live
// reference, rebuilt without a connection.
func (p *Provider) RehydrateMediaRef(s channel.StoredRef) (channel.Media, error) {
	if s.V != 1 {
		return channel.Media{}, fmt.Errorf("whatsapp-web media ref version %d is unknown", s.V)
	}
	r, err := wamsg.DecodeRefJSON(s.Data)
	if err != nil {
		return channel.Media{}, err
	}
	if r.ViewOnce && !p.cfg.DurableViewOnce {
		return channel.Media{}, fmt.Errorf("%w: view-once media is not kept (durable_view_once = false)", wamsg.ErrBadRef)
	}
	return channel.Media{Type: r.Type, Ref: r.Encode(), MIME: r.MIME}, nil
}

// LoadMedia implements channel.MediaLoader: whatsmeow downloads and
// decrypts the file from WhatsApp's media hosts. When they refuse it (403,
// 404, 410: expired, usually after some weeks), the sender's phone is asked
// to upload it again (a media retry receipt); the download follows the new
// path it answers. A phone that no longer has it, a file that fails its
// hashes or MAC, and a reference that does not validate are final; a phone
// that does not answer within MediaRetryWait (it must be online) is worth a
// retry, and so is a lost connection.
func (p *Provider) LoadMedia(ctx context.Context, m channel.Media, max int64) ([]byte, error) {
	r, err := wamsg.DecodeRef(m.Ref)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", channel.ErrMediaUnavailable, err)
	}
	if int64(r.FileLength) > max {
		return nil, fmt.Errorf("%w (%d bytes)", channel.ErrMediaTooLarge, max)
	}
	cli := p.client()
	if cli == nil {
		return nil, p.errNotConnected()
	}
	// The file length is the sender's word: the download itself is capped.
	ctx = wamsg.WithMediaLimit(ctx, max+wamsg.MediaOverhead)
	path := r.DirectPath
	p.mu.Lock()
	if re, ok := p.rehosted[types.MessageID(r.Key.ID)]; ok {
		path = re
	}
	p.mu.Unlock()
	data, err := cli.Download(ctx, wamsg.Part(r.Message(path)))
	if expired(err) {
		p.log.Info("whatsapp-web: media expired on WhatsApp's servers; asking the sender's phone for it", "provider", p.cfg.ID, "id", r.Key.ID)
		if path, err = p.retryMedia(ctx, cli, r); err != nil {
			return nil, err
		}
		data, err = cli.Download(ctx, wamsg.Part(r.Message(path)))
	}
	if err != nil {
		return nil, p.downloadErr(err)
	}
	if int64(len(data)) > max {
		return nil, fmt.Errorf("%w (%d bytes)", channel.ErrMediaTooLarge, max)
	}
	return data, nil
}

// expired reports whether the media hosts refused a download as gone.
func expired(err error) bool {
	return errors.Is(err, whatsmeow.ErrMediaDownloadFailedWith403) || errors.Is(err, whatsmeow.ErrMediaDownloadFailedWith404) ||
		errors.Is(err, whatsmeow.ErrMediaDownloadFailedWith410)
}

// downloadErr maps a download's error: a file that fails its checks, or
// that the hosts still refuse after a media retry, is gone.
func (p *Provider) downloadErr(err error) error {
	if errors.Is(err, wamsg.ErrMediaOverLimit) {
		return fmt.Errorf("%w: whatsapp-web %s: the file is larger than its message said", channel.ErrMediaTooLarge, p.cfg.ID)
	}
	for _, final := range []error{whatsmeow.ErrInvalidMediaHMAC, whatsmeow.ErrInvalidMediaEncSHA256, whatsmeow.ErrInvalidMediaSHA256,
		whatsmeow.ErrFileLengthMismatch, whatsmeow.ErrTooShortFile, whatsmeow.ErrNoURLPresent, whatsmeow.ErrUnknownMediaType} {
		if errors.Is(err, final) {
			return fmt.Errorf("%w: whatsapp-web %s: %w", channel.ErrMediaUnavailable, p.cfg.ID, err)
		}
	}
	if expired(err) {
		return fmt.Errorf("%w: whatsapp-web %s: the media hosts refuse it even after the phone uploaded it again: %w", channel.ErrMediaUnavailable, p.cfg.ID, err)
	}
	return fmt.Errorf("whatsapp-web %s: downloading media: %w", p.cfg.ID, err)
}

// mediaRetryAnswer is the phone's answer to a media retry request.
type mediaRetryAnswer struct{ evt *events.MediaRetry }

// retryMedia asks the sender's phone to upload r's media again and returns
// the direct path it answers.
func (p *Provider) retryMedia(ctx context.Context, cli Client, r wamsg.Ref) (string, error) {
	chat, _ := types.ParseJID(r.Key.Chat)
	sender, _ := types.ParseJID(r.Key.Sender)
	id := types.MessageID(r.Key.ID)
	answer := make(chan mediaRetryAnswer, 1)
	p.mu.Lock()
	p.retries[id] = answer
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		if p.retries[id] == answer {
			delete(p.retries, id)
		}
		p.mu.Unlock()
	}()
	info := &types.MessageInfo{ID: id, MessageSource: types.MessageSource{Chat: chat, Sender: sender, IsGroup: chat.Server == types.GroupServer}}
	if err := cli.SendMediaRetryReceipt(ctx, info, r.MediaKey); err != nil {
		return "", fmt.Errorf("whatsapp-web %s: asking the phone for expired media: %w", p.cfg.ID, err)
	}
	wait, cancel := context.WithTimeout(ctx, p.cfg.MediaRetryWait)
	defer cancel()
	var a mediaRetryAnswer
	select {
	case a = <-answer:
	case <-wait.Done():
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		return "", fmt.Errorf("whatsapp-web %s: the sender's phone did not upload the expired media within %s (it must be online); later", p.cfg.ID, p.cfg.MediaRetryWait)
	}
	notif, err := whatsmeow.DecryptMediaRetryNotification(a.evt, r.MediaKey)
	switch {
	case errors.Is(err, whatsmeow.ErrMediaNotAvailableOnPhone):
		return "", fmt.Errorf("%w: whatsapp-web %s: expired, and the sender's phone no longer has it", channel.ErrMediaUnavailable, p.cfg.ID)
	case err != nil:
		return "", fmt.Errorf("whatsapp-web %s: the phone's answer to a media retry: %w", p.cfg.ID, err)
	}
	switch notif.GetResult() {
	case waMmsRetry.MediaRetryNotification_SUCCESS:
	case waMmsRetry.MediaRetryNotification_NOT_FOUND, waMmsRetry.MediaRetryNotification_DECRYPTION_ERROR:
		return "", fmt.Errorf("%w: whatsapp-web %s: the sender's phone answered %s to the media retry", channel.ErrMediaUnavailable, p.cfg.ID, notif.GetResult())
	default:
		return "", fmt.Errorf("whatsapp-web %s: the sender's phone answered %s to the media retry", p.cfg.ID, notif.GetResult())
	}
	path := notif.GetDirectPath()
	if !wamsg.ValidDirectPath(path) {
		return "", fmt.Errorf("%w: whatsapp-web %s: the phone answered an invalid direct path", channel.ErrMediaUnavailable, p.cfg.ID)
	}
	p.mu.Lock()
	if len(p.rehosted) > 10000 {
		clear(p.rehosted)
	}
	p.rehosted[id] = path
	p.mu.Unlock()
	return path, nil
}

// mediaRetried hands a media retry answer to the download waiting for it.
func (p *Provider) mediaRetried(e *events.MediaRetry) {
	p.mu.Lock()
	ch := p.retries[e.MessageID]
	p.mu.Unlock()
	if ch != nil {
		select {
		case ch <- mediaRetryAnswer{evt: e}:
		default:
		}
	}
}
