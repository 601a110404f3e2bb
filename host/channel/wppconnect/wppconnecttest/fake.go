// Package wppconnecttest is a fake WPPConnect server for tests: it speaks
// the real wire format, checks the session and its Bearer token, and
// rejects what the real server rejects with its own bodies: a bad token
// (401), a disconnected session (404 "Disconnected"), a number without
// WhatsApp (400 from the number check, status "Connected"), a file send
// without a file (401, as the server does), a message it cannot send (500),
// a rate limit (429). It answers get-media-by-message for the media it
// holds, records typing, and builds the webhook bodies WPPConnect posts.
package wppconnecttest

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"

	"github.com/botrun/botrun/host/channel/internal/fakekit"
	"github.com/botrun/botrun/host/channel/internal/gateway/gatewaytest"
)

// API is the fake server with one session, and the WhatsApp account it is
// connected to (Disconnected: a session to scan the QR code of).
type API struct {
	*gatewaytest.Account
	session, token string
	// Typing are the JIDs shown typing (under Lock).
	Typing []string
}

// New returns a fake with one session and its token, and numbers on
// WhatsApp.
func New(session, token string, numbers ...string) *API {
	return &API{Account: gatewaytest.NewAccount(numbers...), session: session, token: token}
}

// Texts returns the texts and captions accepted for chat, in order.
func (f *API) Texts(chat string) []string {
	return f.TextsTo(resolve(chat, strings.HasSuffix(chat, "@g.us"), strings.HasSuffix(chat, "@lid")))
}

var nonWord = regexp.MustCompile(`[^\w ]`)

// resolve is contactToArray's JID for one phone.
func resolve(phone string, group, lid bool) string {
	id, _, _ := strings.Cut(phone, "@")
	switch {
	case group:
		return id + "@g.us"
	case lid || len(nonWord.ReplaceAllString(id, "")) > 14:
		return nonWord.ReplaceAllString(id, "") + "@lid"
	}
	return nonWord.ReplaceAllString(id, "") + "@c.us"
}

// ServeHTTP implements http.Handler.
func (f *API) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.Requests.Add(1)
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/"), "/")
	if len(parts) < 3 || parts[0] != "api" {
		fakekit.JSON(w, http.StatusNotFound, map[string]any{"message": "Cannot " + r.Method + " " + r.URL.Path})
		return
	}
	bearer, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	switch {
	case !ok || bearer == "":
		fakekit.JSON(w, http.StatusUnauthorized, map[string]any{"message": "Token is not present. Check your header and try again"})
		return
	case parts[1] != f.session || bearer != f.token:
		fakekit.JSON(w, http.StatusUnauthorized, map[string]any{"error": "Check that the Session and Token are correct"})
		return
	}
	if len(parts) == 4 && parts[2] == "get-media-by-message" && r.Method == http.MethodGet {
		f.media(w, parts[3])
		return
	}
	var body map[string]any
	if len(parts) != 3 || r.Method != http.MethodPost || json.NewDecoder(r.Body).Decode(&body) != nil {
		fakekit.JSON(w, http.StatusNotFound, map[string]any{"message": "Cannot " + r.Method + " " + r.URL.Path})
		return
	}
	f.Lock()
	defer f.Unlock()
	jids, ok := f.check(w, body)
	if !ok {
		return
	}
	switch parts[2] {
	case "send-message", "send-image", "send-file":
		f.send(w, parts[2], jids, body)
	case "typing":
		f.Typing = append(f.Typing, jids...)
		fakekit.JSON(w, http.StatusOK, map[string]any{"status": "success", "response": true})
	default:
		fakekit.JSON(w, http.StatusNotFound, map[string]any{"message": "Cannot POST " + r.URL.Path})
	}
}

// check is the statusConnection middleware: the session must be connected,
// and each phone (not a group's or a LID) must be on WhatsApp.
func (f *API) check(w http.ResponseWriter, body map[string]any) ([]string, bool) {
	if f.Disconnected {
		fakekit.JSON(w, http.StatusNotFound, map[string]any{"response": nil, "status": "Disconnected", "message": "A sessão do WhatsApp não está ativa."})
		return nil, false
	}
	group, _ := body["isGroup"].(bool)
	lid, _ := body["isLid"].(bool)
	var phones []string
	switch p := body["phone"].(type) {
	case string:
		phones = regexp.MustCompile(`\s*[,;]\s*`).Split(p, -1)
	case []any:
		for _, x := range p {
			s, _ := x.(string)
			phones = append(phones, s)
		}
	}
	var jids []string
	for _, phone := range phones {
		if phone == "" {
			continue
		}
		jid := resolve(phone, group, lid)
		id, _, _ := strings.Cut(jid, "@")
		if (group && !f.Groups[id]) || (!group && !strings.HasSuffix(jid, "@lid") && !f.Numbers[id]) {
			fakekit.JSON(w, http.StatusBadRequest, map[string]any{"response": nil, "status": "Connected", "message": fmt.Sprintf("O número %s não existe.", id)})
			return nil, false
		}
		jids = append(jids, jid)
	}
	return jids, true
}

func (f *API) send(w http.ResponseWriter, action string, jids []string, body map[string]any) {
	str := func(k string) string { s, _ := body[k].(string); return s }
	s := gatewaytest.Sent{Endpoint: action, Text: str("message")}
	if action != "send-message" {
		s.Kind, s.Text, s.Media, s.FileName = strings.TrimPrefix(action, "send-"), str("caption"), str("path"), str("filename")
		if s.Media == "" {
			s.Media = str("base64")
		}
		switch {
		case s.Media == "":
			fakekit.JSON(w, http.StatusUnauthorized, map[string]any{"message": "Sending the file is mandatory"})
			return
		case !strings.HasPrefix(s.Media, "http://") && !strings.HasPrefix(s.Media, "https://") && !dataURI(s.Media):
			// wa-js: a path it cannot fetch, or not a data: URI ("Invalid base64!").
			fakekit.JSON(w, http.StatusInternalServerError, map[string]any{"status": "Error", "message": "Error sending the message.", "error": map[string]any{"erro": true, "text": "Invalid base64!"}})
			return
		}
	}
	switch {
	case len(jids) == 0:
		fakekit.JSON(w, http.StatusBadRequest, "Error sending message")
		return
	case action == "send-message" && s.Text == "":
		// UNVERIFIED: wa-js refuses an empty text; the server answers its catch-all.
		fakekit.JSON(w, http.StatusInternalServerError, map[string]any{"status": "Error", "message": "Error sending the message.", "error": map[string]any{}})
		return
	case f.Limited > 0:
		f.Limited--
		w.Header().Set("Retry-After", "6")
		fakekit.JSON(w, http.StatusTooManyRequests, map[string]any{"status": "error", "message": "Too many requests, please try again later."})
		return
	}
	var results []any
	for _, jid := range jids {
		s.To = jid
		s := f.Record(s, func(n int) string { return fmt.Sprintf("true_%s_3EB0%016X", jid, n) })
		results = append(results, map[string]any{"id": s.ID, "ack": 0, "from": "5511888888888@c.us", "to": jid, "sendMsgResult": map[string]any{}})
	}
	fakekit.JSON(w, http.StatusCreated, map[string]any{"status": "success", "response": results, "mapper": "return"})
}

// dataURI reports whether s is data:<mime>;base64,<base64>.
func dataURI(s string) bool {
	head, data, ok := strings.Cut(s, ";base64,")
	_, err := base64.StdEncoding.DecodeString(data)
	return ok && strings.HasPrefix(head, "data:") && len(head) > len("data:") && err == nil
}

func (f *API) media(w http.ResponseWriter, id string) {
	f.Lock()
	b, ok := f.Media[id]
	down := f.Disconnected
	f.Unlock()
	switch {
	case down:
		fakekit.JSON(w, http.StatusInternalServerError, map[string]any{"status": "error", "message": "The session is not active"})
	case !ok:
		fakekit.JSON(w, http.StatusBadRequest, map[string]any{"status": "error", "message": "Message not found"})
	default:
		fakekit.JSON(w, http.StatusOK, map[string]any{"base64": base64.StdEncoding.EncodeToString(b), "mimetype": "image/jpeg"})
	}
}

// MessageID is the serialized id of a message received from phone: the
// id WPPConnect gives it, and its media's reference.
func MessageID(phone, id string) string { return "false_" + phone + "@c.us_" + id }

// Event is a webhook body of the session: the event's name and session
// merged into fields, as WPPConnect posts it.
func (f *API) Event(event string, fields map[string]any) []byte {
	m := map[string]any{"event": event, "session": f.session}
	for k, v := range fields {
		m[k] = v
	}
	b, _ := json.Marshal(m)
	return b
}

// Text are the fields of a text message from a phone (digits).
func Text(id, phone, text string) map[string]any {
	return message(id, phone, "chat", map[string]any{"body": text})
}

// Image are the fields of an image from a phone: its body is a thumbnail
// in base64, as WhatsApp Web gives it (the whole file with autoDownload).
func Image(id, phone, caption string, thumbnail []byte) map[string]any {
	return message(id, phone, "image", map[string]any{"body": base64.StdEncoding.EncodeToString(thumbnail), "caption": caption,
		"mimetype": "image/jpeg", "isMedia": true, "size": 1234, "mediaKey": "bWVkaWEta2V5", "directPath": "/v/t62.7118-24/x.enc",
		"deprecatedMms3Url": "https://mmg.whatsapp.net/d/f/x.enc"})
}

// FromMe are the fields of a message the session sent to a phone.
func FromMe(id, phone, text string) map[string]any {
	m := message(id, phone, "chat", map[string]any{"body": text, "fromMe": true})
	m["id"] = "true_" + phone + "@c.us_" + id
	return m
}

func message(id, phone, kind string, fields map[string]any) map[string]any {
	jid := phone + "@c.us"
	m := map[string]any{"id": MessageID(phone, id), "type": kind, "t": 1764412800, "notifyName": "Ana",
		"from": jid, "to": "5511888888888@c.us", "self": "in", "ack": 1, "isNewMsg": true, "fromMe": false,
		"sender": map[string]any{"id": jid, "pushname": "Ana", "isMe": false}, "isGroupMsg": false, "chatId": jid,
		"mediaData": map[string]any{}}
	for k, v := range fields {
		m[k] = v
	}
	return m
}
