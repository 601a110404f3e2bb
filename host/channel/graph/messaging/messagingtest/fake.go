// Package messagingtest is a fake Messenger Platform Send API, the core of
// the Messenger and Instagram fakes (messengertest, instagramtest): it speaks
// the real wire format, checks the Bearer token, and rejects what the real
// API rejects with its Graph errors: an unknown recipient (100/2018001), one
// outside the messaging window (10/2018278) or unavailable (551), an empty
// message, a text over the channel's limit, more than 13 quick replies, a
// button template of more than 3 buttons or over 640 characters, an empty
// title, an attachment without a URL or an id, a rate limit (613). It serves
// attachment bytes at signed-looking CDN URLs (/cdn/<name>?oe=…) and builds
// the webhook bodies the Platform sends.
package messagingtest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/botrun/botrun/host/channel/internal/fakekit"
)

// Options are what differs between the channels' fakes.
type Options struct {
	// Token is the access token the fake accepts (Bearer).
	Token string
	// Path is the Send API's path ("/v21.0/me/messages").
	Path string
	// TooLong returns the error message for a text over the channel's
	// limit, or "" when the text fits.
	TooLong func(text string) string
	// MessagingType makes messaging_type required (Messenger).
	MessagingType bool
}

// QuickReply is a sent quick reply.
type QuickReply struct {
	ContentType string `json:"content_type"`
	Title       string `json:"title"`
	Payload     string `json:"payload"`
}

// Button is a button template's button.
type Button struct {
	Type    string `json:"type"`
	Title   string `json:"title"`
	Payload string `json:"payload,omitempty"`
	URL     string `json:"url,omitempty"`
}

// Attachment is a sent attachment: media (URL or AttachmentID) or a button
// template (TemplateType, Text, Buttons).
type Attachment struct {
	Type    string `json:"type"`
	Payload struct {
		URL          string   `json:"url,omitempty"`
		AttachmentID string   `json:"attachment_id,omitempty"`
		IsReusable   bool     `json:"is_reusable,omitempty"`
		TemplateType string   `json:"template_type,omitempty"`
		Text         string   `json:"text,omitempty"`
		Buttons      []Button `json:"buttons,omitempty"`
	} `json:"payload"`
}

// Message is a sent message object.
type Message struct {
	Text         string       `json:"text,omitempty"`
	Attachment   *Attachment  `json:"attachment,omitempty"`
	QuickReplies []QuickReply `json:"quick_replies,omitempty"`
}

// Sent is an accepted send.
type Sent struct {
	To      string
	ID      string
	Message Message
}

// API is the fake Send API of one page or account.
type API struct {
	opt Options

	// Kit: Limited sends answer the rate limit (613); Media are the
	// attachment bytes the CDN serves, by name; Sent are the accepted
	// messages.
	fakekit.Kit[Sent]
	// Recipients can be messaged; Closed are outside the messaging window;
	// Unavailable answer 551.
	Recipients  map[string]bool
	Closed      map[string]bool
	Unavailable map[string]bool
	// Actions are the accepted sender actions ("<recipient> <action>").
	Actions []string
}

// New returns a fake with recipients.
func New(opt Options, recipients ...string) *API {
	f := &API{opt: opt, Recipients: fakekit.Set(recipients...), Closed: map[string]bool{}, Unavailable: map[string]bool{}}
	f.MediaStore()
	return f
}

// Messages returns the accepted messages to a recipient, in order.
func (f *API) Messages(to string) []Message {
	return fakekit.Gather(&f.Kit, func(s Sent) (Message, bool) { return s.Message, s.To == to })
}

// Texts returns the accepted texts to a recipient: message texts and button
// templates' texts, in order.
func (f *API) Texts(to string) []string {
	var out []string
	for _, m := range f.Messages(to) {
		switch {
		case m.Text != "":
			out = append(out, m.Text)
		case m.Attachment != nil && m.Attachment.Type == "template":
			out = append(out, m.Attachment.Payload.Text)
		}
	}
	return out
}

// MediaURL is the CDN URL of the named media on the fake served at base.
func MediaURL(base, name string) string {
	return base + "/cdn/" + name + "?oe=6A1B2C3D&_nc_sig=fake"
}

// Fail answers a Graph error.
func Fail(w http.ResponseWriter, status, code, subcode int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	e := map[string]any{"message": msg, "type": "OAuthException", "code": code, "fbtrace_id": "AbCdEf"}
	if subcode != 0 {
		e["error_subcode"] = subcode
	}
	json.NewEncoder(w).Encode(map[string]any{"error": e})
}

// ServeHTTP implements http.Handler.
func (f *API) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if name, ok := strings.CutPrefix(r.URL.Path, "/cdn/"); ok && r.Method == http.MethodGet {
		// Signed CDN URLs need no token.
		f.Lock()
		b, ok := f.Media[name]
		f.Unlock()
		if !ok || r.URL.Query().Get("oe") == "" {
			http.Error(w, "URL signature expired", http.StatusForbidden)
			return
		}
		w.Header().Set("Content-Type", "image/jpeg")
		w.Write(b)
		return
	}
	if !fakekit.Bearer(r, f.opt.Token) {
		Fail(w, 401, 190, 0, "Invalid OAuth access token - Cannot parse access token")
		return
	}
	if r.URL.Path != f.opt.Path || r.Method != http.MethodPost {
		Fail(w, 400, 100, 33, "Unsupported "+strings.ToLower(r.Method)+" request. Object with ID '"+r.URL.Path+"' does not exist")
		return
	}
	if !strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
		Fail(w, 400, 100, 0, "(#100) Content-Type must be application/json")
		return
	}
	var req struct {
		Recipient struct {
			ID string `json:"id"`
		} `json:"recipient"`
		MessagingType string   `json:"messaging_type"`
		SenderAction  string   `json:"sender_action"`
		Message       *Message `json:"message"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		Fail(w, 400, 100, 0, "(#100) Invalid JSON for postcall param")
		return
	}
	f.Lock()
	defer f.Unlock()
	to := req.Recipient.ID
	switch {
	case to == "":
		Fail(w, 400, 100, 0, "(#100) The parameter recipient is required")
		return
	case f.RateLimited():
		Fail(w, 400, 613, 0, "(#613) Calls to this api have exceeded the rate limit.")
		return
	case f.Unavailable[to]:
		Fail(w, 400, 551, 1545041, "(#551) This person isn't available right now.")
		return
	case !f.Recipients[to] && !f.Closed[to]:
		Fail(w, 400, 100, 2018001, "(#100) No matching user found")
		return
	}
	if req.SenderAction != "" {
		switch {
		case req.Message != nil:
			Fail(w, 400, 100, 0, "(#100) sender_action cannot be sent with message")
		case req.SenderAction != "typing_on" && req.SenderAction != "typing_off" && req.SenderAction != "mark_seen":
			Fail(w, 400, 100, 0, "(#100) Param sender_action must be one of {MARK_SEEN, TYPING_ON, TYPING_OFF}")
		default:
			f.Actions = append(f.Actions, to+" "+req.SenderAction)
			json.NewEncoder(w).Encode(map[string]any{"recipient_id": to})
		}
		return
	}
	switch req.MessagingType {
	case "RESPONSE", "UPDATE", "MESSAGE_TAG":
	case "":
		if f.opt.MessagingType {
			Fail(w, 400, 100, 0, "(#100) The parameter messaging_type is required")
			return
		}
	default:
		Fail(w, 400, 100, 0, "(#100) Param messaging_type must be one of {RESPONSE, UPDATE, MESSAGE_TAG}")
		return
	}
	if f.Closed[to] {
		Fail(w, 400, 10, 2018278, "(#10) This message is sent outside of allowed window.")
		return
	}
	if msg := f.check(req.Message); msg != "" {
		Fail(w, 400, 100, 0, msg)
		return
	}
	id := fmt.Sprintf("m_OUT%d", f.Next())
	f.Sent = append(f.Sent, Sent{To: to, ID: id, Message: *req.Message})
	json.NewEncoder(w).Encode(map[string]any{"recipient_id": to, "message_id": id})
}

// check validates a message object as the Send API does; it returns the
// error message, or "" when valid.
func (f *API) check(m *Message) string {
	length := func(what, s string, max int) string {
		if n := utf8.RuneCountInString(s); n < 1 || n > max {
			return fmt.Sprintf("(#100) Param %s must be 1-%d characters long", what, max)
		}
		return ""
	}
	switch {
	case m == nil:
		return "(#100) The parameter message is required"
	case m.Text != "" && m.Attachment != nil:
		return "(#100) Only one of text or attachment can be specified"
	case m.Text == "" && m.Attachment == nil:
		return "(#100) Message cannot be empty, must provide valid attachment or text"
	case m.Text != "":
		if msg := f.opt.TooLong(m.Text); msg != "" {
			return msg
		}
	}
	if n := len(m.QuickReplies); n > 13 {
		return "(#100) param message[quick_replies] must have at most 13 elements"
	}
	for i, q := range m.QuickReplies {
		if q.ContentType != "text" {
			continue // user_phone_number, user_email
		}
		if q.Title == "" || q.Payload == "" {
			return fmt.Sprintf("(#100) message[quick_replies][%d] needs a title and a payload", i)
		}
		if utf8.RuneCountInString(q.Payload) > 1000 {
			return fmt.Sprintf("(#100) Length of param message[quick_replies][%d][payload] must be less than or equal to 1000", i)
		}
		// A title over 20 characters is cut by the Platform, not refused.
	}
	a := m.Attachment
	if a == nil {
		return ""
	}
	switch a.Type {
	case "image", "video", "audio", "file":
		if a.Payload.URL == "" && a.Payload.AttachmentID == "" {
			return "(#100) Param message[attachment][payload] must have a url or an attachment_id"
		}
	case "template":
		if a.Payload.TemplateType != "button" {
			return fmt.Sprintf("(#100) Template type %q is not supported here", a.Payload.TemplateType)
		}
		if msg := length("message[attachment][payload][text]", a.Payload.Text, 640); msg != "" {
			return msg
		}
		if n := len(a.Payload.Buttons); n < 1 || n > 3 {
			return "(#100) param message[attachment][payload][buttons] must have 1-3 elements"
		}
		for i, b := range a.Payload.Buttons {
			if msg := length(fmt.Sprintf("buttons[%d][title]", i), b.Title, 20); msg != "" {
				return msg
			}
			switch {
			case b.Type == "postback" && (b.Payload == "" || utf8.RuneCountInString(b.Payload) > 1000):
				return fmt.Sprintf("(#100) buttons[%d][payload] must be 1-1000 characters", i)
			case b.Type == "web_url" && !strings.HasPrefix(b.URL, "http"):
				return fmt.Sprintf("(#100) buttons[%d][url] must be a URL", i)
			case b.Type != "postback" && b.Type != "web_url":
				return fmt.Sprintf("(#100) buttons[%d][type] %q is not supported", i, b.Type)
			}
		}
	default:
		return fmt.Sprintf("(#100) Param message[attachment][type] must be one of {image, audio, video, file, template}, not %q", a.Type)
	}
	return ""
}
