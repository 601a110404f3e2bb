package messagingtest

import "encoding/json"

// Timestamp is the events' time, in milliseconds.
const Timestamp = 1764412800123

// Body is a webhook body of object ("page", "instagram") for the page or
// account owner, carrying the events.
func Body(object, owner string, events ...map[string]any) []byte {
	if events == nil {
		events = []map[string]any{}
	}
	b, _ := json.Marshal(map[string]any{"object": object, "entry": []any{map[string]any{
		"id": owner, "time": Timestamp, "messaging": events}}})
	return b
}

func event(sender, recipient string, key string, value map[string]any) map[string]any {
	return map[string]any{"sender": map[string]any{"id": sender}, "recipient": map[string]any{"id": recipient},
		"timestamp": Timestamp, key: value}
}

// Text is a user's text message to owner.
func Text(user, owner, mid, text string) map[string]any {
	return event(user, owner, "message", map[string]any{"mid": mid, "text": text})
}

// Media is a user's message with an attachment of type kind ("image",
// "video", "audio", "file", "sticker" as an image with a sticker_id, or one
// botrun ignores: "location", "fallback", "share", …) at url.
func Media(user, owner, mid, kind, url string) map[string]any {
	payload := map[string]any{"url": url}
	if kind == "sticker" {
		kind, payload["sticker_id"] = "image", 369239263222822
	}
	return event(user, owner, "message", map[string]any{"mid": mid,
		"attachments": []any{map[string]any{"type": kind, "payload": payload}}})
}

// QuickReplyPress is the press of a quick reply: its title as the text and its
// payload; replyTo, when set, is the message the user replied to.
func QuickReplyPress(user, owner, mid, title, payload, replyTo string) map[string]any {
	m := map[string]any{"mid": mid, "text": title, "quick_reply": map[string]any{"payload": payload}}
	if replyTo != "" {
		m["reply_to"] = map[string]any{"mid": replyTo}
	}
	return event(user, owner, "message", m)
}

// PostbackPress is the press of a postback button (mid may be empty, as in older
// API versions).
func PostbackPress(user, owner, mid, title, payload string) map[string]any {
	pb := map[string]any{"title": title, "payload": payload}
	if mid != "" {
		pb["mid"] = mid
	}
	return event(user, owner, "postback", pb)
}

// Echo is the echo of a message the page or account sent to user.
func Echo(owner, user, mid, text string) map[string]any {
	return event(owner, user, "message", map[string]any{"mid": mid, "text": text, "is_echo": true, "app_id": 1517776481860111})
}

// Delivery is a delivery receipt, Read a read receipt, Reaction a user's
// reaction to a message: events botrun ignores.
func Delivery(user, owner string, mids ...string) map[string]any {
	return event(user, owner, "delivery", map[string]any{"mids": mids, "watermark": Timestamp})
}

// Read is a read receipt.
func Read(user, owner string) map[string]any {
	return event(user, owner, "read", map[string]any{"watermark": Timestamp})
}

// Reaction is a user's reaction to a message.
func Reaction(user, owner, mid string) map[string]any {
	return event(user, owner, "reaction", map[string]any{"mid": mid, "action": "react", "reaction": "love", "emoji": "❤"})
}
