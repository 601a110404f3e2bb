// Package metawhatsapptest is a fake WhatsApp Cloud API (Graph) for tests: it
// speaks the real wire format, checks the Bearer token and rejects what the
// real API rejects, interactive messages included (button counts, title
// lengths, list rows, a missing body: HTTP 400 with the Graph error shape,
// code 131008 or 131009). It also builds webhook notifications, with
// button_reply, list_reply and quick-reply presses.
package metawhatsapptest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/botrun/botrun/host/channel/internal/fakekit"
)

// Version is the Graph version the fake serves under: api_url is
// <server URL>/<Version>.
const Version = "v21.0"

// API is the fake Graph API for one phone number.
type API struct {
	token, phoneNumberID string

	// Kit: Limited sends answer the throughput rate limit (130429); Media
	// are the downloadable media by id; Sent are the accepted sends'
	// bodies (Interactives decodes the interactive ones).
	fakekit.Kit[map[string]any]
	// Recipients can be messaged; Closed are outside the 24 h window;
	// Unreachable are not on WhatsApp.
	Recipients  map[string]bool
	Closed      map[string]bool
	Unreachable map[string]bool
	// Read are the message ids marked read (with a typing indicator).
	Read []string
}

// New returns a fake for the phone number id and token, with recipients.
func New(token, phoneNumberID string, recipients ...string) *API {
	f := &API{token: token, phoneNumberID: phoneNumberID, Recipients: fakekit.Set(recipients...),
		Closed: map[string]bool{}, Unreachable: map[string]bool{}}
	f.MediaStore()
	return f
}

// Interactives returns the interactive objects of the accepted sends to a
// recipient, in order.
func (f *API) Interactives(to string) []Interactive {
	return fakekit.Gather(&f.Kit, func(s map[string]any) (in Interactive, ok bool) {
		if ok = s["to"] == to && s["type"] == "interactive"; ok {
			b, _ := json.Marshal(s["interactive"])
			json.Unmarshal(b, &in)
		}
		return in, ok
	})
}

// Texts returns the accepted text bodies sent to a recipient.
func (f *API) Texts(to string) []string {
	return f.Collect(func(s map[string]any) (string, bool) {
		if s["to"] != to || s["type"] != "text" {
			return "", false
		}
		return s["text"].(map[string]any)["body"].(string), true
	})
}

func fail(w http.ResponseWriter, status, code int, msg string) {
	fakekit.JSON(w, status, map[string]any{"error": map[string]any{
		"message": msg, "type": "OAuthException", "code": code, "fbtrace_id": "AbCdEf",
		"error_data": map[string]any{"messaging_product": "whatsapp", "details": msg}}})
}

// ServeHTTP implements http.Handler.
func (f *API) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !fakekit.Bearer(r, f.token) {
		fail(w, 401, 190, "Invalid OAuth access token - Cannot parse access token")
		return
	}
	path, ok := strings.CutPrefix(r.URL.Path, "/"+Version+"/")
	switch {
	case strings.HasPrefix(r.URL.Path, "/download/") && r.Method == http.MethodGet:
		f.download(w, strings.TrimPrefix(r.URL.Path, "/download/"))
	case !ok:
		fail(w, 400, 2500, "Unknown path components: "+r.URL.Path)
	case path == f.phoneNumberID+"/messages" && r.Method == http.MethodPost:
		f.send(w, r)
	case r.Method == http.MethodGet && !strings.Contains(path, "/"):
		f.mediaInfo(w, r, path)
	default:
		fail(w, 400, 100, "Unsupported post request. Object with ID '"+path+"' does not exist")
	}
}

func (f *API) mediaInfo(w http.ResponseWriter, r *http.Request, id string) {
	f.Lock()
	b, ok := f.Media[id]
	f.Unlock()
	if !ok {
		fail(w, 400, 100, "Unsupported get request. Object with ID '"+id+"' does not exist")
		return
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	json.NewEncoder(w).Encode(map[string]any{"messaging_product": "whatsapp", "id": id, "mime_type": "image/jpeg",
		"file_size": len(b), "sha256": "00", "url": scheme + "://" + r.Host + "/download/" + id})
}

func (f *API) download(w http.ResponseWriter, id string) {
	f.ServeMedia(w, nil, id, "image/jpeg")
}

var mediaTypes = map[string]bool{"image": true, "document": true, "audio": true, "video": true, "sticker": true}

func (f *API) send(w http.ResponseWriter, r *http.Request) {
	if !strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
		fail(w, 400, 100, "Content-Type must be application/json")
		return
	}
	var req map[string]any
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		fail(w, 400, 100, "Invalid JSON")
		return
	}
	f.Lock()
	defer f.Unlock()
	if req["status"] != nil {
		// Mark as read, with a typing indicator: the message must be one
		// the business received.
		id, _ := req["message_id"].(string)
		switch {
		case req["messaging_product"] != "whatsapp":
			fail(w, 400, 100, "The parameter messaging_product is required.")
		case req["status"] != "read":
			fail(w, 400, 100, "Param status must be 'read'.")
		case !strings.HasPrefix(id, "wamid."):
			fail(w, 400, 100, "Invalid parameter: message_id")
		default:
			if ti, ok := req["typing_indicator"].(map[string]any); ok && ti["type"] != "text" {
				fail(w, 400, 100, "Param typing_indicator['type'] must be 'text'.")
				return
			}
			f.Read = append(f.Read, id)
			json.NewEncoder(w).Encode(map[string]any{"success": true})
		}
		return
	}
	to, _ := req["to"].(string)
	typ, _ := req["type"].(string)
	switch {
	case req["messaging_product"] != "whatsapp":
		fail(w, 400, 100, "The parameter messaging_product is required.")
		return
	case to == "":
		fail(w, 400, 100, "The parameter to is required.")
		return
	case f.RateLimited():
		fail(w, 400, 130429, "Rate limit hit")
		return
	case f.Unreachable[to]:
		fail(w, 400, 131026, "Message Undeliverable.")
		return
	case f.Closed[to]:
		fail(w, 400, 131047, "Re-engagement message: more than 24 hours have passed since the recipient last replied.")
		return
	case !f.Recipients[to]:
		fail(w, 400, 131030, "Recipient phone number not in allowed list")
		return
	}
	if typ == "text" {
		text, _ := req["text"].(map[string]any)
		body, _ := text["body"].(string)
		switch {
		case body == "":
			fail(w, 400, 100, "The parameter text['body'] is required.")
			return
		case utf8.RuneCountInString(body) > 4096:
			fail(w, 400, 100, "Param text['body'] must be at most 4096 characters long.")
			return
		}
	} else if mediaTypes[typ] {
		obj, _ := req[typ].(map[string]any)
		id, _ := obj["id"].(string)
		link, _ := obj["link"].(string)
		caption, _ := obj["caption"].(string)
		switch {
		case id == "" && link == "":
			fail(w, 400, 100, fmt.Sprintf("The parameter %s['id'] or %s['link'] is required.", typ, typ))
			return
		case utf8.RuneCountInString(caption) > 1024:
			fail(w, 400, 100, "Param caption must be at most 1024 characters long.")
			return
		}
	} else if typ == "interactive" {
		if code, msg := checkInteractive(req["interactive"]); code != 0 {
			fail(w, 400, code, msg)
			return
		}
	} else {
		fail(w, 400, 131051, "Unsupported message type")
		return
	}
	n := f.Record(req)
	json.NewEncoder(w).Encode(map[string]any{"messaging_product": "whatsapp",
		"contacts": []any{map[string]any{"input": to, "wa_id": to}},
		"messages": []any{map[string]any{"id": fmt.Sprintf("wamid.OUT%d", n)}}})
}

// Notification builds a webhook body for phoneNumberID carrying the messages
// (each a Message JSON object) and statuses.
func Notification(phoneNumberID string, messages []map[string]any, statuses []map[string]any) []byte {
	value := map[string]any{"messaging_product": "whatsapp",
		"metadata": map[string]any{"display_phone_number": "15550001111", "phone_number_id": phoneNumberID}}
	if len(messages) > 0 {
		var contacts []any
		for _, m := range messages {
			contacts = append(contacts, map[string]any{"profile": map[string]any{"name": "Ana"}, "wa_id": m["from"]})
		}
		value["contacts"], value["messages"] = contacts, messages
	}
	if len(statuses) > 0 {
		value["statuses"] = statuses
	}
	b, _ := json.Marshal(map[string]any{"object": "whatsapp_business_account", "entry": []any{map[string]any{
		"id": "102290129340398", "changes": []any{map[string]any{"field": "messages", "value": value}}}}})
	return b
}

// TextMessage is an inbound text message.
func TextMessage(from, wamid, text string) map[string]any {
	return map[string]any{"from": from, "id": wamid, "timestamp": "1764412800", "type": "text", "text": map[string]any{"body": text}}
}

// ImageMessage is an inbound image message.
func ImageMessage(from, wamid, mediaID, caption string) map[string]any {
	img := map[string]any{"id": mediaID, "mime_type": "image/jpeg", "sha256": "00"}
	if caption != "" {
		img["caption"] = caption
	}
	return map[string]any{"from": from, "id": wamid, "timestamp": "1764412800", "type": "image", "image": img}
}

// Status is a delivery status update for a sent message.
func Status(wamid, recipient, status string) map[string]any {
	return map[string]any{"id": wamid, "status": status, "timestamp": "1764412801", "recipient_id": recipient}
}
