package wamsg

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"go.mau.fi/whatsmeow"
	"go.mau.fi/whatsmeow/proto/waE2E"
	"go.mau.fi/whatsmeow/types"
	"google.golang.org/protobuf/proto"
)

// downloadable is what an inbound media message gives a download.
type downloadable interface {
	GetDirectPath() string
	GetMediaKey() []byte
	GetFileSHA256() []byte
	GetFileEncSHA256() []byte
	GetFileLength() uint64
}

// MsgKey is the key of the message a media came in: a media retry names it.
type MsgKey struct {
	ID     string `json:"id"`
	Chat   string `json:"chat"`
	Sender string `json:"sender"`
}

// Ref is a media reference: the media fields of its message (no
// thumbnail, no caption) and the message key. It is the live reference
// (encoded in Media.Ref) and, as JSON, the journaled one. The media key
// decrypts that one file only; the bytes are never stored.
type Ref struct {
	Type          string `json:"type"`
	DirectPath    string `json:"direct_path"`
	MediaKey      []byte `json:"media_key"`
	FileSHA256    []byte `json:"file_sha256"`
	FileEncSHA256 []byte `json:"file_enc_sha256"`
	FileLength    uint64 `json:"file_length"`
	MIME          string `json:"mime,omitempty"`
	ViewOnce      bool   `json:"view_once,omitempty"`
	Key           MsgKey `json:"key"`
}

// refPrefix starts every live reference (version 1).
const refPrefix = "wa1."

// maxDirectPath bounds a direct path (WhatsApp's are under 300 bytes).
const maxDirectPath = 2048

// Encode is the live reference: refPrefix and the JSON in base64url.
func (r Ref) Encode() string {
	b, _ := json.Marshal(r)
	return refPrefix + base64.RawURLEncoding.EncodeToString(b)
}

// ErrBadRef is wrapped by every reference that does not decode or validate.
var ErrBadRef = errors.New("whatsapp-web media reference is invalid")

// DecodeRef parses a live reference from untrusted text.
func DecodeRef(s string) (Ref, error) {
	b64, ok := strings.CutPrefix(s, refPrefix)
	if !ok || len(b64) > 8<<10 {
		return Ref{}, ErrBadRef
	}
	b, err := base64.RawURLEncoding.DecodeString(b64)
	if err != nil {
		return Ref{}, ErrBadRef
	}
	return DecodeRefJSON(b)
}

// DecodeRefJSON parses the JSON of a reference from untrusted bytes.
func DecodeRefJSON(b []byte) (Ref, error) {
	var r Ref
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return Ref{}, fmt.Errorf("%w: %v", ErrBadRef, err)
	}
	if dec.More() {
		return Ref{}, fmt.Errorf("%w: trailing data", ErrBadRef)
	}
	if err := r.Valid(); err != nil {
		return Ref{}, err
	}
	return r, nil
}

// Valid checks a reference: a known type, a direct path (a path on
// WhatsApp's media hosts, which whatsmeow picks), 32-byte key and hashes,
// and a message key of user or group JIDs.
func (r Ref) Valid() error {
	bad := func(what string) error { return fmt.Errorf("%w: %s", ErrBadRef, what) }
	switch {
	case MediaType(r.Type) == "":
		return bad("unknown type")
	case !ValidDirectPath(r.DirectPath):
		return bad("direct path")
	case len(r.MediaKey) != 32 || len(r.FileSHA256) != 32 || len(r.FileEncSHA256) != 32:
		return bad("media key or hashes")
	case r.FileLength > 4<<30 || len(r.MIME) > 255 || strings.ContainsFunc(r.MIME, func(c rune) bool { return c < ' ' || c == 0x7f }):
		return bad("length or mime type")
	case !ValidMessageID(r.Key.ID):
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

// ValidDirectPath reports whether p is a path whatsmeow may append to one of
// WhatsApp's media hosts: absolute, not protocol-relative, printable.
func ValidDirectPath(p string) bool {
	return strings.HasPrefix(p, "/") && !strings.HasPrefix(p, "//") && len(p) <= maxDirectPath &&
		!strings.ContainsFunc(p, func(c rune) bool { return c <= ' ' || c == 0x7f || c == '\\' || c == '#' })
}

// ValidMessageID reports whether id looks like a WhatsApp message id.
func ValidMessageID(id string) bool {
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

// MediaType is whatsmeow's media type (the key derivation's label) of a
// botrun media type; "" for an unknown one.
func MediaType(kind string) whatsmeow.MediaType {
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

// Message is the reference as the media message whatsmeow downloads (or
// forwards): its type decides the key derivation.
func (r Ref) Message(directPath string) *waE2E.Message {
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

// Part is the downloadable Part of a media message.
func Part(m *waE2E.Message) whatsmeow.DownloadableMessage {
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
