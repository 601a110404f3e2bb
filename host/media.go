package host

import (
	"context"
	"errors"
	"fmt"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/inputs"
	"github.com/botrun/botrun/host/internal/rules"
	"github.com/botrun/botrun/host/wasm"
)

// serializeMedia replaces live media tokens by the provider's durable
// references before the event is journaled. Providers without a codec, or
// media_refs = false, journal the tokens as they are.
func (b *Bot) serializeMedia(providerID string, j *rules.Journaled) {
	codec, ok := b.providers[providerID].(channel.MediaRefCodec)
	if !ok || !b.mediaRefs || len(j.Media) == 0 {
		return
	}
	j.Media = append([]abi.Media(nil), j.Media...) // the caller keeps the live refs
	j.DurableMedia = make([]*rules.DurableMedia, len(j.Media))
	for i, m := range j.Media {
		stored, ok := codec.SerializeMediaRef(channel.Media{Type: m.Type, Ref: m.Ref, URL: m.URL, MIME: m.MIME, Caption: m.Caption})
		d := &rules.DurableMedia{Provider: providerID}
		if ok {
			d.Stored = &stored
		} else {
			d.Reason = "not-durable"
		}
		j.DurableMedia[i] = d
		j.Media[i].Ref, j.Media[i].URL = "", ""
	}
}

// useLiveMedia gives the first run, in the process that admitted the message,
// the channel's own references: media that could not be made durable still
// download live. Codecs rebuild the same references, so replays see the same
// event.
func useLiveMedia(j *rules.Journaled, live []abi.Media) bool {
	if len(live) == 0 || len(live) != len(j.Media) {
		return false
	}
	for i := range j.Media {
		j.Media[i].Ref, j.Media[i].URL = live[i].Ref, live[i].URL
	}
	return true
}

// rehydrateMedia rebuilds the references of a journaled event before its
// handler runs, and returns for each media why it is unavailable ("" when it
// is not). A reference that cannot be rebuilt leaves that media without a ref
// (media_load fails with the reason); the message is processed all the same.
func (b *Bot) rehydrateMedia(recProvider string, j *rules.Journaled) []string {
	if len(j.DurableMedia) == 0 {
		return nil
	}
	reasons := make([]string, len(j.Media))
	for i, d := range j.DurableMedia {
		if d == nil || i >= len(j.Media) {
			continue
		}
		if d.Stored == nil {
			reasons[i] = abi.MediaNotDurable
			continue
		}
		codec, ok := b.providers[d.Provider].(channel.MediaRefCodec)
		if !ok || d.Provider != recProvider {
			reasons[i] = abi.MediaProviderMismatch
			b.log.Warn("media reference unavailable", "event", j.ID, "reason", reasons[i], "stored_by", d.Provider)
			continue
		}
		m, err := codec.RehydrateMediaRef(*d.Stored)
		if err != nil {
			reasons[i] = abi.MediaRehydrateFailed
			b.log.Warn("media reference unavailable", "event", j.ID, "reason", reasons[i], "err", err)
			continue
		}
		j.Media[i].Ref, j.Media[i].URL = m.Ref, m.URL
	}
	return reasons
}

// mediaLoad is one media_load answer kept for the rest of the event: the
// bytes, or a final error.
type mediaLoad struct {
	b   []byte
	err error
}

// LoadMedia implements wasm.Env: the bytes of the event's media[index],
// downloaded by its provider once per event (a second load of the same index
// is answered from the first). A permanent download failure is a
// rehydrate-failed MediaUnavailableError; a transient one fails the attempt,
// which is retried.
func (t *turn) LoadMedia(ctx context.Context, index int) ([]byte, error) {
	if index < 0 || index >= len(t.event.Media) {
		return nil, wasm.ErrNoMedia
	}
	if index < len(t.mediaReasons) && t.mediaReasons[index] != "" {
		t.inputs.MediaUnavailable(index, t.mediaReasons[index], "", "")
		return nil, &abi.MediaUnavailableError{Reason: t.mediaReasons[index]}
	}
	if r, ok := t.media[index]; ok {
		return r.b, r.err
	}
	loader, ok := t.providers[t.event.Provider].(channel.MediaLoader)
	if !ok {
		t.inputs.MediaUnavailable(index, "", "", inputs.ErrUnsupported)
		return nil, fmt.Errorf("provider %q cannot download media: %w", t.event.Provider, wasm.ErrUnsupported)
	}
	m := t.event.Media[index]
	b, err := loader.LoadMedia(ctx, channel.Media{Type: m.Type, Ref: m.Ref, URL: m.URL, MIME: m.MIME}, abi.MaxMedia)
	var r mediaLoad
	switch {
	case err == nil:
		r.b = b
		t.inputs.Media(index, b)
	case errors.Is(err, channel.ErrMediaTooLarge):
		r.err = fmt.Errorf("media %d of %s: %w", index, t.event.ID, wasm.ErrMediaTooLarge)
		t.inputs.MediaUnavailable(index, "", "", inputs.ErrTooLarge)
	case channel.MediaGone(err):
		r.err = &abi.MediaUnavailableError{Reason: abi.MediaRehydrateFailed, Message: err.Error()}
		t.inputs.MediaUnavailable(index, abi.MediaRehydrateFailed, err.Error(), "")
	default:
		// Transient: not kept, so a retry in this event downloads again.
		return nil, fmt.Errorf("downloading media %d of %s: %w", index, t.event.ID, err)
	}
	if t.media == nil {
		t.media = map[int]mediaLoad{}
	}
	t.media[index] = r
	return r.b, r.err
}
