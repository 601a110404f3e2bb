// Package discordtest is a fake Discord for tests: the REST API v10 (channel
// messages, interaction callbacks and follow-ups, edits, typing,
// /gateway/bot), the attachment CDN, and a Gateway websocket (gateway.go)
// that can drop a connection in the middle of a stream and replays what was
// missed on resume. It speaks the real wire format, checks auth like Discord
// and rejects what Discord rejects: content over 2,000 characters, an empty
// message, an unknown channel, malformed components, an unknown or expired
// interaction token, an interaction acknowledged twice, a tampered or
// expired attachment URL.
package discordtest

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/botrun/botrun/host/channel/internal/fakekit"
)

// TextLimit is Discord's longest message content.
const TextLimit = 2000

// discordEpoch is the Unix millisecond snowflakes count from.
const discordEpoch = 1420070400000

// Component is a message component as the fake checks and records it.
type Component struct {
	Type        int            `json:"type"`
	Components  []Component    `json:"components,omitempty"`
	Style       int            `json:"style,omitempty"`
	Label       string         `json:"label,omitempty"`
	CustomID    string         `json:"custom_id,omitempty"`
	URL         string         `json:"url,omitempty"`
	Placeholder string         `json:"placeholder,omitempty"`
	Options     []SelectOption `json:"options,omitempty"`
}

// SelectOption is one option of a string select.
type SelectOption struct {
	Label       string `json:"label"`
	Value       string `json:"value"`
	Description string `json:"description,omitempty"`
}

// Message is a message the fake accepted: a channel message, or a follow-up
// (Interaction is its interaction's id).
type Message struct {
	ID          string           `json:"id"`
	ChannelID   string           `json:"channel_id"`
	Content     string           `json:"content"`
	Embeds      []map[string]any `json:"embeds,omitempty"`
	Components  []Component      `json:"components,omitempty"`
	Nonce       string           `json:"nonce,omitempty"`
	Interaction string           `json:"-"`
	Edits       int              `json:"-"`
}

// Callback is an accepted interaction callback.
type Callback struct {
	ID   string
	Type int
}

// Failure is an answer the fake gives to the next message create or
// follow-up (FailNext).
type Failure struct {
	Status  int
	Code    int
	Message string
}

// interaction is an interaction the fake issued.
type interaction struct {
	id, token, channel string
	acked              int
	expired            bool
}

// API is the fake. Lock guards the exported fields while it serves.
type API struct {
	token, appID string
	// BotUser is the bot's own user id (READY, and the author of what it
	// sends).
	BotUser string
	// Gateway is the fake Gateway, served at /gateway and /resume.
	Gateway *Gateway

	// Kit: Limited message creates and follow-ups answer 429 with
	// RetryAfter seconds (Global: the global limit); Sent are the accepted
	// messages, channel messages and follow-ups, in order.
	fakekit.Kit[*Message]
	// Channels exist; ClosedDMs answer 50007 (the user does not take DMs);
	// NoAccess answer 50013 (missing permissions).
	Channels  map[string]bool
	ClosedDMs map[string]bool
	NoAccess  map[string]bool
	// RetryAfter and Global shape the answer to a Limited send.
	RetryAfter float64
	Global     bool
	// Spent: message creates answer X-RateLimit-Remaining 0 with
	// X-RateLimit-Reset-After ResetAfter seconds.
	Spent      bool
	ResetAfter float64
	// Callbacks are the accepted interaction callbacks, in order.
	Callbacks []Callback
	// Typing are the channels typing was shown in.
	Typing []string

	files        map[string][]byte // attachment bytes by path
	fail         []Failure
	calls        map[string]int
	interactions map[string]*interaction // by token
	nonces       map[string]string       // channel + nonce → message id
	next         int64
	started      int64
	cdnKey       []byte
}

// New returns a fake Discord for the bot token and application id, with the
// given channels.
func New(token, appID string, channels ...string) *API {
	f := &API{token: token, appID: appID, BotUser: "900000000000000001",
		Channels: fakekit.Set(channels...), ClosedDMs: map[string]bool{}, NoAccess: map[string]bool{},
		RetryAfter: 1.5, ResetAfter: 0.25,
		files: map[string][]byte{}, calls: map[string]int{}, interactions: map[string]*interaction{},
		nonces: map[string]string{}, started: time.Now().UnixMilli(), cdnKey: []byte(randomHex(16))}
	f.Gateway = newGateway(f)
	return f
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// snowflake returns an id created at ms with the given low 22 bits.
func snowflake(ms int64, low uint32) string {
	return strconv.FormatUint(uint64(ms-discordEpoch)<<22|uint64(low&0x3fffff), 10)
}

// ID returns the snowflake the fake gives name: the same for the same name
// (a redelivery), created when the fake was.
func (f *API) ID(name string) string {
	h := fnv.New32a()
	h.Write([]byte(name))
	return snowflake(f.started, h.Sum32()|0x200000)
}

// newID returns a fresh snowflake, created now. Call with mu held.
func (f *API) newID() string {
	f.next++
	return snowflake(time.Now().UnixMilli(), uint32(f.next&0x1fffff))
}

// FailNext makes the next message create or follow-up answer status with
// the JSON error code.
func (f *API) FailNext(status, code int, message string) {
	f.Lock()
	defer f.Unlock()
	f.fail = append(f.fail, Failure{status, code, message})
}

// Calls returns how many requests of a kind ("messages", "followups",
// "callbacks", "edits", "typing", "gateway/bot", "cdn") the fake received,
// accepted or not.
func (f *API) Calls(kind string) int {
	f.Lock()
	defer f.Unlock()
	return f.calls[kind]
}

// Texts returns the contents of the messages accepted in channel, channel
// messages and follow-ups, in order.
func (f *API) Texts(channel string) []string {
	return f.Collect(func(m *Message) (string, bool) { return m.Content, m.ChannelID == channel })
}

// Message returns a copy of the accepted message id, or nil.
func (f *API) Message(id string) *Message {
	f.Lock()
	defer f.Unlock()
	for _, m := range f.Sent {
		if m.ID == id {
			c := *m
			return &c
		}
	}
	return nil
}

// CallbackList returns a copy of Callbacks.
func (f *API) CallbackList() []Callback {
	f.Lock()
	defer f.Unlock()
	return append([]Callback(nil), f.Callbacks...)
}

// Expire makes an interaction's token unknown, as Discord does after 15
// minutes.
func (f *API) Expire(interactionID string) {
	f.Lock()
	defer f.Unlock()
	for _, ix := range f.interactions {
		if ix.id == interactionID {
			ix.expired = true
		}
	}
}

// Attachment is a file on a message or an attachment option.
type Attachment struct {
	ID          string `json:"id"`
	Filename    string `json:"filename"`
	ContentType string `json:"content_type"`
	Size        int    `json:"size"`
	URL         string `json:"url"`
	ProxyURL    string `json:"proxy_url"`
}

// Attachment stores b as a file served at base (the fake's URL) and returns
// it with a URL signed as Discord's CDN signs them (ex, is, hm), expiring
// after life (negative: expired already).
func (f *API) Attachment(base, channel, filename, contentType string, b []byte, life time.Duration) Attachment {
	f.Lock()
	defer f.Unlock()
	id := f.newID()
	path := "/attachments/" + channel + "/" + id + "/" + filename
	f.files[path] = b
	now := time.Now()
	ex := strconv.FormatInt(now.Add(life).Unix(), 16)
	is := strconv.FormatInt(now.Unix(), 16)
	u := base + path + "?ex=" + ex + "&is=" + is + "&hm=" + f.cdnSign(path, ex, is) + "&"
	return Attachment{ID: id, Filename: filename, ContentType: contentType, Size: len(b), URL: u, ProxyURL: u}
}

func (f *API) cdnSign(path, ex, is string) string {
	m := hmac.New(sha256.New, f.cdnKey)
	fmt.Fprintf(m, "%s\x00%s\x00%s", path, ex, is)
	return hex.EncodeToString(m.Sum(nil))
}

// cdn serves an attachment as Discord's CDN does: 404 for an unknown file, a
// bad signature or an expired URL.
func (f *API) cdn(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f.Lock()
	f.calls["cdn"]++
	b, ok := f.files[r.URL.Path]
	good := hmac.Equal([]byte(q.Get("hm")), []byte(f.cdnSign(r.URL.Path, q.Get("ex"), q.Get("is"))))
	f.Unlock()
	ex, err := strconv.ParseInt(q.Get("ex"), 16, 64)
	if !ok || !good || err != nil || time.Now().Unix() >= ex {
		http.Error(w, "This content is no longer available.", http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", http.DetectContentType(b))
	w.Write(b)
}

// Command describes a slash command, for Command.
type Command struct {
	// ID is the interaction's id (ID(name) for a redelivery); empty: a new
	// one.
	ID string
	// Channel and User are where and by whom; Bot marks a bot user.
	Channel, User string
	Bot           bool
	// Name is the command's name; Text, when set, its "text" string option.
	Name, Text string
	// File, when set, is its "file" attachment option.
	File *Attachment
}

// Command returns the body of a slash command interaction (webhook, or the
// d of a Gateway INTERACTION_CREATE) and makes its token known.
func (f *API) Command(c Command) []byte {
	data := map[string]any{"id": "1100000000000000001", "name": c.Name, "type": 1}
	var opts []map[string]any
	if c.Text != "" {
		opts = append(opts, map[string]any{"name": "text", "type": 3, "value": c.Text})
	}
	if c.File != nil {
		opts = append(opts, map[string]any{"name": "file", "type": 11, "value": c.File.ID})
		data["resolved"] = map[string]any{"attachments": map[string]any{c.File.ID: c.File}}
	}
	if opts != nil {
		data["options"] = opts
	}
	return f.interaction(c.ID, 2, c.Channel, c.User, c.Bot, data, nil)
}

// Press describes the press of a component on a message the fake accepted,
// for Press.
type Press struct {
	ID            string
	Channel, User string
	// Message is the id of the message the component is on.
	Message string
	// CustomID is the button's (or the select's) custom_id; Values, for a
	// select, the picked option values.
	CustomID string
	Values   []string
}

// Press returns the body of a component interaction and makes its token
// known. The message goes along with its components, as Discord sends it.
func (f *API) Press(p Press) []byte {
	data := map[string]any{"custom_id": p.CustomID, "component_type": 2}
	if p.Values != nil {
		data["component_type"], data["values"] = 3, p.Values
	}
	msg := map[string]any{"id": p.Message, "channel_id": p.Channel, "author": map[string]any{"id": f.BotUser, "bot": true}}
	if m := f.Message(p.Message); m != nil {
		msg["content"], msg["components"] = m.Content, m.Components
	}
	return f.interaction(p.ID, 3, p.Channel, p.User, false, data, msg)
}

func (f *API) interaction(id string, typ int, channel, user string, bot bool, data, msg map[string]any) []byte {
	f.Lock()
	if id == "" {
		id = f.newID()
	}
	tok := "aW50ZXJhY3Rpb24" + randomHex(40)
	for _, ix := range f.interactions {
		if ix.id == id {
			tok = ix.token // a redelivery: the same interaction
		}
	}
	f.interactions[tok] = &interaction{id: id, token: tok, channel: channel}
	f.Unlock()
	body := map[string]any{"id": id, "application_id": f.appID, "type": typ, "data": data, "channel_id": channel,
		"channel": map[string]any{"id": channel, "type": 0}, "guild_id": "800000000000000001", "token": tok, "version": 1,
		"member": map[string]any{"user": map[string]any{"id": user, "username": "user", "bot": bot}}}
	if msg != nil {
		body["message"] = msg
	}
	b, err := json.Marshal(body)
	if err != nil {
		panic(err)
	}
	return b
}

// apiError writes Discord's JSON error body.
func apiError(w http.ResponseWriter, status, code int, message string, errs any) {
	body := map[string]any{"code": code, "message": message}
	if errs != nil {
		body["errors"] = errs
	}
	fakekit.JSON(w, status, body)
}

// fieldError is a 50035 errors object for one field.
func fieldError(field, code, message string) map[string]any {
	return map[string]any{field: map[string]any{"_errors": []map[string]string{{"code": code, "message": message}}}}
}

// ServeHTTP implements http.Handler.
func (f *API) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/attachments/"):
		f.cdn(w, r)
		return
	case r.URL.Path == "/gateway" || r.URL.Path == "/resume":
		f.Gateway.serve(w, r)
		return
	}
	rest, ok := strings.CutPrefix(r.URL.Path, "/api/v10/")
	if !ok {
		apiError(w, 404, 0, "404: Not Found", nil)
		return
	}
	parts := strings.Split(rest, "/")
	authorized := r.Header.Get("Authorization") == "Bot "+f.token
	route := r.Method + " " + parts[0]
	switch {
	case route == "GET gateway" && len(parts) == 2 && parts[1] == "bot":
		f.count("gateway/bot")
		if !authorized {
			apiError(w, 401, 0, "401: Unauthorized", nil)
			return
		}
		json.NewEncoder(w).Encode(map[string]any{"url": "ws://" + r.Host + "/gateway", "shards": 1,
			"session_start_limit": map[string]int{"total": 1000, "remaining": 999, "reset_after": 14400000, "max_concurrency": 1}})
	case route == "POST channels" && len(parts) == 3 && parts[2] == "messages":
		f.count("messages")
		if !authorized {
			apiError(w, 401, 0, "401: Unauthorized", nil)
			return
		}
		f.create(w, r, parts[1], nil)
	case route == "PATCH channels" && len(parts) == 4 && parts[2] == "messages":
		f.count("edits")
		if !authorized {
			apiError(w, 401, 0, "401: Unauthorized", nil)
			return
		}
		f.edit(w, r, parts[1], parts[3], "")
	case route == "POST channels" && len(parts) == 3 && parts[2] == "typing":
		f.count("typing")
		if !authorized {
			apiError(w, 401, 0, "401: Unauthorized", nil)
			return
		}
		f.Lock()
		defer f.Unlock()
		if !f.Channels[parts[1]] {
			apiError(w, 404, 10003, "Unknown Channel", nil)
			return
		}
		f.Typing = append(f.Typing, parts[1])
		w.WriteHeader(http.StatusNoContent)
	case route == "POST interactions" && len(parts) == 4 && parts[3] == "callback":
		f.count("callbacks")
		f.callback(w, r, parts[1], parts[2])
	case route == "POST webhooks" && len(parts) == 3:
		f.count("followups")
		ix := f.followUp(w, parts[1], parts[2])
		if ix != nil {
			f.create(w, r, ix.channel, ix)
		}
	case route == "PATCH webhooks" && len(parts) == 5 && parts[3] == "messages":
		f.count("edits")
		if ix := f.followUp(w, parts[1], parts[2]); ix != nil {
			f.edit(w, r, ix.channel, parts[4], ix.id)
		}
	default:
		apiError(w, 404, 0, "404: Not Found", nil)
	}
}

func (f *API) count(kind string) {
	f.Lock()
	f.calls[kind]++
	f.Unlock()
}

// followUp finds the live interaction of a webhook path, or answers 404
// Unknown Webhook.
func (f *API) followUp(w http.ResponseWriter, app, token string) *interaction {
	f.Lock()
	defer f.Unlock()
	ix := f.interactions[token]
	if app != f.appID || ix == nil || ix.expired {
		apiError(w, 404, 10015, "Unknown Webhook", nil)
		return nil
	}
	return ix
}

// callback acknowledges an interaction: once, with a type its kind allows.
func (f *API) callback(w http.ResponseWriter, r *http.Request, id, token string) {
	var body struct {
		Type int `json:"type"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		apiError(w, 400, 50109, "The request body contains invalid JSON.", nil)
		return
	}
	f.Lock()
	defer f.Unlock()
	ix := f.interactions[token]
	switch {
	case ix == nil || ix.id != id || ix.expired:
		apiError(w, 404, 10062, "Unknown interaction", nil)
	case ix.acked != 0:
		apiError(w, 400, 40060, "Interaction has already been acknowledged.", nil)
	case body.Type < 4 || body.Type > 7:
		apiError(w, 400, 50035, "Invalid Form Body", fieldError("type", "BASE_TYPE_CHOICES", "Value must be one of {4, 5, 6, 7}."))
	default:
		ix.acked = body.Type
		f.Callbacks = append(f.Callbacks, Callback{ID: id, Type: body.Type})
		w.WriteHeader(http.StatusNoContent)
	}
}

// createBody is a message create or a follow-up as the fake reads it.
type createBody struct {
	Content      *string          `json:"content"`
	Embeds       []map[string]any `json:"embeds"`
	Components   []Component      `json:"components"`
	Nonce        json.RawMessage  `json:"nonce"`
	EnforceNonce bool             `json:"enforce_nonce"`
}

// readBody reads a JSON message body, or answers as Discord does.
func readBody(w http.ResponseWriter, r *http.Request) (createBody, bool) {
	var body createBody
	if !strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
		apiError(w, 400, 50006, "Cannot send an empty message", nil)
		return body, false
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		apiError(w, 400, 50109, "The request body contains invalid JSON.", nil)
		return body, false
	}
	return body, true
}

// text is the body's content ("" when absent).
func (b createBody) text() string {
	if b.Content == nil {
		return ""
	}
	return *b.Content
}

// create accepts a channel message (ix nil) or a follow-up in channel.
func (f *API) create(w http.ResponseWriter, r *http.Request, channel string, ix *interaction) {
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	f.Lock()
	defer f.Unlock()
	if len(f.fail) > 0 {
		e := f.fail[0]
		f.fail = f.fail[1:]
		apiError(w, e.Status, e.Code, e.Message, nil)
		return
	}
	if f.RateLimited() {
		h := w.Header()
		h.Set("Retry-After", strconv.Itoa(int(math.Ceil(f.RetryAfter))))
		h.Set("X-RateLimit-Limit", "5")
		h.Set("X-RateLimit-Remaining", "0")
		h.Set("X-RateLimit-Reset-After", strconv.FormatFloat(f.RetryAfter, 'f', 3, 64))
		if f.Global {
			h.Set("X-RateLimit-Global", "true")
		}
		fakekit.JSON(w, http.StatusTooManyRequests, map[string]any{"message": "You are being rate limited.", "retry_after": f.RetryAfter, "global": f.Global})
		return
	}
	switch {
	case !f.Channels[channel]:
		apiError(w, 404, 10003, "Unknown Channel", nil)
		return
	case f.ClosedDMs[channel]:
		apiError(w, 403, 50007, "Cannot send messages to this user", nil)
		return
	case f.NoAccess[channel]:
		apiError(w, 403, 50013, "Missing Permissions", nil)
		return
	}
	content := body.text()
	if errs := check(content, body.Embeds, body.Components); errs != nil {
		apiError(w, 400, 50035, "Invalid Form Body", errs)
		return
	}
	if content == "" && len(body.Embeds) == 0 && len(body.Components) == 0 {
		apiError(w, 400, 50006, "Cannot send an empty message", nil)
		return
	}
	nonce, ok := readNonce(body.Nonce)
	if !ok {
		apiError(w, 400, 50035, "Invalid Form Body", fieldError("nonce", "BASE_TYPE_MAX_LENGTH", "Must be 25 or fewer in length."))
		return
	}
	if body.EnforceNonce && nonce != "" {
		if id, ok := f.nonces[channel+"\x00"+nonce]; ok {
			for _, m := range f.Sent {
				if m.ID == id {
					f.answer(w, m)
					return
				}
			}
		}
	}
	m := &Message{ID: f.newID(), ChannelID: channel, Content: content, Embeds: body.Embeds, Components: body.Components, Nonce: nonce}
	if ix != nil {
		m.Interaction = ix.id
	}
	if nonce != "" {
		f.nonces[channel+"\x00"+nonce] = m.ID
	}
	f.Sent = append(f.Sent, m)
	if f.Spent && ix == nil {
		w.Header().Set("X-RateLimit-Remaining", "0")
		w.Header().Set("X-RateLimit-Reset-After", strconv.FormatFloat(f.ResetAfter, 'f', 3, 64))
	}
	f.answer(w, m)
}

// answer writes a message object.
func (f *API) answer(w http.ResponseWriter, m *Message) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-RateLimit-Limit", "5")
	if h.Get("X-RateLimit-Remaining") == "" {
		h.Set("X-RateLimit-Remaining", "4")
		h.Set("X-RateLimit-Reset-After", "5.000")
	}
	json.NewEncoder(w).Encode(map[string]any{"id": m.ID, "channel_id": m.ChannelID, "content": m.Content,
		"embeds": m.Embeds, "components": m.Components, "nonce": m.Nonce, "type": 0,
		"author": map[string]any{"id": f.BotUser, "username": "botrun", "bot": true}})
}

// readNonce reads a nonce: a string of at most 25 characters, or an
// integer.
func readNonce(raw json.RawMessage) (string, bool) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", true
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, utf8.RuneCountInString(s) <= 25
	}
	var n json.Number
	if json.Unmarshal(raw, &n) == nil {
		_, err := n.Int64()
		return n.String(), err == nil
	}
	return "", false
}

// edit changes the content of an accepted message in channel (of the
// interaction ixID for a follow-up).
func (f *API) edit(w http.ResponseWriter, r *http.Request, channel, id, ixID string) {
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	f.Lock()
	defer f.Unlock()
	if !f.Channels[channel] {
		apiError(w, 404, 10003, "Unknown Channel", nil)
		return
	}
	var m *Message
	for _, s := range f.Sent {
		if s.ID == id && s.ChannelID == channel && (ixID == "" || s.Interaction == ixID) {
			m = s
		}
	}
	content := body.text()
	switch {
	case m == nil:
		apiError(w, 404, 10008, "Unknown Message", nil)
	case check(content, nil, body.Components) != nil:
		apiError(w, 400, 50035, "Invalid Form Body", check(content, nil, body.Components))
	case content == "" && len(m.Embeds) == 0 && len(m.Components) == 0:
		apiError(w, 400, 50006, "Cannot send an empty message", nil)
	default:
		m.Content = content
		m.Edits++
		f.answer(w, m)
	}
}

// check validates content and components as Discord does, returning a
// 50035 errors object or nil.
func check(content string, embeds []map[string]any, rows []Component) map[string]any {
	if utf8.RuneCountInString(content) > TextLimit {
		return fieldError("content", "BASE_TYPE_MAX_LENGTH", "Must be 2000 or fewer in length.")
	}
	if len(embeds) > 10 {
		return fieldError("embeds", "BASE_TYPE_MAX_LENGTH", "Must be 10 or fewer in length.")
	}
	for _, e := range embeds {
		if img, ok := e["image"].(map[string]any); ok {
			u, _ := img["url"].(string)
			if p, err := url.Parse(u); err != nil || (p.Scheme != "https" && p.Scheme != "http") {
				return fieldError("embeds", "URL_TYPE_INVALID_URL", "Not a well formed URL.")
			}
		}
	}
	bad := func(message string) map[string]any {
		return fieldError("components", "COMPONENT_INVALID", message)
	}
	if len(rows) > 5 {
		return bad("Must be 5 or fewer in length.")
	}
	ids := map[string]bool{}
	for _, row := range rows {
		if row.Type != 1 || len(row.Components) == 0 || len(row.Components) > 5 {
			return bad("An action row holds 1-5 components.")
		}
		for _, c := range row.Components {
			switch c.Type {
			case 2:
				n := utf8.RuneCountInString(c.Label)
				switch {
				case n == 0 || n > 80:
					return bad("A button's label holds 1-80 characters.")
				case c.Style == 5 && (c.URL == "" || c.CustomID != ""):
					return bad("A link button has a url and no custom_id.")
				case c.Style == 5:
					if u, err := url.Parse(c.URL); err != nil || (u.Scheme != "https" && u.Scheme != "http" && u.Scheme != "discord") || len(c.URL) > 512 {
						return bad("Scheme must be one of ('http', 'https', 'discord').")
					}
				case c.Style < 1 || c.Style > 4 || c.URL != "" || c.CustomID == "" || len(c.CustomID) > 100:
					return bad("A button has a style 1-4 and a custom_id of 1-100 characters.")
				case ids[c.CustomID]:
					return bad("Component custom id cannot be duplicated")
				default:
					ids[c.CustomID] = true
				}
			case 3:
				if len(row.Components) != 1 || c.CustomID == "" || len(c.CustomID) > 100 || ids[c.CustomID] ||
					len(c.Options) == 0 || len(c.Options) > 25 || utf8.RuneCountInString(c.Placeholder) > 150 {
					return bad("A select menu is alone in its row, with a custom_id and 1-25 options.")
				}
				ids[c.CustomID] = true
				values := map[string]bool{}
				for _, o := range c.Options {
					if o.Label == "" || utf8.RuneCountInString(o.Label) > 100 || o.Value == "" || len(o.Value) > 100 ||
						utf8.RuneCountInString(o.Description) > 100 || values[o.Value] {
						return bad("A select option has a label and a unique value of 1-100 characters.")
					}
					values[o.Value] = true
				}
			default:
				return bad("Component type must be a button or a select in an action row.")
			}
		}
	}
	return nil
}
