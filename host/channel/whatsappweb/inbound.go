package whatsappweb

import "go.mau.fi/whatsmeow/types/events"

// seen notes a journaled message: its chat is on WhatsApp, and it waits to
// be marked read.
func (p *Provider) seen(e *events.Message) {
	chat := e.Info.Chat.ToNonAD()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.onWhatsApp[chat.String()] = chat
	if len(p.unread) > 10000 {
		clear(p.unread) // chats the bot never answers: their receipts are not worth the memory
	}
	u := append(p.unread[chat.String()], unreadMessage{id: e.Info.ID, sender: e.Info.Sender.ToNonAD()})
	if len(u) > 100 {
		u = u[len(u)-100:]
	}
	p.unread[chat.String()] = u
}
