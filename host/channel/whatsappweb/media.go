package whatsappweb

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"go.mau.fi/whatsmeow"
	"go.mau.fi/whatsmeow/proto/waE2E"
	"go.mau.fi/whatsmeow/proto/waMmsRetry"
	"go.mau.fi/whatsmeow/types"
	"go.mau.fi/whatsmeow/types/events"
	"google.golang.org/protobuf/proto"

	"github.com/botrun/botrun/host/channel"
)

// downloadable is what an inbound media message gives a download.
type downloadable interface {
	GetDirectPath() string
	GetMediaKey() []byte
	GetFileSHA256() []byte
	GetFileEncSHA256() []byte
	GetFileLength() uint64
}

// msgKey is the key of the message a media came in: a media retry names it.
type msgKey struct {
	ID     string `json:"id"`
	Chat   string `json:"chat"`
	Sender string `json:"sender"`
}

// mediaRef is a media reference: the media fields of its message (no
// thumbnail, no caption) and the message key. It is the live reference
// (encoded in Media.Ref) and, as JSON, the journaled one. The media key
// decrypts that one file only; the bytes are never stored.
type mediaRef struct {
	Type          string `json:"type"`
	DirectPath    string `json:"direct_path"`
	MediaKey      []byte `json:"media_key"`
	FileSHA256    []byte `json:"file_sha256"`
	FileEncSHA256 []byte `json:"file_enc_sha256"`
	FileLength    uint64 `json:"file_length"`
	MIME          string `json:"mime,omitempty"`
	ViewOnce      bool   `json:"view_once,omitempty"`
	Key           msgKey `json:"key"`
}

// refPrefix starts every live reference (version 1).
const refPrefix = "wa1."

// maxDirectPath bounds a direct path (WhatsApp's are under 300 bytes).
const maxDirectPath = 2048

// encode is the live reference: refPrefix and the JSON in base64url.
func (r mediaRef) encode() string {
	b, _ := json.Marshal(r)
	return refPrefix + base64.RawURLEncoding.EncodeToString(b)
}

// errBadRef is wrapped by every reference that does not decode or validate.
var errBadRef = errors.New("whatsapp-web media reference is invalid")

// decodeRef parses a live reference from untrusted text.
func decodeRef(s string) (mediaRef, error) {
	b64, ok := strings.CutPrefix(s, refPrefix)
	if !ok || len(b64) > 8<<10 {
		return mediaRef{}, errBadRef
	}
	b, err := base64.RawURLEncoding.DecodeString(b64)
	if err != nil {
		return mediaRef{}, errBadRef
	}
	return decodeRefJSON(b)
}

// decodeRefJSON parses the JSON of a reference from untrusted bytes.
func decodeRefJSON(b []byte) (mediaRef, error) {
	var r mediaRef
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return mediaRef{}, fmt.Errorf("%w: %v", errBadRef, err)
	}
	if dec.More() {
		return mediaRef{}, fmt.Errorf("%w: trailing data", errBadRef)
	}
	if err := r.valid(); err != nil {
		return mediaRef{}, err
	}
	return r, nil
}

// valid checks a reference: a known type, a direct path (a path on
// WhatsApp's media hosts, which whatsmeow picks), 32-byte key and hashes,
// and a message key of user or group JIDs.
func (r mediaRef) valid() error {
	bad := func(what string) error { return fmt.Errorf("%w: %s", errBadRef, what) }
	switch {
	case mediaType(r.Type) == "":
		return bad("unknown type")
	case !validDirectPath(r.DirectPath):
		return bad("direct path")
	case len(r.MediaKey) != 32 || len(r.FileSHA256) != 32 || len(r.FileEncSHA256) != 32:
		return bad("media key or hashes")
	case r.FileLength > 4<<30 || len(r.MIME) > 255 || strings.ContainsFunc(r.MIME, func(c rune) bool { return c < ' ' || c == 0x7f }):
		return bad("length or mime type")
	case !validMessageID(r.Key.ID):
		return bad("message id")
	}
	chat, err := types.ParseJID(r.Key.Chat)
	if err != nil || chat.User == "" || (chat.Server != types.DefaultUserServer && chat.Server != types.HiddenUserServer && chat.Server != types.GroupServer) {
		return bad("chat")
	}
	sender, err := types.ParseJID(r.Key.Sender)
	if err != nil || sender.User == "" || (sender.Server != types.DefaultUserServer && sender.Server != types.HiddenUserServer) {
		return bad("sender")
	}
	return nil
}

// validDirectPath reports whether p is a path whatsmeow may append to one of
// WhatsApp's media hosts: absolute, not protocol-relative, printable.
func validDirectPath(p string) bool {
	return strings.HasPrefix(p, "/") && !strings.HasPrefix(p, "//") && len(p) <= maxDirectPath &&
		!strings.ContainsFunc(p, func(c rune) bool { return c <= ' ' || c == 0x7f || c == '\\' || c == '#' })
}

// validMessageID reports whether id looks like a WhatsApp message id.
func validMessageID(id string) bool {
	if id == "" || len(id) > 128 {
		return false
	}
	for _, c := range id {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

// mediaType is whatsmeow's media type (the key derivation's label) of a
// botrun media type; "" for an unknown one.
func mediaType(kind string) whatsmeow.MediaType {
	switch kind {
	case "image", "sticker":
		return whatsmeow.MediaImage
	case "video":
		return whatsmeow.MediaVideo
	case "audio":
		return whatsmeow.MediaAudio
	case "document":
		return whatsmeow.MediaDocument
	}
	return ""
}

// message is the reference as the media message whatsmeow downloads (or
// forwards): its type decides the key derivation.
func (r mediaRef) message(directPath string) *waE2E.Message {
	dp, mime := proto.String(directPath), proto.String(r.MIME)
	length := proto.Uint64(r.FileLength)
	if r.MIME == "" {
		mime = nil
	}
	switch r.Type {
	case "image":
		return &waE2E.Message{ImageMessage: &waE2E.ImageMessage{DirectPath: dp, MediaKey: r.MediaKey, FileSHA256: r.FileSHA256, FileEncSHA256: r.FileEncSHA256, FileLength: length, Mimetype: mime}}
	case "sticker":
		return &waE2E.Message{StickerMessage: &waE2E.StickerMessage{DirectPath: dp, MediaKey: r.MediaKey, FileSHA256: r.FileSHA256, FileEncSHA256: r.FileEncSHA256, FileLength: length, Mimetype: mime}}
	case "video":
		return &waE2E.Message{VideoMessage: &waE2E.VideoMessage{DirectPath: dp, MediaKey: r.MediaKey, FileSHA256: r.FileSHA256, FileEncSHA256: r.FileEncSHA256, FileLength: length, Mimetype: mime}}
	case "audio":
		return &waE2E.Message{AudioMessage: &waE2E.AudioMessage{DirectPath: dp, MediaKey: r.MediaKey, FileSHA256: r.FileSHA256, FileEncSHA256: r.FileEncSHA256, FileLength: length, Mimetype: mime}}
	default:
		return &waE2E.Message{DocumentMessage: &waE2E.DocumentMessage{DirectPath: dp, MediaKey: r.MediaKey, FileSHA256: r.FileSHA256, FileEncSHA256: r.FileEncSHA256, FileLength: length, Mimetype: mime}}
	}
}

// part is the downloadable part of a media message.
func part(m *waE2E.Message) whatsmeow.DownloadableMessage {
	switch {
	case m.ImageMessage != nil:
		return m.ImageMessage
	case m.StickerMessage != nil:
		return m.StickerMessage
	case m.VideoMessage != nil:
		return m.VideoMessage
	case m.AudioMessage != nil:
		return m.AudioMessage
	}
	return m.DocumentMessage
}

// SerializeMediaRef implements channel.MediaRefCodec: the reference's JSON
// (media fields and message key; no bytes, no thumbnail). View-once media
// are not made durable unless durable_view_once.
func (p *Provider) SerializeMediaRef(m channel.Media) (channel.StoredRef, bool) {
	r, err := decodeRef(m.Ref)
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
	r, err := decodeRefJSON(s.Data)
	if err != nil {
		return channel.Media{}, err
	}
	if r.ViewOnce && !p.cfg.DurableViewOnce {
		return channel.Media{}, fmt.Errorf("%w: view-once media is not kept (durable_view_once = false)", errBadRef)
	}
	return channel.Media{Type: r.Type, Ref: r.encode(), MIME: r.MIME}, nil
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
	r, err := decodeRef(m.Ref)
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
	ctx = withMediaLimit(ctx, max+mediaOverhead)
	path := r.DirectPath
	p.mu.Lock()
	if re, ok := p.rehosted[types.MessageID(r.Key.ID)]; ok {
		path = re
	}
	p.mu.Unlock()
	data, err := cli.Download(ctx, part(r.message(path)))
	if expired(err) {
		p.log.Info("whatsapp-web: media expired on WhatsApp's servers; asking the sender's phone for it", "provider", p.cfg.ID, "id", r.Key.ID)
		if path, err = p.retryMedia(ctx, cli, r); err != nil {
			return nil, err
		}
		data, err = cli.Download(ctx, part(r.message(path)))
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
	if errors.Is(err, errMediaOverLimit) {
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
func (p *Provider) retryMedia(ctx context.Context, cli Client, r mediaRef) (string, error) {
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
	if !validDirectPath(path) {
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
