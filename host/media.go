package host

import (
	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/internal/rules"
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
