package channeltest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/channel/httpkit"
)

// SendContract is the outbound half of a channel's contract, whatever its
// transport: sends, the failure classes, the text limit, and durable
// media. Run builds one for an HTTP channel from its Channel; a channel
// on another transport (email, whatsapp-web) builds its own over its fake.
type SendContract struct {
	// Type, when set, is the channel's registered type name: RunSend then
	// checks its registration too, as Run does with the inbound half.
	Type string
	// NoCredentials, set to the reason, is a channel whose entry needs no
	// key beyond id and type (whatsapp-web pairs by QR code): its empty
	// entry may pass Check.
	NoCredentials string
	// Channel is the provider under test, open on the fake.
	Channel channel.Channel
	// Chat is a chat the fake accepts sends to.
	Chat string
	// MediaOut is an attachment the fake accepts.
	MediaOut channel.Media
	// Texts returns the texts the fake accepted for chat, in order.
	Texts func(chat string) []string
	// Failures are the error classes the channel maps, each arranged at the
	// fake.
	Failures []Failure
	// NoRateLimit, set to the reason, is a transport that never answers
	// "rate limited, wait" (SMTP has no such reply): no failure class may
	// then ask for a wait. Empty, the suite does not require one.
	NoRateLimit string
	// Down makes the transport unavailable (true) or available again
	// (false): a send, and a media download, must then fail retryably.
	Down func(down bool)
	// Secrets must never appear in an error or a stored media reference.
	Secrets []string
	// Unlimited, set to the reason, is a channel that declares no text
	// limit: the split test is skipped with that reason, and only then.
	Unlimited string
	// NoInboundMedia, set to the reason, is a channel whose inbound
	// messages carry no media: the durable media test is skipped with
	// that reason, and only then.
	NoInboundMedia string
	// InboundImage delivers an image through the fake and returns the
	// media of the message the channel admitted.
	InboundImage func(t *testing.T) channel.Media
	// ImageBytes are the bytes of InboundImage's image.
	ImageBytes []byte
	// GoneMedia returns a media reference the fake does not (any longer)
	// have.
	GoneMedia func() channel.Media
	// RefStoredAsIs, set to the reason, is a channel whose live media
	// reference is durable as it is (no channel.MediaRefCodec): the
	// reference itself is checked for credentials instead.
	RefStoredAsIs string
}

// RunSend runs the outbound half of the contract suite.
func RunSend(t *testing.T, c SendContract) {
	p, ctx := c.Channel, context.Background()
	if c.Type != "" {
		t.Run("registered", func(t *testing.T) { registered(t, Channel{Type: c.Type, Unsigned: c.NoCredentials}) })
	}
	t.Run("send/text-and-media", func(t *testing.T) {
		before := len(c.Texts(c.Chat))
		ref, err := p.Send(ctx, channel.Outbound{Chat: c.Chat, Text: "echo: hola"})
		if err != nil || ref == "" {
			t.Fatalf("send text: ref %q, %v", ref, err)
		}
		if got := c.Texts(c.Chat); len(got) != before+1 || got[before] != "echo: hola" {
			t.Fatalf("the fake got %q", got)
		}
		m := c.MediaOut
		if ref, err := p.Send(ctx, channel.Outbound{Chat: c.Chat, Text: "look", Media: &m}); err != nil || ref == "" {
			t.Fatalf("send media: ref %q, %v", ref, err)
		}
		if _, err := p.Send(ctx, channel.Outbound{Chat: c.Chat, Media: &channel.Media{Type: "hologram", Ref: "x"}}); !httpkit.Permanent(err) {
			t.Fatalf("media of an unknown type: %v, want a permanent error", err)
		}
	})

	t.Run("send/errors", func(t *testing.T) {
		var errs []error
		for _, f := range c.Failures {
			_, err := p.Send(ctx, f.Arrange())
			errs = append(errs, err)
			switch {
			case err == nil:
				t.Errorf("%s: the send succeeded", f.Name)
			case f.RetryAfter > 0 && c.NoRateLimit != "":
				t.Errorf("%s: a rate-limited class, but NoRateLimit says %q", f.Name, c.NoRateLimit)
			case f.RetryAfter > 0:
				if got := httpkit.RetryAfter(err); got != f.RetryAfter || httpkit.Permanent(err) {
					t.Errorf("%s: %v: retry after %s (permanent %v), want %s", f.Name, err, got, httpkit.Permanent(err), f.RetryAfter)
				}
			case f.Is != nil && !errors.Is(err, f.Is):
				t.Errorf("%s: %v, want %v", f.Name, err, f.Is)
			case f.Permanent && !httpkit.Permanent(err):
				t.Errorf("%s: %v is not permanent", f.Name, err)
			}
		}
		c.Down(true)
		_, err := p.Send(ctx, channel.Outbound{Chat: c.Chat, Text: "while down"})
		c.Down(false)
		if err == nil || httpkit.Permanent(err) || httpkit.RetryAfter(err) > 0 {
			t.Errorf("API unavailable: %v; want a plain retryable error", err)
		}
		for _, err := range append(errs, err) {
			for _, s := range c.Secrets {
				if err != nil && strings.Contains(err.Error(), s) {
					t.Errorf("an error shows a credential: %v", err)
				}
			}
		}
	})

	t.Run("send/split-at-the-text-limit", func(t *testing.T) { split(t, c) })
	t.Run("media/serialize-rehydrate-load", func(t *testing.T) { media(t, c) })
}

// split checks the text limit: a text of exactly the limit goes, one
// character or byte more is refused by the channel, and httpkit.Split's
// parts of a long text arrive whole and in order.
func split(t *testing.T, c SendContract) {
	p, ctx := c.Channel, context.Background()
	if c.Unlimited != "" {
		t.Skip(c.Unlimited)
	}
	l, ok := p.(channel.Limiter)
	if !ok {
		t.Fatal("the provider declares no text limit (channel.Limiter)")
	}
	runes, bytes := l.TextLimits(channel.Outbound{})
	if runes > 0 && (bytes == 0 || 2*runes <= bytes) {
		if _, err := p.Send(ctx, channel.Outbound{Chat: c.Chat, Text: strings.Repeat("ñ", runes)}); err != nil {
			t.Fatalf("a text of exactly the limit (%d characters): %v", runes, err)
		}
		over := strings.Repeat("ñ", runes+1)
		if _, err := p.Send(ctx, channel.Outbound{Chat: c.Chat, Text: over}); !errors.Is(err, channel.ErrPayloadTooLarge) {
			t.Fatalf("a text of limit+1 (%d) characters: %v, want ErrPayloadTooLarge from the channel", runes+1, err)
		}
	}
	if bytes > 0 {
		// Two-byte characters, and one byte more when the limit is odd.
		exact := strings.Repeat("ñ", bytes/2) + strings.Repeat("a", bytes%2)
		if _, err := p.Send(ctx, channel.Outbound{Chat: c.Chat, Text: exact}); err != nil {
			t.Fatalf("a text of exactly the limit (%d bytes): %v", bytes, err)
		}
		if _, err := p.Send(ctx, channel.Outbound{Chat: c.Chat, Text: exact + "a"}); !errors.Is(err, channel.ErrPayloadTooLarge) {
			t.Fatalf("a text of limit+1 (%d) bytes: %v, want ErrPayloadTooLarge from the channel", bytes+1, err)
		}
	}
	long := strings.Repeat("palabra ñandú 🦜 ", max(runes, bytes)/5)
	before := len(c.Texts(c.Chat))
	parts := httpkit.Split(long, runes, bytes)
	if len(parts) < 2 {
		t.Fatalf("%d characters split into %d parts", len([]rune(long)), len(parts))
	}
	for i, part := range parts {
		if _, err := p.Send(ctx, channel.Outbound{Chat: c.Chat, Text: part}); err != nil {
			t.Fatalf("part %d of %d: %v", i+1, len(parts), err)
		}
	}
	if got := strings.Join(c.Texts(c.Chat)[before:], ""); got != long {
		t.Fatalf("the parts the fake got do not join into the text (%d of %d bytes)", len(got), len(long))
	}
}

// media checks durable inbound media: an admitted image's reference is
// journaled without credentials, rebuilt from the journal, and loads its
// bytes; over the size limit, gone, or with the transport down, the load
// fails as it must.
func media(t *testing.T, c SendContract) {
	if c.NoInboundMedia != "" {
		t.Skip(c.NoInboundMedia)
	}
	ctx := context.Background()
	loader, ok := c.Channel.(channel.MediaLoader)
	if !ok {
		t.Fatal("the provider loads no media (channel.MediaLoader)")
	}
	live := c.InboundImage(t)
	if live.Type != "image" || live.Ref == "" {
		t.Fatalf("inbound image parsed as %+v", live)
	}
	m := live
	codec, ok := c.Channel.(channel.MediaRefCodec)
	switch {
	case ok && c.RefStoredAsIs != "":
		t.Fatalf("the provider has a channel.MediaRefCodec, but RefStoredAsIs says %q", c.RefStoredAsIs)
	case ok:
		m = rehydrated(t, c, codec, live)
	case c.RefStoredAsIs == "":
		t.Fatal("the provider has no durable media (channel.MediaRefCodec): say why its references are durable as they are in RefStoredAsIs")
	default:
		for _, s := range c.Secrets {
			if strings.Contains(live.Ref, s) {
				t.Fatalf("the journaled ref %q holds a credential", live.Ref)
			}
		}
	}
	got, err := loader.LoadMedia(ctx, m, 1<<20)
	if err != nil || !bytes.Equal(got, c.ImageBytes) {
		t.Fatalf("LoadMedia: %d bytes, %v; want the fake's %d bytes", len(got), err, len(c.ImageBytes))
	}
	if _, err := loader.LoadMedia(ctx, m, int64(len(c.ImageBytes)-1)); !httpkit.MediaGone(err) {
		t.Fatalf("LoadMedia over the size limit: %v, want the media unavailable (httpkit.MediaGone)", err)
	}
	if _, err := loader.LoadMedia(ctx, c.GoneMedia(), 1<<20); !httpkit.MediaGone(err) {
		t.Fatalf("LoadMedia of media the channel does not have: %v, want the media unavailable (httpkit.MediaGone)", err)
	}
	c.Down(true)
	_, err = loader.LoadMedia(ctx, m, 1<<20)
	c.Down(false)
	if err == nil || httpkit.MediaGone(err) {
		t.Fatalf("LoadMedia while the API is down: %v, want a retryable error", err)
	}
}

// rehydrated serializes live as the journal stores it, checks the stored
// form holds no credential and that bad stored forms are refused, and
// returns the media rebuilt from it.
func rehydrated(t *testing.T, c SendContract, codec channel.MediaRefCodec, live channel.Media) channel.Media {
	stored, ok := codec.SerializeMediaRef(live)
	if !ok || stored.V < 1 {
		t.Fatalf("SerializeMediaRef(%+v) = %+v, %v", live, stored, ok)
	}
	js, _ := json.Marshal(stored)
	for _, s := range c.Secrets {
		if bytes.Contains(js, []byte(s)) {
			t.Fatalf("the stored ref %s holds a credential", js)
		}
	}
	var back channel.StoredRef
	if err := json.Unmarshal(js, &back); err != nil {
		t.Fatal(err)
	}
	m, err := codec.RehydrateMediaRef(back)
	if err != nil || m.Ref != live.Ref {
		t.Fatalf("RehydrateMediaRef(%s) = %+v, %v; want ref %q", js, m, err, live.Ref)
	}
	for _, bad := range []channel.StoredRef{
		{V: stored.V + 1, Data: stored.Data},
		{V: stored.V, Data: json.RawMessage(`{}`)},
		{V: stored.V, Data: json.RawMessage(`"not an object"`)},
		{V: stored.V, Data: json.RawMessage(`{"file_id":"","media_id":"../x","url":"https://evil.example/x"}`)},
	} {
		if m, err := codec.RehydrateMediaRef(bad); err == nil {
			t.Errorf("RehydrateMediaRef(%+v) accepted it as %+v", bad, m)
		}
	}
	return m
}
