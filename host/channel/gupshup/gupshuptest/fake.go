// Package gupshuptest is a fake Gupshup WhatsApp API for tests: it speaks the
// real wire format (the form of POST /wa/api/v1/msg with its JSON message,
// the apikey header, {"status":"error","message"} answers), checks the api
// key, the app and its number, and rejects what the real API rejects. It
// serves media as Gupshup's file manager does, and builds webhook bodies.
//
// The real API refuses a malformed destination at once and reports a number
// that is not on WhatsApp later, by a message-event; the fake refuses every
// destination outside Recipients at once, with the same answer.
package gupshuptest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/botrun/botrun/host/channel/internal/fakekit"
)

// API is the fake API of one app and its WhatsApp number.
type API struct {
	key, app, source string

	// Kit: Limited sends answer 429 with Retry-After: 3; Media are served
	// at MediaURL by name; Sent are the accepted sends' message objects,
	// with "destination".
	fakekit.Kit[map[string]any]
	// Recipients can be messaged.
	Recipients map[string]bool
}

// New returns a fake for the app app_name with number source and api key,
// which can message recipients.
func New(key, app, source string, recipients ...string) *API {
	f := &API{key: key, app: app, source: source, Recipients: fakekit.Set(recipients...)}
	f.MediaStore()
	return f
}

// Texts returns what the user reads of the accepted sends to destination:
// a text's text, a media's caption, a quick_reply's or a list's body.
func (f *API) Texts(destination string) []string {
	return f.Collect(func(m map[string]any) (string, bool) {
		if m["destination"] != destination {
			return "", false
		}
		switch m["type"] {
		case "text":
			return str(m["text"]), true
		case "quick_reply":
			c, _ := m["content"].(map[string]any)
			return str(c["text"]) + str(c["caption"]), true
		case "list":
			return str(m["body"]), true
		}
		return str(m["caption"]), true
	})
}

func str(v any) string { s, _ := v.(string); return s }

// MediaURL is the URL of a media file on the fake at base, shaped as
// Gupshup's file manager's.
func (f *API) MediaURL(base, name string) string {
	return base + "/fm/wamedia/" + f.app + "/" + name + "?fileName="
}

func fail(w http.ResponseWriter, status int, msg string) {
	fakekit.JSON(w, status, map[string]any{"status": "error", "message": msg})
}

// ServeHTTP implements http.Handler.
func (f *API) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/fm/wamedia/"+f.app+"/"):
		f.ServeMedia(w, r, strings.TrimPrefix(r.URL.Path, "/fm/wamedia/"+f.app+"/"), "image/jpeg")
	case r.URL.Path == "/wa/api/v1/msg" && r.Method == http.MethodPost:
		f.send(w, r)
	default:
		fail(w, http.StatusNotFound, "Not Found")
	}
}

var (
	number = regexp.MustCompile(`^[0-9]{8,15}$`)
	link   = regexp.MustCompile(`^https?://[^/\s]+/\S*$`)
)

func (f *API) send(w http.ResponseWriter, r *http.Request) {
	if !fakekit.HeaderIs(r, "apikey", f.key) {
		fail(w, http.StatusUnauthorized, "Portal User Not Found With APIKey")
		return
	}
	if !strings.HasPrefix(r.Header.Get("Content-Type"), "application/x-www-form-urlencoded") {
		fail(w, http.StatusBadRequest, "Invalid Request: Content-Type must be application/x-www-form-urlencoded")
		return
	}
	if err := r.ParseForm(); err != nil {
		fail(w, http.StatusBadRequest, "Invalid Request")
		return
	}
	form := r.PostForm
	dest := form.Get("destination")
	var m map[string]any
	if err := json.Unmarshal([]byte(form.Get("message")), &m); err != nil {
		fail(w, http.StatusBadRequest, "Invalid Message")
		return
	}
	f.Lock()
	defer f.Unlock()
	switch {
	case form.Get("channel") != "whatsapp":
		fail(w, http.StatusBadRequest, "Invalid Channel")
	case form.Get("source") != f.source || form.Get("src.name") != f.app:
		fail(w, http.StatusBadRequest, "Invalid App Details")
	case !number.MatchString(dest) || !f.Recipients[dest]:
		fail(w, http.StatusBadRequest, "Invalid Destination")
	case invalid(m) != "":
		fail(w, http.StatusBadRequest, invalid(m))
	case f.RateLimited():
		w.Header().Set("Retry-After", "3")
		fail(w, http.StatusTooManyRequests, "Too Many Requests")
	default:
		m["destination"] = dest
		n := f.Record(m)
		fakekit.JSON(w, http.StatusAccepted, map[string]any{"status": "submitted", "messageId": fmt.Sprintf("ee4a68a0-1203-4c85-8dc3-%012d", n)})
	}
}

// invalid is what the API says of a message object it refuses, or "".
func invalid(m map[string]any) string {
	long := func(v any, max int) bool { return utf8.RuneCountInString(str(v)) > max }
	empty := func(v any) bool { return strings.TrimSpace(str(v)) == "" }
	switch m["type"] {
	case "text":
		switch {
		case empty(m["text"]):
			return "Message text is empty"
		case long(m["text"], 4096):
			return "Message text is too long"
		}
	case "image":
		if !link.MatchString(str(m["originalUrl"])) || !link.MatchString(str(m["previewUrl"])) {
			return "Invalid image url"
		}
	case "video", "audio", "sticker", "file":
		if !link.MatchString(str(m["url"])) {
			return "Invalid media url"
		}
		if m["type"] == "file" && empty(m["filename"]) {
			return "Invalid filename"
		}
	case "quick_reply":
		c, _ := m["content"].(map[string]any)
		opts, _ := m["options"].([]any)
		switch {
		case c == nil || (empty(c["text"]) && empty(c["caption"])):
			return "Invalid content"
		case len(opts) == 0 || len(opts) > 3:
			return "Invalid options: 1 to 3"
		}
		for _, o := range opts {
			if o, _ := o.(map[string]any); empty(o["title"]) || long(o["title"], 20) {
				return "Invalid option title"
			}
		}
	case "list":
		items, _ := m["items"].([]any)
		buttons, _ := m["globalButtons"].([]any)
		rows := 0
		for _, it := range items {
			it, _ := it.(map[string]any)
			opts, _ := it["options"].([]any)
			rows += len(opts)
		}
		switch {
		case empty(m["body"]):
			return "Invalid body"
		case len(buttons) != 1:
			return "Invalid globalButtons"
		case rows == 0 || rows > 10:
			return "Invalid items: 1 to 10 options"
		}
	default:
		return "Invalid message type"
	}
	if long(m["caption"], 1024) {
		return "Caption is too long"
	}
	return ""
}

// Event is a webhook body of type typ for the app with payload.
func (f *API) Event(typ string, payload map[string]any) []byte {
	b, _ := json.Marshal(map[string]any{"app": f.app, "timestamp": 1764412800000, "version": 2, "type": typ, "payload": payload})
	return b
}

// Message is the payload of an inbound message of type typ from the user
// (digits) with its own payload.
func Message(id, user, typ string, payload map[string]any) map[string]any {
	return map[string]any{"id": id, "source": user, "type": typ, "payload": payload,
		"sender": map[string]any{"phone": user, "name": "Ana", "country_code": user[:2], "dial_code": user[2:]}}
}

// Text is the webhook body of a text from user.
func (f *API) Text(id, user, text string) []byte {
	return f.Event("message", Message(id, user, "text", map[string]any{"text": text}))
}

// Image is the webhook body of an image at mediaURL from user.
func (f *API) Image(id, user, mediaURL, caption string) []byte {
	return f.Event("message", Message(id, user, "image", map[string]any{"url": mediaURL, "caption": caption,
		"contentType": "image/jpeg", "urlExpiry": 1764499200000}))
}

// Reply is the webhook body of the press of a button (typ "button_reply")
// or a list row ("list_reply") sent with postbackText id, on the message
// Gupshup knows as gsID.
func (f *API) Reply(msgID, user, typ, id, title, gsID string) []byte {
	m := Message(msgID, user, typ, map[string]any{"title": title, "id": "auto-1", "reply": title + " 1", "postbackText": id})
	m["context"] = map[string]any{"id": "gBGGFlA5FpafAgkOuJbRq54qwbM", "gsId": gsID}
	return f.Event("message", m)
}

// Status is the webhook body of a delivery status of a sent message.
func (f *API) Status(gsID, user, status string) []byte {
	return f.Event("message-event", map[string]any{"id": gsID, "gsId": gsID, "type": status, "destination": user,
		"payload": map[string]any{"ts": 1764412801}})
}

// WebhookURL is the callback URL of the provider id at base with token.
func WebhookURL(base, id, token string) string {
	return base + "/webhooks/" + id + "?token=" + url.QueryEscape(token)
}
