// Package twiliotest is a fake Twilio Messages API for tests: it speaks the
// real wire format, checks HTTP Basic auth and rejects what the real API
// rejects. It also builds signed webhook requests.
package twiliotest

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/botrun/botrun/host/channel/internal/fakekit"
)

// API is the fake REST API for one account.
type API struct {
	sid, token string

	// Kit: Limited sends answer 429 (code 20429); Media are downloadable by
	// their media sid (ME…); Sent are the accepted sends' forms.
	fakekit.Kit[url.Values]
	// Recipients can be messaged; Unsubscribed replied STOP; Closed are
	// WhatsApp users outside the 24 h window.
	Recipients   map[string]bool
	Unsubscribed map[string]bool
	Closed       map[string]bool
}

// New returns a fake for the account with recipients.
func New(accountSID, authToken string, recipients ...string) *API {
	f := &API{sid: accountSID, token: authToken, Recipients: fakekit.Set(recipients...), Unsubscribed: map[string]bool{},
		Closed: map[string]bool{}}
	f.MediaStore()
	return f
}

// Texts returns the accepted Bodies sent to a recipient.
func (f *API) Texts(to string) []string {
	return f.Collect(func(s url.Values) (string, bool) {
		return s.Get("Body"), s.Get("To") == to
	})
}

// MediaURL is the URL of a media sid on the fake at base (its server URL),
// shaped as Twilio's.
func (f *API) MediaURL(base, mediaSID string) string {
	return base + "/2010-04-01/Accounts/" + f.sid + "/Messages/MM0001/Media/" + mediaSID
}

func fail(w http.ResponseWriter, status, code int, msg string) {
	fakekit.JSON(w, status, map[string]any{"code": code, "message": msg,
		"more_info": fmt.Sprintf("https://www.twilio.com/docs/errors/%d", code), "status": status})
}

// ServeHTTP implements http.Handler.
func (f *API) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.HasPrefix(r.URL.Path, "/cdn/") {
		f.cdn(w, r)
		return
	}
	if u, p, ok := r.BasicAuth(); !ok || u != f.sid || p != f.token {
		fail(w, 401, 20003, "Authenticate")
		return
	}
	base := "/2010-04-01/Accounts/" + f.sid + "/"
	rest, ok := strings.CutPrefix(r.URL.Path, base)
	switch {
	case !ok:
		fail(w, 404, 20404, "The requested resource "+r.URL.Path+" was not found")
	case rest == "Messages.json" && r.Method == http.MethodPost:
		f.send(w, r)
	case strings.HasPrefix(rest, "Messages/") && strings.Contains(rest, "/Media/") && r.Method == http.MethodGet:
		me := rest[strings.LastIndex(rest, "/")+1:]
		f.Lock()
		_, known := f.Media[me]
		f.Unlock()
		if !known {
			fail(w, 404, 20404, "The requested resource "+r.URL.Path+" was not found")
			return
		}
		// Twilio answers with a redirect to its storage.
		http.Redirect(w, r, "/cdn/"+me, http.StatusTemporaryRedirect)
	default:
		fail(w, 404, 20404, "The requested resource "+r.URL.Path+" was not found")
	}
}

func (f *API) cdn(w http.ResponseWriter, r *http.Request) {
	f.ServeMedia(w, r, strings.TrimPrefix(r.URL.Path, "/cdn/"), "image/jpeg")
}

func (f *API) send(w http.ResponseWriter, r *http.Request) {
	if !strings.HasPrefix(r.Header.Get("Content-Type"), "application/x-www-form-urlencoded") {
		fail(w, 400, 20001, "Content-Type must be application/x-www-form-urlencoded")
		return
	}
	if err := r.ParseForm(); err != nil {
		fail(w, 400, 20001, "Invalid form")
		return
	}
	form := r.PostForm
	to, body := form.Get("To"), form.Get("Body")
	f.Lock()
	defer f.Unlock()
	switch {
	case to == "":
		fail(w, 400, 21604, "A 'To' phone number is required.")
		return
	case form.Get("From") == "" && form.Get("MessagingServiceSid") == "":
		fail(w, 400, 21603, "A 'From' phone number is required.")
		return
	case body == "" && len(form["MediaUrl"]) == 0:
		fail(w, 400, 21602, "Message body is required.")
		return
	case utf8.RuneCountInString(body) > 1600:
		fail(w, 400, 21617, "The concatenated message body exceeds the 1600 character limit.")
		return
	case len(form["MediaUrl"]) > 10:
		fail(w, 400, 21623, "Number of media files exceeds allowed limit.")
		return
	case f.RateLimited():
		w.Header().Set("Retry-After", "3")
		fail(w, 429, 20429, "Too Many Requests")
		return
	case f.Unsubscribed[to]:
		fail(w, 400, 21610, "Attempt to send to unsubscribed recipient")
		return
	case f.Closed[to]:
		fail(w, 400, 63016, "Failed to send freeform message because you are outside the allowed window.")
		return
	case !f.Recipients[to]:
		fail(w, 400, 21211, "Invalid 'To' Phone Number: "+to)
		return
	}
	for _, m := range form["MediaUrl"] {
		if u, err := url.Parse(m); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			fail(w, 400, 21620, "Invalid media URL(s)")
			return
		}
	}
	n := f.Record(form)
	fakekit.JSON(w, http.StatusCreated, map[string]any{"sid": fmt.Sprintf("SM%032d", n), "status": "queued",
		"to": to, "from": form.Get("From"), "body": body, "account_sid": f.sid})
}

// Inbound are the webhook parameters of an inbound SMS to the account.
func (f *API) Inbound(messageSID, from, body string, mediaURLs ...string) url.Values {
	v := url.Values{"MessageSid": {messageSID}, "SmsMessageSid": {messageSID}, "AccountSid": {f.sid},
		"From": {from}, "To": {"+15550001111"}, "Body": {body}, "SmsStatus": {"received"},
		"NumMedia": {fmt.Sprint(len(mediaURLs))}, "NumSegments": {"1"}, "ApiVersion": {"2010-04-01"}}
	for i, u := range mediaURLs {
		v.Set(fmt.Sprintf("MediaUrl%d", i), u)
		v.Set(fmt.Sprintf("MediaContentType%d", i), "image/jpeg")
	}
	return v
}

// StatusCallback are the parameters of a delivery status callback.
func (f *API) StatusCallback(messageSID, to, status string) url.Values {
	return url.Values{"MessageSid": {messageSID}, "AccountSid": {f.sid}, "From": {"+15550001111"}, "To": {to},
		"MessageStatus": {status}, "SmsStatus": {status}, "ApiVersion": {"2010-04-01"}}
}
