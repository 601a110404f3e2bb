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
	"sync"
	"sync/atomic"
)

// Sent is an accepted send.
type Sent struct {
	// Action is send-message, send-image or send-file.
	Action string
	// JID is the recipient as the server resolved it.
	JID                  string
	Text, Path, Filename string
	// Base64 is a file sent as a data: URI instead of a path.
	Base64 string
	ID     string
}

// API is the fake server with one session.
type API struct {
	session, token string
	// Requests counts every request.
	Requests atomic.Int32

	mu sync.Mutex
	// Numbers are the phone numbers (digits) on WhatsApp; Groups the
	// groups' ids (digits) the session is in.
	Numbers map[string]bool
	Groups  map[string]bool
	// Disconnected is a session not connected to WhatsApp; Limited sends
	// answer 429.
	Disconnected bool
	Limited      int
	// Media are the bytes of media messages, by message id.
	Media map[string][]byte
	// Sent are the accepted sends; Typing the JIDs shown typing.
	Sent   []Sent
	Typing []string
	next   int
}

// New returns a fake with one session and its token, and numbers on
// WhatsApp.
func New(session, token string, numbers ...string) *API {
	f := &API{session: session, token: token, Numbers: map[string]bool{}, Groups: map[string]bool{}, Media: map[string][]byte{}}
	for _, n := range numbers {
		f.Numbers[n] = true
	}
	return f
}

// Lock guards the exported fields while the fake serves.
func (f *API) Lock() { f.mu.Lock() }

// Unlock releases Lock.
func (f *API) Unlock() { f.mu.Unlock() }

// Texts returns the texts and captions accepted for chat, in order.
func (f *API) Texts(chat string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, s := range f.Sent {
		if s.JID == resolve(chat, strings.HasSuffix(chat, "@g.us"), strings.HasSuffix(chat, "@lid")) {
			out = append(out, s.Text)
		}
	}
	return out
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

func reply(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// ServeHTTP implements http.Handler.
func (f *API) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.Requests.Add(1)
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/"), "/")
	if len(parts) < 3 || parts[0] != "api" {
		reply(w, http.StatusNotFound, map[string]any{"message": "Cannot " + r.Method + " " + r.URL.Path})
		return
	}
	bearer, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	switch {
	case !ok || bearer == "":
		reply(w, http.StatusUnauthorized, map[string]any{"message": "Token is not present. Check your header and try again"})
		return
	case parts[1] != f.session || bearer != f.token:
		reply(w, http.StatusUnauthorized, map[string]any{"error": "Check that the Session and Token are correct"})
		return
	}
	if len(parts) == 4 && parts[2] == "get-media-by-message" && r.Method == http.MethodGet {
		f.media(w, parts[3])
		return
	}
	var body map[string]any
	if len(parts) != 3 || r.Method != http.MethodPost || json.NewDecoder(r.Body).Decode(&body) != nil {
		reply(w, http.StatusNotFound, map[string]any{"message": "Cannot " + r.Method + " " + r.URL.Path})
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	jids, ok := f.check(w, body)
	if !ok {
		return
	}
	switch parts[2] {
	case "send-message", "send-image", "send-file":
		f.send(w, parts[2], jids, body)
	case "typing":
		f.Typing = append(f.Typing, jids...)
		reply(w, http.StatusOK, map[string]any{"status": "success", "response": true})
	default:
		reply(w, http.StatusNotFound, map[string]any{"message": "Cannot POST " + r.URL.Path})
	}
}

// check is the statusConnection middleware: the session must be connected,
// and each phone (not a group's or a LID) must be on WhatsApp.
func (f *API) check(w http.ResponseWriter, body map[string]any) ([]string, bool) {
	if f.Disconnected {
		reply(w, http.StatusNotFound, map[string]any{"response": nil, "status": "Disconnected", "message": "A sessão do WhatsApp não está ativa."})
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
			reply(w, http.StatusBadRequest, map[string]any{"response": nil, "status": "Connected", "message": fmt.Sprintf("O número %s não existe.", id)})
			return nil, false
		}
		jids = append(jids, jid)
	}
	return jids, true
}

func (f *API) send(w http.ResponseWriter, action string, jids []string, body map[string]any) {
	str := func(k string) string { s, _ := body[k].(string); return s }
	s := Sent{Action: action, Text: str("message"), Path: str("path"), Filename: str("filename"), Base64: str("base64")}
	if action != "send-message" {
		s.Text = str("caption")
		if s.Path == "" && s.Base64 == "" {
			reply(w, http.StatusUnauthorized, map[string]any{"message": "Sending the file is mandatory"})
			return
		}
		if s.Path != "" && !strings.HasPrefix(s.Path, "http://") && !strings.HasPrefix(s.Path, "https://") || s.Path == "" && !dataURI(s.Base64) {
			// wa-js: a path it cannot fetch, or not a data: URI ("Invalid base64!").
			reply(w, http.StatusInternalServerError, map[string]any{"status": "Error", "message": "Error sending the message.", "error": map[string]any{"erro": true, "text": "Invalid base64!"}})
			return
		}
	}
	switch {
	case len(jids) == 0:
		reply(w, http.StatusBadRequest, "Error sending message")
		return
	case action == "send-message" && s.Text == "":
		// UNVERIFIED: wa-js refuses an empty text; the server answers its catch-all.
		reply(w, http.StatusInternalServerError, map[string]any{"status": "Error", "message": "Error sending the message.", "error": map[string]any{}})
		return
	case f.Limited > 0:
		f.Limited--
		w.Header().Set("Retry-After", "6")
		reply(w, http.StatusTooManyRequests, map[string]any{"status": "error", "message": "Too many requests, please try again later."})
		return
	}
	var results []any
	for _, jid := range jids {
		f.next++
		s.JID, s.ID = jid, fmt.Sprintf("true_%s_3EB0%016X", jid, f.next)
		f.Sent = append(f.Sent, s)
		results = append(results, map[string]any{"id": s.ID, "ack": 0, "from": "5511888888888@c.us", "to": jid, "sendMsgResult": map[string]any{}})
	}
	reply(w, http.StatusCreated, map[string]any{"status": "success", "response": results, "mapper": "return"})
}

// dataURI reports whether s is data:<mime>;base64,<base64>.
func dataURI(s string) bool {
	head, data, ok := strings.Cut(s, ";base64,")
	_, err := base64.StdEncoding.DecodeString(data)
	return ok && strings.HasPrefix(head, "data:") && len(head) > len("data:") && err == nil
}

func (f *API) media(w http.ResponseWriter, id string) {
	f.mu.Lock()
	b, ok := f.Media[id]
	down := f.Disconnected
	f.mu.Unlock()
	switch {
	case down:
		reply(w, http.StatusInternalServerError, map[string]any{"status": "error", "message": "The session is not active"})
	case !ok:
		reply(w, http.StatusBadRequest, map[string]any{"status": "error", "message": "Message not found"})
	default:
		reply(w, http.StatusOK, map[string]any{"base64": base64.StdEncoding.EncodeToString(b), "mimetype": "image/jpeg"})
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
