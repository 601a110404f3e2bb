// Package httpchantest is a fake gateway of the generic HTTP channel for
// tests: it speaks the channel's wire format (a signed POST of
// httpchan.Outbound, answered 2xx {"id"}), checks the signature and its
// timestamp as a gateway must (httpchan.VerifyRequest), and answers the
// statuses the channel maps: 429 with Retry-After, 422 for a media of a type
// it does not send, 404 for an unknown chat, 413 for a text over TextLimit.
package httpchantest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"
	"unicode/utf8"

	"github.com/botrun/botrun/host/channel/httpchan"
	"github.com/botrun/botrun/host/channel/internal/fakekit"
)

// TextLimit is the longest text the fake gateway takes, in characters.
const TextLimit = 4096

// RetryAfter is the Retry-After, in seconds, of a Limited send's 429.
const RetryAfter = 5

// mediaTypes are the media types the fake gateway sends.
var mediaTypes = map[string]bool{"image": true, "video": true, "audio": true, "document": true}

// Gateway is the fake gateway, receiving the sends of one channel entry.
type Gateway struct {
	secret []byte

	// Kit: Limited sends answer 429 with Retry-After RetryAfter; Sent are
	// the accepted sends.
	fakekit.Kit[httpchan.Outbound]
	// Chats can be sent to.
	Chats map[string]bool
}

// New returns a fake gateway verifying secret, with chats.
func New(secret string, chats ...string) *Gateway {
	return &Gateway{secret: []byte(secret), Chats: fakekit.Set(chats...)}
}

// Texts returns the texts accepted for chat, in order.
func (g *Gateway) Texts(chat string) []string {
	return g.Collect(func(o httpchan.Outbound) (string, bool) { return o.Text, o.Chat == chat })
}

func fail(w http.ResponseWriter, status int, msg string) {
	fakekit.JSON(w, status, map[string]string{"error": msg})
}

// ServeHTTP implements http.Handler.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		fail(w, http.StatusMethodNotAllowed, "POST only")
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
	if err != nil {
		fail(w, http.StatusRequestEntityTooLarge, "body over 1 MiB")
		return
	}
	if err := httpchan.VerifyRequest(r.Header, g.secret, body, time.Now(), httpchan.DefaultWindow); err != nil {
		fail(w, http.StatusUnauthorized, err.Error())
		return
	}
	var o httpchan.Outbound
	if err := json.Unmarshal(body, &o); err != nil || o.Chat == "" || (o.Text == "" && o.Media == nil) {
		fail(w, http.StatusBadRequest, "want {\"chat\", \"text\" or \"media\"}")
		return
	}
	g.Lock()
	defer g.Unlock()
	switch {
	case o.Media != nil && !mediaTypes[o.Media.Type]:
		fail(w, http.StatusUnprocessableEntity, "media type "+o.Media.Type+" is not sent")
	case utf8.RuneCountInString(o.Text) > TextLimit:
		fail(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("text over %d characters", TextLimit))
	case !g.Chats[o.Chat]:
		fail(w, http.StatusNotFound, "unknown chat "+o.Chat)
	case g.RateLimited():
		w.Header().Set("Retry-After", fmt.Sprint(RetryAfter))
		fail(w, http.StatusTooManyRequests, "slow down")
	default:
		fakekit.JSON(w, http.StatusOK, map[string]string{"id": fmt.Sprintf("gw-%d", g.Record(o))})
	}
}
