// Package messaging is the Messenger Platform's messaging, which Facebook
// Messenger (host/channel/messenger) and Instagram (host/channel/instagram)
// share: the webhook's entry[].messaging[] events, the Send API's message
// object with its attachments, quick replies and button template, sender
// actions, the Graph error codes of the Send API, and attachment URLs as
// durable media references on allow-listed hosts. A channel gives a Spec (its
// webhook object, its account, its Send API endpoint and token, its media
// hosts) and adds its own text limit; package graph verifies the webhooks.
//
// Inbound, a message is admitted under its mid; is_echo (the channel's own
// sends), deleted and unsupported messages, and every other event (delivery,
// read, reaction, referral, …) are acknowledged and ignored, and so are the
// events of another page or account. A quick reply's payload and a postback
// button's payload arrive as interactions (the payload is the id of the
// button or row pressed, the title is the text shown); a postback is admitted
// under its mid, or under "postback:<sender>:<timestamp>" when it has none.
// The Platform does not say which message a quick reply or a postback
// answers: the interaction's message is the message the user replied to
// (reply_to.mid) when there is one, else empty.
//
// Outbound (see Send): a text, an attachment by URL or attachment id, reply
// and URL buttons as a button template or quick replies, a list as quick
// replies; what the Platform cannot show fails with
// channel.ErrUnsupportedContent before any request. Typing is mark_seen
// then typing_on. Nothing can be edited.
package messaging

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/channel/graph"
	"github.com/botrun/botrun/host/channel/httpkit"
	"github.com/botrun/botrun/host/channel/internal/urlmedia"
)

// MaxBody is the largest webhook body accepted.
const MaxBody = 3 << 20

// Spec is what a channel on the Messenger Platform tells the shared code.
type Spec struct {
	// Type is the channel's type name, for errors and logs.
	Type string
	// ID is the provider's id.
	ID string
	// Object is the webhook body's object: "page" or "instagram".
	Object string
	// Owner is the page's or the account's id: entry[].id of the webhooks
	// this channel handles.
	Owner string
	// AppSecret verifies X-Hub-Signature-256; VerifyToken answers the
	// hub.challenge handshake.
	AppSecret, VerifyToken string
	// Token is the Send API's access token, sent as a Bearer header.
	Token string
	// APIURL is the entry's api_url, DefaultAPI the Graph base URL with its
	// version when it is empty, and SendPath the Send API's path below it
	// ("/me/messages").
	APIURL, DefaultAPI, SendPath string
	// MediaHosts are the hosts (and their subdomains) whose attachment URLs
	// are journaled and downloaded (media_ref_hosts), DefaultMediaHosts those
	// when it is not set; api_url's own origin always is.
	MediaHosts, DefaultMediaHosts []string
	// TextChars and TextBytes are the channel's text limit, in characters
	// or in bytes of UTF-8 (0: none): a media's caption joins the text only
	// when the two fit.
	TextChars, TextBytes int
}

// Channel is the Messenger Platform half of a Messenger or Instagram
// provider: everything but the text limit.
type Channel struct {
	httpkit.Base
	*urlmedia.Media
	spec Spec
	// sent remembers, per Outbound.Key, the messages of a send made of
	// several (an attachment, then its text) that went out before a later
	// one failed, so the retry sends only the rest.
	mu   sync.Mutex
	sent map[string]progress
}

// progress is how many of a send's messages went out, and the last one's id.
type progress struct {
	n   int
	ref string
}

// maxProgress bounds Channel.sent: a map that full is dropped (a retry then
// sends the whole of its send again).
const maxProgress = 1024

// New returns the channel s describes, for the host's env; the entry's id is
// env's when s has none.
func New(s Spec, env channel.Env) (*Channel, error) {
	c := &Channel{sent: map[string]progress{}}
	if err := c.Open(s.Type, s.ID, env, s.APIURL, s.DefaultAPI); err != nil {
		return nil, err
	}
	s.ID = c.ID()
	hosts := s.MediaHosts
	if hosts == nil {
		hosts = s.DefaultMediaHosts
	}
	c.Media, c.spec = urlmedia.New(s.Type+" "+s.ID, c.API, hosts, nil), s
	c.Dial(60*time.Second, c.URLAllowed)
	return c, nil
}

// Routes implements channel.Router: the verification handshake and the
// webhook at /webhooks/<id>.
func (c *Channel) Routes(mux *http.ServeMux) {
	mux.HandleFunc("GET /webhooks/"+c.spec.ID, func(w http.ResponseWriter, r *http.Request) {
		graph.Verify(w, r, c.spec.VerifyToken)
	})
	mux.HandleFunc("POST /webhooks/"+c.spec.ID, c.webhook)
}

// Notification is the part of a messaging webhook body botrun reads.
type Notification struct {
	Object string  `json:"object"`
	Entry  []Entry `json:"entry"`
}

// Entry is one page's or account's batch of events.
type Entry struct {
	ID        string  `json:"id"`
	Messaging []Event `json:"messaging"`
}

// Party is an event's sender or recipient.
type Party struct {
	ID string `json:"id"`
}

// Event is one messaging event: a message, a postback, or one botrun ignores
// (delivery, read, reaction, …: not decoded).
type Event struct {
	Sender    Party     `json:"sender"`
	Recipient Party     `json:"recipient"`
	Timestamp Timestamp `json:"timestamp"`
	Message   *Message  `json:"message"`
	Postback  *Postback `json:"postback"`
}

// Message is an inbound message, or an echo of the channel's own.
type Message struct {
	MID           string `json:"mid"`
	Text          string `json:"text"`
	IsEcho        bool   `json:"is_echo"`
	IsDeleted     bool   `json:"is_deleted"`
	IsUnsupported bool   `json:"is_unsupported"`
	QuickReply    *struct {
		Payload string `json:"payload"`
	} `json:"quick_reply"`
	ReplyTo *struct {
		MID string `json:"mid"`
	} `json:"reply_to"`
	Attachments []Attachment `json:"attachments"`
}

// Attachment is an inbound attachment: its type and the URL of its bytes.
// A sticker is an image with a sticker_id.
type Attachment struct {
	Type    string `json:"type"`
	Payload *struct {
		URL       string `json:"url"`
		StickerID any    `json:"sticker_id"`
	} `json:"payload"`
}

// Postback is the press of a postback button.
type Postback struct {
	MID     string `json:"mid"`
	Title   string `json:"title"`
	Payload string `json:"payload"`
}

// Timestamp is an event's time: milliseconds since the epoch, as a number or
// a string (seconds when it is too small to be milliseconds).
type Timestamp int64

// UnmarshalJSON implements json.Unmarshaler; what is not a number is 0.
func (t *Timestamp) UnmarshalJSON(b []byte) error {
	n, err := strconv.ParseInt(strings.Trim(string(b), `"`), 10, 64)
	if err != nil || n < 0 {
		n = 0
	}
	*t = Timestamp(n)
	return nil
}

// Time is t as a time, zero when unknown.
func (t Timestamp) Time() time.Time {
	switch {
	case t <= 0:
		return time.Time{}
	case t < 1e11: // seconds
		return time.Unix(int64(t), 0)
	}
	return time.UnixMilli(int64(t))
}

// ErrBadNotification is wrapped by every DecodeNotification error.
var ErrBadNotification = errors.New("bad notification")

// DecodeNotification parses a messaging webhook body from untrusted bytes;
// its object must be object ("page", "instagram").
func DecodeNotification(b []byte, object string) (Notification, error) {
	var n Notification
	if err := json.Unmarshal(b, &n); err != nil {
		return n, fmt.Errorf("%w: %v", ErrBadNotification, err)
	}
	if n.Object != object {
		return n, fmt.Errorf("%w: object %q is not %q", ErrBadNotification, n.Object, object)
	}
	// An event without its ids (sender.id, mid) is not refused here: the
	// webhook skips it and admits the others of the batch, since a 400
	// would make Meta redeliver them all (and in time disable the
	// subscription) for one bad event.
	return n, nil
}

// Inbound turns an event into what botrun admits; ok is false for what it
// ignores (echoes, deleted or unsupported messages, attachments it does not
// handle alone, events that are not messages or postbacks).
func (ev Event) Inbound() (channel.Message, bool) {
	out := channel.Message{Chat: ev.Sender.ID, From: ev.Sender.ID, ReceivedAt: ev.Timestamp.Time()}
	switch m, pb := ev.Message, ev.Postback; {
	case m != nil:
		if m.IsEcho || m.IsDeleted || m.IsUnsupported {
			return channel.Message{}, false
		}
		out.ID, out.Text = m.MID, m.Text
		if m.QuickReply != nil && m.QuickReply.Payload != "" {
			out.Interaction = &abi.Interaction{ID: m.QuickReply.Payload, Title: m.Text}
			if m.ReplyTo != nil {
				out.Interaction.Message = m.ReplyTo.MID
			}
			out.Text = "" // the host puts the title there
		}
		for _, a := range m.Attachments {
			if md, ok := a.media(); ok {
				out.Media = append(out.Media, md)
			}
		}
	case pb != nil:
		out.ID = pb.MID
		if out.ID == "" {
			// Redeliveries repeat the body, so the timestamp is stable.
			out.ID = "postback:" + ev.Sender.ID + ":" + strconv.FormatInt(int64(ev.Timestamp), 10)
		}
		if pb.Payload == "" {
			out.Text = pb.Title // no payload to report: read as the title's text
			break
		}
		out.Interaction = &abi.Interaction{ID: pb.Payload, Title: pb.Title}
	default:
		return channel.Message{}, false
	}
	return out, out.ID != "" && out.Chat != "" && (out.Text != "" || len(out.Media) > 0 || out.Interaction != nil)
}

// mediaTypes maps the Platform's attachment types onto botrun's.
var mediaTypes = map[string]string{"image": "image", "video": "video", "audio": "audio", "file": "document"}

// media is an attachment as botrun's media, its Ref the URL of its bytes; ok
// is false for the types botrun does not load (locations, shares, story
// mentions, reels, templates, fallbacks).
func (a Attachment) media() (channel.Media, bool) {
	kind := mediaTypes[a.Type]
	if kind == "" || a.Payload == nil || a.Payload.URL == "" {
		return channel.Media{}, false
	}
	if kind == "image" && a.Payload.StickerID != nil {
		kind = "sticker"
	}
	return channel.Media{Type: kind, Ref: a.Payload.URL}, true
}

func (c *Channel) webhook(w http.ResponseWriter, r *http.Request) {
	body, ok := graph.ReadSigned(w, r, MaxBody, c.spec.AppSecret)
	if !ok {
		return
	}
	n, err := DecodeNotification(body, c.spec.Object)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var msgs []channel.Message
	for _, e := range n.Entry {
		if e.ID != "" && e.ID != c.spec.Owner {
			c.Log.Warn(c.spec.Type+": a notification for another page or account ignored", "provider", c.spec.ID, "entry", e.ID)
			continue
		}
		for _, ev := range e.Messaging {
			msg, ok := ev.Inbound()
			if !ok && (ev.Message != nil && !ev.Message.IsEcho || ev.Postback != nil) && (msg.ID == "" || msg.Chat == "") {
				c.Log.Warn(c.spec.Type+": an event without its sender or message id skipped", "provider", c.spec.ID)
			}
			if ok {
				msgs = append(msgs, msg)
			}
		}
	}
	graph.Admit(w, r, c.Admitter, c.spec.ID, msgs)
}

// Codes maps the Send API's Graph errors onto the taxonomy. The Graph sends
// no Retry-After; the waits are guesses at the windows Meta describes.
var Codes = graph.Codes{
	RateLimits: map[int]time.Duration{
		613: time.Minute, // the Send API's rate limit
		4:   time.Minute, // the app's request limit
	},
	Classify: func(e graph.Error) error {
		switch {
		case e.Code == 551: // this person isn't available right now
			return channel.ErrRecipientUnreachable
		case e.Code == 100 && (e.Subcode == 2018001 || e.Subcode == 2534014): // no matching user (Messenger, Instagram)
			return channel.ErrRecipientUnreachable
		case e.Code == 10 && (e.Subcode == 2018278 || e.Subcode == 2534022): // outside the messaging window (Messenger, Instagram)
			return channel.ErrOutsideSessionWindow
		case e.Code == 100 && strings.Contains(e.Message, "must be less than or equal to"):
			return channel.ErrPayloadTooLarge
		case e.Code == 100: // an invalid parameter: a retry sends it again
			return channel.ErrUnsupportedContent
		case e.Code == 10, e.Code == 190, e.Code == 200, e.Code == 230, e.Code == 368:
			// permission, token, permission, subscription permission, policy
			return graph.ErrPermanent
		}
		return nil
	},
}
