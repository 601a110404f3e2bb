package host

import (
	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/host/provider"
)

// journaled is the inbox payload: the event as the guest will see it, plus the
// durable media references the provider serialized (durability.inbox.media_refs).
type journaled struct {
	abi.Event
	DurableMedia []*durableMedia `json:"durable_media,omitempty"`
}

// durableMedia is one serialized media reference, or why there is none.
type durableMedia struct {
	Provider string              `json:"provider"`
	Stored   *provider.StoredRef `json:"stored,omitempty"`
	// Reason is set when the media has no durable reference: "not-durable".
	Reason string `json:"reason,omitempty"`
}

// serializeMedia replaces live media tokens by the provider's durable
// references before the event is journaled. Providers without a codec, or
// media_refs = false, journal the tokens as they are.
func (b *Bot) serializeMedia(providerID string, j *journaled) {
	codec, ok := b.providers[providerID].(provider.MediaRefCodec)
	if !ok || !b.mediaRefs || len(j.Media) == 0 {
		return
	}
	j.DurableMedia = make([]*durableMedia, len(j.Media))
	for i, m := range j.Media {
		stored, ok := codec.SerializeMediaRef(provider.Media{Type: m.Type, Ref: m.Ref, URL: m.URL, MIME: m.MIME, Caption: m.Caption})
		d := &durableMedia{Provider: providerID}
		if ok {
			d.Stored = &stored
		} else {
			d.Reason = "not-durable"
		}
		j.DurableMedia[i] = d
		j.Media[i].Ref, j.Media[i].URL = "", ""
	}
}

// rehydrateMedia rebuilds the references of a journaled event before its
// handler runs. A reference that cannot be rebuilt leaves that media without a
// ref (its download fails); the message is processed all the same.
func (b *Bot) rehydrateMedia(recProvider string, j *journaled) {
	for i, d := range j.DurableMedia {
		if d == nil || d.Stored == nil || i >= len(j.Media) {
			continue
		}
		codec, ok := b.providers[d.Provider].(provider.MediaRefCodec)
		if !ok || d.Provider != recProvider {
			b.log.Warn("media reference unavailable", "event", j.ID, "reason", "provider-mismatch")
			continue
		}
		m, err := codec.RehydrateMediaRef(*d.Stored)
		if err != nil {
			b.log.Warn("media reference unavailable", "event", j.ID, "reason", "rehydrate-failed", "err", err)
			continue
		}
		j.Media[i].Ref, j.Media[i].URL = m.Ref, m.URL
	}
}
