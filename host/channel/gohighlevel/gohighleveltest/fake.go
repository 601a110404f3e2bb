// Package gohighleveltest is a fake GoHighLevel Conversations API for tests:
// it speaks the real wire format (POST /conversations/messages with a Bearer
// token and the Version header, {"statusCode","message"} answers), checks
// the token, the version and the location's contacts, enforces 100 requests
// per 10 seconds, and rejects what the real API rejects. It serves
// attachments as GoHighLevel's storage does, and signs webhooks with a key
// of its own (GoHighLevel's private key is GoHighLevel's).
package gohighleveltest

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/botrun/botrun/host/channel/internal/fakekit"
)

// key is the fake's webhook signing key, made once per process (an RSA key
// takes a while).
var key = sync.OnceValue(func() *rsa.PrivateKey {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		panic(err)
	}
	return k
})

// PublicKey is the PEM of the key the fake signs webhooks with: the
// public_key of a channel that talks to it.
func PublicKey() string {
	der, err := x509.MarshalPKIXPublicKey(&key().PublicKey)
	if err != nil {
		panic(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
}

// Sign returns the x-wh-signature of body: base64 of its RSA-SHA256
// signature.
func Sign(body []byte) string {
	sum := sha256.Sum256(body)
	sig, err := rsa.SignPKCS1v15(rand.Reader, key(), crypto.SHA256, sum[:])
	if err != nil {
		panic(err)
	}
	return base64.StdEncoding.EncodeToString(sig)
}

// types are the message types the send API takes.
var types = map[string]bool{"SMS": true, "Email": true, "WhatsApp": true, "GMB": true, "IG": true, "FB": true, "Custom": true, "Live_Chat": true}

// API is the fake API of one location.
type API struct {
	token, location string

	// Kit: Limited sends answer 429 with Retry-After: 3; Media are served
	// at MediaURL by name; Sent are the accepted sends' bodies.
	fakekit.Kit[map[string]any]
	// Contacts can be messaged; DND contacts have Do Not Disturb on.
	Contacts map[string]bool
	DND      map[string]bool
	// Requests are the send requests made, accepted or not, with their
	// times by Clock (time.Now when nil).
	Requests []time.Time
	Clock    func() time.Time
	// stamps are the times of the webhooks built, by webhookId: a webhook
	// built again is its redelivery, the same bytes.
	stamps map[string]time.Time
}

// New returns a fake for the location whose token is token, with contacts.
func New(token, location string, contacts ...string) *API {
	f := &API{token: token, location: location, Contacts: fakekit.Set(contacts...), DND: map[string]bool{},
		stamps: map[string]time.Time{}}
	f.MediaStore()
	return f
}

// Texts returns the message texts accepted for the contact, in order.
func (f *API) Texts(contact string) []string {
	return f.Collect(func(s map[string]any) (string, bool) {
		m, _ := s["message"].(string)
		return m, s["contactId"] == contact
	})
}

// MediaURL is the URL of an attachment on the fake at base, shaped as
// GoHighLevel's storage's.
func (f *API) MediaURL(base, name string) string {
	return base + "/msgsndr/" + f.location + "/media/" + name
}

func fail(w http.ResponseWriter, status int, msg any) {
	fakekit.JSON(w, status, map[string]any{"statusCode": status, "message": msg, "error": http.StatusText(status)})
}

// ServeHTTP implements http.Handler.
func (f *API) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/msgsndr/"+f.location+"/media/"):
		f.ServeMedia(w, r, strings.TrimPrefix(r.URL.Path, "/msgsndr/"+f.location+"/media/"), "image/jpeg")
	case r.Method == http.MethodPost && r.URL.Path == "/conversations/messages":
		f.send(w, r)
	default:
		fail(w, http.StatusNotFound, "Cannot "+r.Method+" "+r.URL.Path)
	}
}

func (f *API) send(w http.ResponseWriter, r *http.Request) {
	if !fakekit.Bearer(r, f.token) {
		fail(w, http.StatusUnauthorized, "Invalid JWT")
		return
	}
	if r.Header.Get("Version") != "2021-04-15" {
		fail(w, http.StatusBadRequest, "version header was not found or is not supported")
		return
	}
	var body map[string]any
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		fail(w, http.StatusBadRequest, "Unexpected token in JSON")
		return
	}
	typ, _ := body["type"].(string)
	contact, _ := body["contactId"].(string)
	msg, hasMsg := body["message"].(string)
	atts, _ := body["attachments"].([]any)
	f.Lock()
	defer f.Unlock()
	now := time.Now()
	if f.Clock != nil {
		now = f.Clock()
	}
	f.Requests = append(f.Requests, now)
	recent := 0
	for _, t := range f.Requests {
		if now.Sub(t) < 10*time.Second {
			recent++
		}
	}
	switch {
	case f.RateLimited() || recent > 100:
		w.Header().Set("Retry-After", "3")
		fail(w, http.StatusTooManyRequests, "Too Many Requests")
	case !types[typ]:
		fail(w, http.StatusUnprocessableEntity, []string{"type must be one of the following values: SMS, Email, WhatsApp, GMB, IG, FB, Custom, Live_Chat"})
	case !f.Contacts[contact]:
		fail(w, http.StatusBadRequest, "Contact not found")
	case f.DND[contact]:
		fail(w, http.StatusBadRequest, "Cannot send message as DND is active for "+typ+".")
	case (!hasMsg || strings.TrimSpace(msg) == "") && len(atts) == 0:
		fail(w, http.StatusUnprocessableEntity, []string{"message should not be empty"})
	default:
		for _, a := range atts {
			if s, _ := a.(string); !strings.HasPrefix(s, "https://") && !strings.HasPrefix(s, "http://") {
				fail(w, http.StatusUnprocessableEntity, []string{"each value in attachments must be a URL address"})
				return
			}
		}
		n := f.Record(body)
		fakekit.JSON(w, http.StatusCreated, map[string]any{"conversationId": "conv-" + contact, "messageId": fmt.Sprintf("msg%017d", n),
			"msg": "Message queued successfully."})
	}
}

// stamp is the time of the webhook id: now, or when it was first built.
func (f *API) stamp(id string) string {
	f.Lock()
	defer f.Unlock()
	at, ok := f.stamps[id]
	if !ok {
		at = time.Now().UTC()
		f.stamps[id] = at
	}
	return at.Format(time.RFC3339Nano)
}

// Webhook is a webhook body of type typ for the fake's location with its
// webhookId id, timestamped now (or when id was first built: the same
// webhook again is its redelivery), with fields.
func (f *API) Webhook(typ, id string, fields map[string]any) []byte {
	m := map[string]any{"type": typ, "locationId": f.location, "timestamp": f.stamp(id), "webhookId": id}
	for k, v := range fields {
		m[k] = v
	}
	b, _ := json.Marshal(m)
	return b
}

// Inbound is the InboundMessage webhook body of a message of messageType
// from contact, delivered as webhookId id.
func (f *API) Inbound(id, messageID, contact, messageType, text string, attachments ...string) []byte {
	if attachments == nil {
		attachments = []string{}
	}
	return f.Webhook("InboundMessage", id, map[string]any{"attachments": attachments, "body": text, "contactId": contact,
		"contentType": "text/plain", "conversationId": "conv-" + contact, "dateAdded": f.stamp(id),
		"direction": "inbound", "messageType": messageType, "messageId": messageID, "status": "delivered"})
}
