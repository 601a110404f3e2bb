// Package tiktoktest is a fake TikTok Business Messaging API for tests: it
// speaks the real wire format (JSON POSTs with the Access-Token header,
// HTTP 200 answers carrying {"code","message","request_id","data"}), checks
// the token and the business, refuses what the real API refuses with its
// codes (40105 a bad token, 40002 bad parameters, 40100 a rate limit),
// serves media/download and the CDN URLs it hands out, and builds signed
// webhook bodies.
package tiktoktest

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/botrun/botrun/host/channel/internal/fakekit"
)

// The API's paths, as TikTok serves them below /open_api/v1.3.
const (
	sendPath     = "/business/message/send/"
	downloadPath = "/business/message/media/download/"
)

// TikTok's answer codes (every answer is HTTP 200).
const (
	codeBadParameters = 40002
	codeRateLimited   = 40100
	codeBadToken      = 40105
)

// ReceiveEvent is the event of a message a user sent the business.
const ReceiveEvent = "im_receive_msg"

// Sign is the Tiktok-Signature header TikTok sends with body at unix time
// t: "t=<t>,s=<hex HMAC-SHA256 of "<t>.<body>" keyed with secret>".
func Sign(secret string, t int64, body []byte) string {
	ts := strconv.FormatInt(t, 10)
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(ts + "."))
	m.Write(body)
	return "t=" + ts + ",s=" + hex.EncodeToString(m.Sum(nil))
}

// CDNPath is where the fake serves media bytes; a download_url points
// there.
const CDNPath = "/cdn/"

// API is the fake API of one Business Account.
type API struct {
	token, business string

	// Kit: Limited sends answer code 40100; Media are the bytes of inbound
	// media by media_id (served through media/download) and of uploads the
	// bot may send; Sent are the accepted sends' bodies.
	fakekit.Kit[map[string]any]
	// Conversations can be messaged.
	Conversations map[string]bool
}

// New returns a fake for the business with the access token, which can
// message conversations.
func New(token, business string, conversations ...string) *API {
	f := &API{token: token, business: business, Conversations: fakekit.Set(conversations...)}
	f.MediaStore()
	return f
}

// Texts returns the text bodies of the accepted sends to conversation.
func (f *API) Texts(conversation string) []string {
	return f.Collect(func(m map[string]any) (string, bool) {
		t, _ := m["text"].(map[string]any)
		s, _ := t["body"].(string)
		return s, m["recipient"] == conversation && m["message_type"] == "TEXT"
	})
}

func answer(w http.ResponseWriter, code int, msg string, data any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{"code": code, "message": msg, "request_id": "202501010000000000", "data": data})
}

// ServeHTTP implements http.Handler.
func (f *API) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, CDNPath):
		f.ServeMedia(w, r, strings.TrimPrefix(r.URL.Path, CDNPath), "image/jpeg")
		return
	case r.Method != http.MethodPost || (r.URL.Path != sendPath && r.URL.Path != downloadPath):
		w.WriteHeader(http.StatusNotFound)
		answer(w, 40400, "Not Found", nil)
		return
	}
	var body map[string]any
	if !fakekit.HeaderIs(r, "Access-Token", f.token) {
		answer(w, codeBadToken, "Access token is incorrect or has been revoked.", nil)
		return
	}
	if !strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") || json.NewDecoder(r.Body).Decode(&body) != nil {
		answer(w, codeBadParameters, "Invalid request body", nil)
		return
	}
	if body["business_id"] != f.business {
		answer(w, codeBadParameters, "business_id: no permission", nil)
		return
	}
	f.Lock()
	defer f.Unlock()
	if r.URL.Path == downloadPath {
		f.download(w, r, body)
		return
	}
	switch bad := f.invalid(body); {
	case bad != "":
		answer(w, codeBadParameters, bad, nil)
	case f.RateLimited():
		answer(w, codeRateLimited, "Too many requests", nil)
	default:
		n := f.Record(body)
		answer(w, 0, "OK", map[string]any{"message": map[string]any{"message_id": fmt.Sprintf("msg_%016d", n)}})
	}
}

func str(v any) string { s, _ := v.(string); return s }

// invalid is what the API says of a send it refuses, or "".
func (f *API) invalid(m map[string]any) string {
	switch {
	case m["recipient_type"] != "CONVERSATION":
		return "recipient_type: want CONVERSATION"
	case !f.Conversations[str(m["recipient"])]:
		return "recipient: conversation not found"
	}
	switch m["message_type"] {
	case "TEXT":
		t, _ := m["text"].(map[string]any)
		switch body := str(t["body"]); {
		case strings.TrimSpace(body) == "":
			return "text.body: empty"
		case utf8.RuneCountInString(body) > 6000:
			return "text.body: over 6000 characters"
		}
	case "IMAGE":
		img, _ := m["image"].(map[string]any)
		if _, ok := f.Media[str(img["media_id"])]; !ok {
			return "image.media_id: not found"
		}
	default:
		return "message_type: invalid"
	}
	return ""
}

func (f *API) download(w http.ResponseWriter, r *http.Request, m map[string]any) {
	id := str(m["media_id"])
	if _, ok := f.Media[id]; !ok || str(m["conversation_id"]) == "" || str(m["message_id"]) == "" || m["media_type"] != "IMAGE" {
		answer(w, codeBadParameters, "media not found", nil)
		return
	}
	answer(w, 0, "OK", map[string]any{"download_url": "http://" + r.Host + CDNPath + id})
}

// Webhook is a webhook body of event whose content is the JSON string of
// content.
func Webhook(event, user string, content map[string]any) []byte {
	c, _ := json.Marshal(content)
	b, _ := json.Marshal(map[string]any{"client_key": "aw0123456789", "event": event, "create_time": 1764412800,
		"user_openid": user, "content": string(c)})
	return b
}

// Content is a received message's content of type typ in conversation
// from user, with its own fields (text, image, sticker).
func Content(msgID, conversation, user, typ string, fields map[string]any) map[string]any {
	c := map[string]any{"conversation_id": conversation, "message_id": msgID, "timestamp": 1764412800123, "type": typ,
		"from": "user", "from_user": map[string]any{"id": user, "role": "personal_account"}, "to": "business",
		"to_user": map[string]any{"id": "business-1", "role": "business_account"}}
	for k, v := range fields {
		c[k] = v
	}
	return c
}

// Text is the webhook body of a text from user.
func Text(msgID, conversation, user, text string) []byte {
	return Webhook(ReceiveEvent, user, Content(msgID, conversation, user, "text", map[string]any{"text": map[string]any{"body": text}}))
}

// Image is the webhook body of an image from user, media_id mediaID.
func Image(msgID, conversation, user, mediaID string) []byte {
	return Webhook(ReceiveEvent, user, Content(msgID, conversation, user, "image", map[string]any{"image": map[string]any{"media_id": mediaID}}))
}

// Sticker is the webhook body of a sticker from user at url.
func Sticker(msgID, conversation, user, url string) []byte {
	return Webhook(ReceiveEvent, user, Content(msgID, conversation, user, "sticker", map[string]any{"sticker": map[string]any{"url": url}}))
}

// CDNURL is the URL of a media's bytes on the fake at base.
func CDNURL(base, mediaID string) string { return base + CDNPath + mediaID }

// Request is a webhook request to base for provider id, signed with
// secret now.
func Request(base, id, secret string, body []byte) *http.Request {
	r, _ := http.NewRequest("POST", base+"/webhooks/"+id, strings.NewReader(string(body)))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Tiktok-Signature", Sign(secret, time.Now().Unix(), body))
	return r
}
