// Package evolutiontest is a fake Evolution API server (v2) for tests: it
// speaks the real wire format, checks the apikey header and the instance,
// and rejects what the real server rejects with its error body
// {"status","error","response":{"message"}}: a bad key (401), an unknown
// instance (404), a number without WhatsApp (400 with exists:false), an
// empty text or number, a media type or source it does not take, a
// disconnected instance (400 "Connection Closed"), a rate limit (429). It
// answers getBase64FromMediaMessage for the media it holds, and builds the
// webhook bodies and JWTs Evolution sends.
package evolutiontest

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/botrun/botrun/host/channel/internal/fakekit"
	"github.com/botrun/botrun/host/channel/internal/gateway/gatewaytest"
)

// API is the fake server with one instance, and the WhatsApp account it
// is connected to (Disconnected: sends fail as Baileys' do when the socket
// is closed).
type API struct {
	*gatewaytest.Account
	key, instance string
}

// New returns a fake whose instance is named instance and whose apikey
// (the instance's token) is apiKey, with numbers on WhatsApp.
func New(apiKey, instance string, numbers ...string) *API {
	return &API{Account: gatewaytest.NewAccount(numbers...), key: apiKey, instance: instance}
}

// Texts returns the texts and captions accepted for chat (a number or a
// JID), in order.
func (f *API) Texts(chat string) []string { return f.TextsTo(number(chat)) }

// number is a chat as the server resolves it: a group's JID, or a phone's
// digits.
func number(chat string) string {
	if strings.HasSuffix(chat, "@g.us") {
		return chat
	}
	chat, _, _ = strings.Cut(chat, "@")
	return strings.Map(func(r rune) rune {
		if r >= '0' && r <= '9' {
			return r
		}
		return -1
	}, chat)
}

func fail(w http.ResponseWriter, status int, message any) {
	fakekit.JSON(w, status, map[string]any{"status": status, "error": http.StatusText(status), "response": map[string]any{"message": message}})
}

func answer(w http.ResponseWriter, v any) {
	fakekit.JSON(w, http.StatusCreated, v)
}

// ServeHTTP implements http.Handler.
func (f *API) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.Requests.Add(1)
	if !fakekit.HeaderIs(r, "apikey", f.key) {
		fail(w, http.StatusUnauthorized, "Unauthorized")
		return
	}
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/"), "/")
	if len(parts) != 3 || r.Method != http.MethodPost {
		fail(w, http.StatusNotFound, "Cannot "+r.Method+" "+r.URL.Path)
		return
	}
	if parts[2] != f.instance {
		fail(w, http.StatusNotFound, []string{fmt.Sprintf("The %q instance does not exist", parts[2])})
		return
	}
	var body map[string]any
	if !strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") || json.NewDecoder(r.Body).Decode(&body) != nil {
		fail(w, http.StatusBadRequest, []string{"the body is not JSON"})
		return
	}
	switch parts[0] + "/" + parts[1] {
	case "message/sendText":
		f.send(w, body, "text", "text")
	case "message/sendMedia":
		f.send(w, body, "media", "caption")
	case "chat/getBase64FromMediaMessage":
		f.base64(w, body)
	default:
		fail(w, http.StatusNotFound, "Cannot POST "+r.URL.Path)
	}
}

func str(body map[string]any, key string) string {
	s, _ := body[key].(string)
	return s
}

func (f *API) send(w http.ResponseWriter, body map[string]any, kind, textKey string) {
	to, text := str(body, "number"), str(body, textKey)
	s := gatewaytest.Sent{Endpoint: "sendText", To: number(to), Text: text}
	if kind == "media" {
		s.Endpoint, s.Kind, s.Media, s.MIME, s.FileName = "sendMedia", str(body, "mediatype"), str(body, "media"), str(body, "mimetype"), str(body, "fileName")
	}
	f.Lock()
	defer f.Unlock()
	switch {
	case to == "":
		fail(w, http.StatusBadRequest, []string{`instance requires property "number"`})
		return
	case kind == "text" && text == "":
		fail(w, http.StatusBadRequest, []string{`instance requires property "text"`})
		return
	case kind == "media" && s.Kind != "image" && s.Kind != "video" && s.Kind != "audio" && s.Kind != "document":
		fail(w, http.StatusBadRequest, []string{`instance.mediatype is not one of enum values: image,document,video,audio`})
		return
	case kind == "media" && !strings.HasPrefix(s.Media, "http://") && !strings.HasPrefix(s.Media, "https://") && !isBase64(s.Media):
		fail(w, http.StatusBadRequest, []string{"Owned media must be a url or base64"})
		return
	case f.Limited > 0:
		f.Limited--
		w.Header().Set("Retry-After", "4")
		fail(w, http.StatusTooManyRequests, "Too Many Requests")
		return
	case f.Disconnected:
		fail(w, http.StatusBadRequest, []string{"Error: Connection Closed"})
		return
	case strings.HasSuffix(s.To, "@g.us") && !f.Groups[strings.TrimSuffix(s.To, "@g.us")], !strings.HasSuffix(s.To, "@g.us") && !f.Numbers[s.To]:
		fail(w, http.StatusBadRequest, []any{map[string]any{"jid": s.To + "@s.whatsapp.net", "exists": false, "number": s.To}})
		return
	}
	s = f.Record(s, func(n int) string { return fmt.Sprintf("BAE5%012X", n) })
	jid := s.To
	if !strings.Contains(jid, "@") {
		jid += "@s.whatsapp.net"
	}
	answer(w, map[string]any{"key": map[string]any{"remoteJid": jid, "fromMe": true, "id": s.ID},
		"pushName": "", "status": "PENDING", "message": map[string]any{"conversation": text},
		"messageType": "conversation", "messageTimestamp": time.Now().Unix(), "instanceId": "d3b1e0f2", "source": "unknown"})
}

func isBase64(s string) bool {
	_, err := base64.StdEncoding.DecodeString(s)
	return s != "" && err == nil
}

func (f *API) base64(w http.ResponseWriter, body map[string]any) {
	msg, _ := body["message"].(map[string]any)
	key, _ := msg["key"].(map[string]any)
	id, _ := key["id"].(string)
	f.Lock()
	b, ok := f.Media[id]
	f.Unlock()
	if !ok {
		fail(w, http.StatusBadRequest, []string{"Message not found"})
		return
	}
	answer(w, map[string]any{"mediaType": "imageMessage", "fileName": id + ".jpeg", "caption": "",
		"size": map[string]any{"fileLength": len(b), "height": 0, "width": 0}, "mimetype": "image/jpeg",
		"base64": base64.StdEncoding.EncodeToString(b)})
}

// Event is a webhook body of the instance, as Evolution posts it; apikey is
// the instance's token when exposed ("" sends null).
func (f *API) Event(event, apikey string, data any) []byte {
	var key any
	if apikey != "" {
		key = apikey
	}
	b, _ := json.Marshal(map[string]any{"event": event, "instance": f.instance, "data": data,
		"destination": "https://bot.example.com/webhooks/evo", "date_time": "2025-11-29T10:00:00.000Z",
		"sender": "5511888888888@s.whatsapp.net", "server_url": "https://evolution.example.com", "apikey": key})
	return b
}

// Upsert is a messages.upsert webhook of the instance for data, with its
// token as the apikey.
func (f *API) Upsert(data map[string]any) []byte { return f.Event("messages.upsert", f.key, data) }

// Text is a messages.upsert data: a text from a phone number (digits).
func Text(id, from, text string) map[string]any {
	return message(id, from, false, "conversation", map[string]any{"conversation": text})
}

// Image is a messages.upsert data: an image with its caption, and inline,
// when not nil, as the base64 Evolution adds with webhook_base64.
func Image(id, from, caption string, inline []byte) map[string]any {
	content := map[string]any{"imageMessage": map[string]any{"url": "https://mmg.whatsapp.net/v/t62.7118-24/x.enc",
		"mimetype": "image/jpeg", "caption": caption, "fileLength": "1234", "mediaKey": "bWVkaWEta2V5",
		"directPath": "/v/t62.7118-24/x.enc", "jpegThumbnail": "/9j/4AAQSkZJRg=="}}
	if inline != nil {
		content["base64"] = base64.StdEncoding.EncodeToString(inline)
	}
	return message(id, from, false, "imageMessage", content)
}

// FromMe is a messages.upsert data of a message the instance sent to a
// phone number.
func FromMe(id, to, text string) map[string]any {
	return message(id, to, true, "conversation", map[string]any{"conversation": text})
}

func message(id, chat string, fromMe bool, kind string, content map[string]any) map[string]any {
	jid := chat
	if !strings.Contains(jid, "@") {
		jid += "@s.whatsapp.net"
	}
	return map[string]any{"key": map[string]any{"remoteJid": jid, "fromMe": fromMe, "id": id},
		"pushName": "Ana", "status": "DELIVERY_ACK", "message": content, "messageType": kind,
		"messageTimestamp": 1764412800, "instanceId": "d3b1e0f2", "source": "android"}
}

// JWT is the token Evolution puts in a webhook's Authorization header when
// the instance's webhook headers hold jwt_key: HS256, iat now, exp 10
// minutes later, app "evolution", action "webhook".
func JWT(key string, now time.Time) string {
	enc := base64.RawURLEncoding.EncodeToString
	head := enc([]byte(`{"alg":"HS256","typ":"JWT"}`))
	claims, _ := json.Marshal(map[string]any{"iat": now.Unix(), "exp": now.Unix() + 600, "app": "evolution", "action": "webhook"})
	signed := head + "." + enc(claims)
	mac := hmac.New(sha256.New, []byte(key))
	mac.Write([]byte(signed))
	return signed + "." + enc(mac.Sum(nil))
}
