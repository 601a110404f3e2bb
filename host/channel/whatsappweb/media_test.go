package whatsappweb_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"go.mau.fi/whatsmeow"
	"go.mau.fi/whatsmeow/proto/waE2E"
	"go.mau.fi/whatsmeow/types"
	"google.golang.org/protobuf/proto"

	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/channel/httpkit"
	"github.com/botrun/botrun/host/channel/whatsappweb"
	"github.com/botrun/botrun/host/channel/whatsappweb/whatsappwebtest"
)

var photo = []byte("\xff\xd8\xff\xe0 a JPEG photo of a parrot")

// inboundImage admits an image message (view-once if asked) and returns its
// live media and its direct path.
func inboundImage(t *testing.T, b *bot, c *whatsappwebtest.Client, id types.MessageID, viewOnce bool) (channel.Media, string) {
	t.Helper()
	up := b.net.Media(id, whatsmeow.MediaImage, photo)
	img := &waE2E.Message{ImageMessage: &waE2E.ImageMessage{URL: proto.String(up.URL), DirectPath: proto.String(up.DirectPath), MediaKey: up.MediaKey,
		FileSHA256: up.FileSHA256, FileEncSHA256: up.FileEncSHA256, FileLength: proto.Uint64(up.FileLength), Mimetype: proto.String("image/jpeg"),
		Caption: proto.String("a parrot"), JPEGThumbnail: []byte("THUMBNAIL-BYTES")}}
	if viewOnce {
		img = &waE2E.Message{ViewOnceMessageV2: &waE2E.FutureProofMessage{Message: img}}
	}
	if !c.Emit(b.net.Incoming(id, alice, aliceDevice, img)) {
		t.Fatal("the image message was not acknowledged")
	}
	msgs := b.admit.Admitted()
	m := msgs[len(msgs)-1]
	if m.ID != string(id) || len(m.Media) != 1 {
		t.Fatalf("admitted %+v", m)
	}
	return m.Media[0], up.DirectPath
}

func TestMediaRefsRoundTripAndLoad(t *testing.T) {
	b, c := connectedBot(t, nil)
	ctx := context.Background()
	live, _ := inboundImage(t, b, c, "IMG1", false)
	stored, ok := b.p.SerializeMediaRef(live)
	if !ok || stored.V != 1 {
		t.Fatalf("SerializeMediaRef: %+v %v", stored, ok)
	}
	// The stored form: the media fields and the message key; never the
	// bytes, the thumbnail, the caption or the URL.
	var fields map[string]any
	json.Unmarshal(stored.Data, &fields)
	for _, k := range []string{"type", "direct_path", "media_key", "file_sha256", "file_enc_sha256", "file_length", "mime", "key"} {
		if _, ok := fields[k]; !ok {
			t.Errorf("the stored ref has no %s: %s", k, stored.Data)
		}
	}
	for _, no := range []string{base64.StdEncoding.EncodeToString([]byte("THUMBNAIL-BYTES")), "THUMBNAIL", "parrot", "mmg.whatsapp.net", base64.StdEncoding.EncodeToString(photo)} {
		if strings.Contains(string(stored.Data), no) {
			t.Errorf("the stored ref holds %q: %s", no, stored.Data)
		}
	}
	if k := fields["key"].(map[string]any); k["id"] != "IMG1" || k["chat"] != alice.String() || k["sender"] != alice.String() {
		t.Errorf("message key %v", k)
	}
	// Through JSON and back, in a provider that never connected: the same
	// live reference.
	js, _ := json.Marshal(stored)
	var back channel.StoredRef
	json.Unmarshal(js, &back)
	fresh := newBot(t, b.net, nil, nil)
	m, err := fresh.p.RehydrateMediaRef(back)
	if err != nil || m.Ref != live.Ref || m.Type != "image" || m.MIME != "image/jpeg" {
		t.Fatalf("RehydrateMediaRef: %+v, %v; want ref %q", m, err, live.Ref)
	}
	got, err := b.p.LoadMedia(ctx, m, 1<<20)
	if err != nil || string(got) != string(photo) {
		t.Fatalf("LoadMedia: %q, %v", got, err)
	}
	if _, err := b.p.LoadMedia(ctx, m, int64(len(photo)-1)); !httpkit.MediaGone(err) {
		t.Fatalf("LoadMedia over the limit: %v", err)
	}
	// Not connected (the fresh provider): worth a retry.
	if _, err := fresh.p.LoadMedia(ctx, m, 1<<20); err == nil || httpkit.MediaGone(err) {
		t.Fatalf("LoadMedia without a connection: %v", err)
	}
}

func TestTamperedOrForeignRefsAreRefused(t *testing.T) {
	b, c := connectedBot(t, nil)
	live, _ := inboundImage(t, b, c, "IMG1", false)
	stored, _ := b.p.SerializeMediaRef(live)
	var good map[string]any
	json.Unmarshal(stored.Data, &good)
	with := func(k string, v any) json.RawMessage {
		m := map[string]any{}
		for kk, vv := range good {
			m[kk] = vv
		}
		m[k] = v
		out, _ := json.Marshal(m)
		return out
	}
	bad := []channel.StoredRef{
		{V: 2, Data: stored.Data},
		{V: 1, Data: json.RawMessage(`{}`)},
		{V: 1, Data: json.RawMessage(`"not an object"`)},
		{V: 1, Data: json.RawMessage(`{"file_id":"","media_id":"../x","url":"https://evil.example/x"}`)},
		{V: 1, Data: with("direct_path", "https://evil.example/x")},
		{V: 1, Data: with("direct_path", "//evil.example/x")},
		{V: 1, Data: with("media_key", base64.StdEncoding.EncodeToString([]byte("short")))},
		{V: 1, Data: with("type", "hologram")},
		{V: 1, Data: with("url", "https://evil.example/x")},
		{V: 1, Data: with("key", map[string]any{"id": "IMG1", "chat": "x@evil.example", "sender": alice.String()})},
		{V: 1, Data: with("key", map[string]any{"id": "IMG 1;", "chat": alice.String(), "sender": alice.String()})},
	}
	for _, s := range bad {
		if m, err := b.p.RehydrateMediaRef(s); err == nil {
			t.Errorf("RehydrateMediaRef(%s) accepted as %+v", s.Data, m)
		}
	}
	for _, ref := range []string{"", "wa1.", "wa1.!!!", "AgACAgQAAxkBAAI", "wa2." + strings.TrimPrefix(live.Ref, "wa1.")} {
		if _, err := b.p.LoadMedia(context.Background(), channel.Media{Type: "image", Ref: ref}, 1<<20); !httpkit.MediaGone(err) {
			t.Errorf("LoadMedia(%q): %v, want the media unavailable", ref, err)
		}
	}
}

func TestViewOnceMediaIsNotJournaledUnlessAsked(t *testing.T) {
	b, c := connectedBot(t, nil)
	live, _ := inboundImage(t, b, c, "VO1", true)
	// No ref at all: with durability.inbox.media_refs = false the host
	// journals the raw ref, which would carry the media key.
	if live.Ref != "" {
		t.Fatalf("view-once media admitted with a ref (%q) with durable_view_once = false", live.Ref)
	}
	if _, ok := b.p.SerializeMediaRef(live); ok {
		t.Fatal("view-once media made durable with durable_view_once = false")
	}
	b2, c2 := connectedBot(t, func(c *whatsappweb.Config) { c.DurableViewOnce = true })
	live2, _ := inboundImage(t, b2, c2, "VO2", true)
	stored, ok := b2.p.SerializeMediaRef(live2)
	if !ok || !strings.Contains(string(stored.Data), `"view_once":true`) {
		t.Fatalf("durable_view_once = true: %s, %v", stored.Data, ok)
	}
	if _, err := b.p.RehydrateMediaRef(stored); err == nil {
		t.Fatal("a provider without durable_view_once rehydrated a view-once ref")
	}
}

func TestExpiredMediaIsAskedFromTheSendersPhone(t *testing.T) {
	b, c := connectedBot(t, nil)
	ctx := context.Background()
	live, path := inboundImage(t, b, c, "OLD1", false)
	b.net.Expire(path, false)
	got, err := b.p.LoadMedia(ctx, live, 1<<20)
	if err != nil || string(got) != string(photo) {
		t.Fatalf("expired media after a media retry: %q, %v", got, err)
	}
	mustContain(t, "the log", b.logs.String(), "media expired on WhatsApp's servers; asking the sender's phone for it")

	// The phone no longer has it: gone for good.
	live2, path2 := inboundImage(t, b, c, "OLD2", false)
	b.net.Expire(path2, true)
	if _, err := b.p.LoadMedia(ctx, live2, 1<<20); !httpkit.MediaGone(err) {
		t.Fatalf("media the phone lost: %v, want gone", err)
	}

}

func TestExpiredMediaWithThePhoneOfflineIsWorthARetry(t *testing.T) {
	b, c := connectedBot(t, func(c *whatsappweb.Config) { c.MediaRetryWait = 50 * time.Millisecond })
	live, path := inboundImage(t, b, c, "OLD3", false)
	b.net.Expire(path, false)
	b.net.PhoneOffline(true)
	_, err := b.p.LoadMedia(context.Background(), live, 1<<20)
	if err == nil || httpkit.MediaGone(err) || !strings.Contains(err.Error(), "must be online") {
		t.Fatalf("an offline phone: %v, want a retryable error", err)
	}
	b.net.PhoneOffline(false)
	if got, err := b.p.LoadMedia(context.Background(), live, 1<<20); err != nil || string(got) != string(photo) {
		t.Fatalf("once the phone is back: %q, %v", got, err)
	}
}
