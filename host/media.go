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
