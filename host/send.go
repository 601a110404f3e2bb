package host

import (
	"context"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/host/provider"
)

// send delivers req under key. A key already sent in this process answers
// deduped with the recorded ref instead of sending again.
func (b *Bot) send(ctx context.Context, p provider.Provider, key string, req abi.SendRequest) abi.SendResult {
	b.mu.Lock()
	ref, done := b.sent[key]
	b.mu.Unlock()
	if done {
		return abi.SendResult{Status: abi.SendDeduped, Key: key, Ref: ref}
	}
	out := provider.Outbound{Chat: req.Chat, Text: req.Text}
	if req.Media != nil {
		out.Media = &provider.Media{Type: req.Media.Type, Ref: req.Media.Ref, URL: req.Media.URL, MIME: req.Media.MIME, Caption: req.Media.Caption}
	}
	ref, err := p.Send(ctx, out)
	if err != nil {
		b.log.Error("send failed", "key", key, "provider", p.ID(), "err", err)
		return abi.SendResult{Status: abi.SendDead, Key: key, Error: err.Error()}
	}
	b.mu.Lock()
	b.sent[key] = ref
	b.mu.Unlock()
	return abi.SendResult{Status: abi.SendSent, Key: key, Ref: ref}
}
