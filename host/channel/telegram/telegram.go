// Package telegram is the Telegram Bot API channel: webhooks verified by the
// secret token header, or getUpdates long polling (no public URL needed);
// sendMessage / sendPhoto / sendDocument with the API errors mapped onto the
// provider taxonomy; 4096-character texts; file_id media references.
//
// Buttons and lists go under a message as an inline keyboard (reply_markup
// {"inline_keyboard": [[button], …]}), on sendMessage and on the media sends
// alike, one button per row so that no title is cut short on a narrow
// screen: a reply button is {"text": title, "callback_data": id}, a URL
// button {"text": title, "url": url}. Telegram has no list widget: a list is
// shown as the same inline keyboard, one button per row, its text the row's
// title and its callback_data the row's id; the list's button title, the
// section titles and the row descriptions are not shown. callback_data holds
// 1-64 bytes: a longer id is refused with channel.ErrUnsupportedContent
// before any request (never cut).
//
// The press of a reply button or a list row arrives as a callback_query
// update (webhook or getUpdates): it is admitted as a message with id
// "cb:<callback_query.id>" carrying an abi.Interaction (the callback_data,
// the pressed button's text as the keyboard under the message shows it, and
// the message's id), then answered with answerCallbackQuery, which the
// Telegram app waits for. A callback without data (a game) or from a bot is
// answered and ignored.
package telegram

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/channel/httpkit"
)

// DefaultAPI is the public Bot API; api_url replaces it (tests, self-hosted
// Bot API servers).
const DefaultAPI = "https://api.telegram.org"

// MaxBody is the largest webhook body accepted.
const MaxBody = 1 << 20

// TextLimit is Telegram's longest text message.
const TextLimit = 4096

// MaxCallbackData is the longest callback_data Telegram takes, in bytes: the
// longest id a reply button or a list row may have on this channel.
const MaxCallbackData = 64

func init() {
	channel.Register(channel.Type{Name: "telegram", Config: func() channel.Config { return &Config{Mode: "webhook"} }})
}

// Config is a [[channels]] entry of type "telegram": a Telegram bot.
type Config struct {
	// ID is the entry's id.
	ID string `toml:"id"`
	// Token is the bot token from @BotFather (use ${ENV}).
	Token string `toml:"token"`
	// SecretToken is checked on every webhook
	// (X-Telegram-Bot-Api-Secret-Token).
	SecretToken string `toml:"secret_token"`
	// Mode is webhook (default) or poll (getUpdates; no public URL needed).
	Mode string `toml:"mode"`
	// APIURL is the Bot API base URL (default https://api.telegram.org).
	APIURL string `toml:"api_url"`
}

var secretToken = regexp.MustCompile(`^[A-Za-z0-9_-]{1,256}$`)

// Check implements channel.Config.
func (c *Config) Check(_ channel.Setting, problem channel.Problem) {
	httpkit.Required(problem, "token", c.Token, "the bot token from @BotFather (use ${ENV} to keep it out of the file)")
	if c.Mode == "" {
		c.Mode = "webhook"
	}
	switch c.Mode {
	case "webhook":
		if !secretToken.MatchString(c.SecretToken) {
			problem("secret_token", "webhook mode needs 1-256 characters of A-Z a-z 0-9 _ - (the secret_token given to setWebhook)")
		}
	case "poll":
	default:
		problem("mode", "%q: want webhook or poll", c.Mode)
	}
	httpkit.CheckAPIURL(c.APIURL, problem)
}

// Open implements channel.Config.
func (c *Config) Open(env channel.Env) (channel.Channel, error) {
	return httpkit.Opened(Open(*c, env))
}

// Provider is one Telegram bot.
type Provider struct {
	httpkit.Base
	cfg Config
	// guard recovers a panic on an update (channel.Env.Guard).
	guard func(what string, f func() error) error
}

// Open returns the channel cfg describes; with mode poll, Run polls.
func Open(cfg Config, env channel.Env) (*Provider, error) {
	p := &Provider{guard: env.Guard}
	if err := p.Open("telegram", cfg.ID, env, cfg.APIURL, DefaultAPI); err != nil {
		return nil, err
	}
	cfg.ID, cfg.APIURL = p.ID(), strings.TrimRight(p.API.String(), "/")
	p.cfg = cfg
	// The API's own origin only: Telegram does not redirect, and every URL
	// holds the token.
	p.Dial(60*time.Second, func(u *url.URL) bool { return httpkit.CredentialsAllowed(u, p.API) })
	return p, nil
}

// TextLimits implements channel.Limiter.
func (p *Provider) TextLimits(channel.Outbound) (chars, bytes int) { return TextLimit, 0 }

// Update is the part of a Telegram Update botrun reads.
type Update struct {
	UpdateID      int64          `json:"update_id"`
	Message       *Message       `json:"message"`
	CallbackQuery *CallbackQuery `json:"callback_query"`
}

// CallbackQuery is the press of an inline keyboard button.
type CallbackQuery struct {
	// ID is the query's id, answered with answerCallbackQuery.
	ID   string `json:"id"`
	From *struct {
		ID    int64 `json:"id"`
		IsBot bool  `json:"is_bot"`
	} `json:"from"`
	// Message is the message the button was on; nil for a message sent in
	// inline mode (InlineMessageID), which botrun never sends.
	Message         *Message `json:"message"`
	InlineMessageID string   `json:"inline_message_id"`
	// Data is the button's callback_data; empty for a game.
	Data string `json:"data"`
}

// InlineKeyboard is a reply_markup of inline keyboard buttons.
type InlineKeyboard struct {
	InlineKeyboard [][]InlineButton `json:"inline_keyboard"`
}

// InlineButton is one inline keyboard button: a callback button
// (CallbackData) or a URL button (URL).
type InlineButton struct {
	Text         string `json:"text"`
	CallbackData string `json:"callback_data,omitempty"`
	URL          string `json:"url,omitempty"`
}

// Message is a Telegram message.
type Message struct {
	MessageID int64  `json:"message_id"`
	Date      int64  `json:"date"`
	Text      string `json:"text"`
	Caption   string `json:"caption"`
	From      *struct {
		ID    int64 `json:"id"`
		IsBot bool  `json:"is_bot"`
	} `json:"from"`
	Chat struct {
		ID int64 `json:"id"`
	} `json:"chat"`
	Photo []struct {
		FileID string `json:"file_id"`
	} `json:"photo"`
	Document *File `json:"document"`
	Video    *File `json:"video"`
	Voice    *File `json:"voice"`
	Audio    *File `json:"audio"`
	Sticker  *File `json:"sticker"`
	// ReplyMarkup is the inline keyboard under the message, if any.
	ReplyMarkup *InlineKeyboard `json:"reply_markup"`
}

// File is a document, video, voice note, audio file or sticker.
type File struct {
	FileID   string `json:"file_id"`
	MimeType string `json:"mime_type"`
}

// ErrBadUpdate is wrapped by every DecodeUpdate error.
var ErrBadUpdate = errors.New("bad update")

// DecodeUpdate parses an Update from untrusted bytes.
func DecodeUpdate(b []byte) (Update, error) {
	var u Update
	if err := json.Unmarshal(b, &u); err != nil {
		return u, fmt.Errorf("%w: %v", ErrBadUpdate, err)
	}
	if u.UpdateID == 0 {
		return u, fmt.Errorf("%w: no update_id", ErrBadUpdate)
	}
	if m := u.Message; m != nil && (m.MessageID == 0 || m.Chat.ID == 0) {
		return u, fmt.Errorf("%w: message without message_id or chat.id", ErrBadUpdate)
	}
	if q := u.CallbackQuery; q != nil {
		if q.ID == "" {
			return u, fmt.Errorf("%w: callback_query without id", ErrBadUpdate)
		}
		if m := q.Message; m != nil && (m.MessageID == 0 || m.Chat.ID == 0) {
			return u, fmt.Errorf("%w: callback_query message without message_id or chat.id", ErrBadUpdate)
		}
	}
	return u, nil
}

// interaction turns a callback_query update into an inbound message carrying
// the press; ok is false for the callbacks botrun ignores (a game's, without
// data; a bot's; one on an inline-mode message, without a chat). Either way
// a callback_query is answered.
func (u Update) interaction() (channel.Message, bool) {
	q := u.CallbackQuery
	if q == nil || q.Data == "" || q.Message == nil || (q.From != nil && q.From.IsBot) {
		return channel.Message{}, false
	}
	out := channel.Message{
		// "cb:" keeps it apart from the "<chat>:<message_id>" of messages.
		ID:   "cb:" + q.ID,
		Chat: strconv.FormatInt(q.Message.Chat.ID, 10),
		Interaction: &abi.Interaction{
			ID:      q.Data,
			Title:   q.Message.ReplyMarkup.title(q.Data),
			Message: strconv.FormatInt(q.Message.MessageID, 10),
		},
	}
	if q.From != nil {
		out.From = strconv.FormatInt(q.From.ID, 10)
	}
	return out, true
}

// title returns the text of the button whose callback_data is data, or "".
func (k *InlineKeyboard) title(data string) string {
	if k == nil {
		return ""
	}
	for _, row := range k.InlineKeyboard {
		for _, b := range row {
			if b.CallbackData == data {
				return b.Text
			}
		}
	}
	return ""
}

// message turns an update into an inbound message; ok is false for updates
// botrun ignores (edits, service messages, the bot's own messages).
func (u Update) message() (channel.Message, bool) {
	m := u.Message
	if m == nil || (m.From != nil && m.From.IsBot) {
		return channel.Message{}, false
	}
	out := channel.Message{
		ID:   strconv.FormatInt(m.Chat.ID, 10) + ":" + strconv.FormatInt(m.MessageID, 10),
		Chat: strconv.FormatInt(m.Chat.ID, 10),
		Text: m.Text,
	}
	if m.From != nil {
		out.From = strconv.FormatInt(m.From.ID, 10)
	}
	if m.Date > 0 {
		out.ReceivedAt = time.Unix(m.Date, 0)
	}
	if len(m.Photo) > 0 {
		out.Media = append(out.Media, channel.Media{Type: "image", Ref: m.Photo[len(m.Photo)-1].FileID, Caption: m.Caption})
	}
	for _, f := range []struct {
		kind string
		file *File
	}{{"document", m.Document}, {"video", m.Video}, {"audio", m.Voice}, {"audio", m.Audio}, {"sticker", m.Sticker}} {
		if f.file != nil && f.file.FileID != "" {
			out.Media = append(out.Media, channel.Media{Type: f.kind, Ref: f.file.FileID, MIME: f.file.MimeType, Caption: m.Caption})
		}
	}
	if out.Text == "" && len(out.Media) == 0 {
		return channel.Message{}, false
	}
	return out, true
}

// Routes implements channel.Router: the webhook.
func (p *Provider) Routes(mux *http.ServeMux) {
	if p.cfg.Mode != "poll" {
		mux.HandleFunc("POST /webhooks/"+p.cfg.ID, p.webhook)
	}
}

func (p *Provider) webhook(w http.ResponseWriter, r *http.Request) {
	got := r.Header.Get("X-Telegram-Bot-Api-Secret-Token")
	if p.cfg.SecretToken == "" || subtle.ConstantTimeCompare([]byte(got), []byte(p.cfg.SecretToken)) != 1 {
		http.Error(w, "bad secret token", http.StatusUnauthorized)
		return
	}
	body, ok := httpkit.ReadWebhook(w, r, MaxBody)
	if !ok {
		return
	}
	u, err := DecodeUpdate(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if err := p.take(r.Context(), u); err != nil {
		httpkit.NotAdmitted(w.Header(), err)
		http.Error(w, "not admitted: "+err.Error(), http.StatusServiceUnavailable) // Telegram retries
		return
	}
	w.WriteHeader(http.StatusOK)
}

// take delivers u, and skips it (nil) when it panics: logged with its
// update_id and counted (the guard). Polled or redelivered again, it would
// panic again, and the updates after it would wait behind it forever.
func (p *Provider) take(ctx context.Context, u Update) error {
	err := p.guard(fmt.Sprintf("taking update_id %d", u.UpdateID), func() error { return p.deliver(ctx, u) })
	if errors.Is(err, channel.ErrPanicked) {
		return nil
	}
	return err
}

// deliver admits what u carries and answers its callback_query, if any, once
// admitted (a duplicate too: a redelivered press still needs its answer). An
// error is an Admit error worth a redelivery; nothing was answered then.
func (p *Provider) deliver(ctx context.Context, u Update) error {
	msg, ok := u.message()
	if !ok {
		msg, ok = u.interaction()
	}
	if ok {
		if _, err := p.Admitter.Admit(ctx, p.cfg.ID, msg); err != nil && !errors.Is(err, channel.ErrInvalidMessage) {
			return err
		}
	}
	if q := u.CallbackQuery; q != nil {
		p.answer(ctx, q.ID)
	}
	return nil
}

// answerTimeout bounds answerCallbackQuery, which outlives a webhook request
// or a poll that ends.
const answerTimeout = 5 * time.Second

// answer acknowledges a callback query, best effort: the press is admitted
// already, and a failure only leaves the user's app waiting a while.
func (p *Provider) answer(ctx context.Context, id string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), answerTimeout)
	defer cancel()
	if err := p.call(ctx, "answerCallbackQuery", map[string]any{"callback_query_id": id}, nil); err != nil {
		p.Log.Warn("telegram: answerCallbackQuery failed", "provider", p.cfg.ID, "err", err)
	}
}

// Run implements channel.Runner: with mode poll, getUpdates long polling
// until ctx ends (with mode webhook it returns at once). An update's offset is
// acknowledged only after its message (or button press) is admitted.
func (p *Provider) Run(ctx context.Context) {
	if p.cfg.Mode != "poll" {
		return
	}
	var offset int64
	for ctx.Err() == nil {
		var updates []json.RawMessage
		err := p.call(ctx, "getUpdates", map[string]any{"offset": offset, "timeout": 25}, &updates)
		if err != nil {
			if ctx.Err() == nil {
				p.Log.Warn("telegram getUpdates failed", "provider", p.cfg.ID, "err", err)
				select {
				case <-time.After(time.Second):
				case <-ctx.Done():
				}
			}
			continue
		}
		var wait time.Duration // before polling again what was not admitted
		for _, raw := range updates {
			u, err := DecodeUpdate(raw)
			if err != nil {
				p.Log.Warn("telegram: bad update skipped", "err", err)
				continue
			}
			if err := p.take(ctx, u); err != nil {
				p.Log.Error("telegram: not admitted; will poll it again", "err", err)
				wait = max(time.Second, httpkit.RetryAfter(err))
				break
			}
			offset = u.UpdateID + 1
		}
		if wait > 0 {
			select {
			case <-time.After(wait):
			case <-ctx.Done():
			}
		}
	}
}

type apiResponse struct {
	OK          bool            `json:"ok"`
	Result      json.RawMessage `json:"result"`
	ErrorCode   int             `json:"error_code"`
	Description string          `json:"description"`
	Parameters  struct {
		RetryAfter int `json:"retry_after"`
	} `json:"parameters"`
}

// call invokes a Bot API method and decodes its result.
func (p *Provider) call(ctx context.Context, method string, args any, result any) error {
	body, err := json.Marshal(args)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.cfg.APIURL+"/bot"+p.cfg.Token+"/"+method, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("telegram %s: %s: bad api_url", p.cfg.ID, method)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := p.Client.Do(req)
	if err != nil {
		// The URL holds the token: never put it in an error.
		return fmt.Errorf("telegram %s: %s: %v", p.cfg.ID, method, redact(err, p.cfg.Token))
	}
	defer resp.Body.Close()
	var r apiResponse
	if err := json.NewDecoder(io.LimitReader(resp.Body, 4<<20)).Decode(&r); err != nil {
		return fmt.Errorf("telegram %s: %s: HTTP %d with an unreadable body", p.cfg.ID, method, resp.StatusCode)
	}
	if !r.OK {
		return apiError(p.cfg.ID, method, r)
	}
	if result != nil {
		return json.Unmarshal(r.Result, result)
	}
	return nil
}

func redact(err error, token string) string {
	if token == "" {
		return err.Error()
	}
	return strings.ReplaceAll(err.Error(), token, "<token>")
}

// apiError maps a Bot API error onto the taxonomy.
func apiError(id, method string, r apiResponse) error {
	cause := fmt.Errorf("telegram %s: %s: %d %s", id, method, r.ErrorCode, r.Description)
	d := strings.ToLower(r.Description)
	switch {
	case r.ErrorCode == 429:
		return &channel.RateLimitedError{RetryAfter: time.Duration(r.Parameters.RetryAfter) * time.Second, Err: cause}
	case r.ErrorCode == 403:
		return fmt.Errorf("%w: %w", channel.ErrRecipientUnreachable, cause)
	case r.ErrorCode == 400 && strings.Contains(d, "chat not found"):
		return fmt.Errorf("%w: %w", channel.ErrRecipientUnreachable, cause)
	case r.ErrorCode == 400 && strings.Contains(d, "too long"):
		return fmt.Errorf("%w: %w", channel.ErrPayloadTooLarge, cause)
	case r.ErrorCode == 400, r.ErrorCode == 401, r.ErrorCode == 404:
		return fmt.Errorf("%w: %w", channel.ErrUnsupportedContent, cause)
	}
	return cause
}

// Edit implements channel.Editor with editMessageText. Telegram refuses an
// edit that changes nothing ("message is not modified"): that is the edit
// already made, so it succeeds.
func (p *Provider) Edit(ctx context.Context, chat, ref, text string) error {
	chatID, err1 := strconv.ParseInt(chat, 10, 64)
	msgID, err2 := strconv.ParseInt(ref, 10, 64)
	if err1 != nil || err2 != nil {
		return fmt.Errorf("%w: telegram edits chat ids and message ids (numbers), not %q/%q", channel.ErrUnsupportedContent, chat, ref)
	}
	err := p.call(ctx, "editMessageText", map[string]any{"chat_id": chatID, "message_id": msgID, "text": text}, nil)
	if err != nil && strings.Contains(err.Error(), "message is not modified") {
		return nil
	}
	return err
}

// Typing implements channel.Typist with sendChatAction "typing" (shown for
// up to 5 seconds, or until the next message).
func (p *Provider) Typing(ctx context.Context, chat, _ string) error {
	chatID, err := strconv.ParseInt(chat, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: telegram chat %q is not a chat id", channel.ErrRecipientUnreachable, chat)
	}
	return p.call(ctx, "sendChatAction", map[string]any{"chat_id": chatID, "action": "typing"}, nil)
}

// Send implements channel.Provider.
func (p *Provider) Send(ctx context.Context, msg channel.Outbound) (string, error) {
	chat, err := strconv.ParseInt(msg.Chat, 10, 64)
	if err != nil {
		return "", fmt.Errorf("%w: telegram chat %q is not a chat id", channel.ErrRecipientUnreachable, msg.Chat)
	}
	markup, err := keyboard(msg.Buttons, msg.List)
	if err != nil {
		return "", fmt.Errorf("telegram %s: %w", p.cfg.ID, err)
	}
	method, args := "sendMessage", map[string]any{"chat_id": chat, "text": msg.Text}
	if m := msg.Media; m != nil {
		field := map[string]string{"image": "photo", "document": "document", "video": "video", "audio": "audio"}[m.Type]
		if field == "" {
			return "", fmt.Errorf("%w: telegram cannot send media of type %q", channel.ErrUnsupportedContent, m.Type)
		}
		src := m.Ref
		if src == "" {
			src = m.URL
		}
		caption := msg.Text
		if m.Caption != "" {
			caption = m.Caption
		}
		method = "send" + strings.ToUpper(field[:1]) + field[1:]
		args = map[string]any{"chat_id": chat, field: src}
		if caption != "" {
			args["caption"] = caption
		}
	}
	if markup != nil {
		args["reply_markup"] = markup
	}
	var sent struct {
		MessageID int64 `json:"message_id"`
	}
	if err := p.call(ctx, method, args, &sent); err != nil {
		return "", err
	}
	return strconv.FormatInt(sent.MessageID, 10), nil
}

// keyboard lays buttons or a list out as an inline keyboard, one button per
// row (nil for none). What Telegram would refuse is refused here, wrapping
// channel.ErrUnsupportedContent: an empty text, an id that is not 1-64 bytes
// of callback_data.
func keyboard(buttons []abi.Button, list *abi.List) (*InlineKeyboard, error) {
	var k InlineKeyboard
	add := func(what, text, id, url string) error {
		if text == "" {
			return fmt.Errorf("%w: %s has no title (Telegram's button text cannot be empty)", channel.ErrUnsupportedContent, what)
		}
		if url != "" {
			k.InlineKeyboard = append(k.InlineKeyboard, []InlineButton{{Text: text, URL: url}})
			return nil
		}
		if id == "" || len(id) > MaxCallbackData {
			return fmt.Errorf("%w: %s id %q is %d bytes; Telegram's callback_data holds 1-%d bytes", channel.ErrUnsupportedContent, what, id, len(id), MaxCallbackData)
		}
		k.InlineKeyboard = append(k.InlineKeyboard, []InlineButton{{Text: text, CallbackData: id}})
		return nil
	}
	for i, b := range buttons {
		if err := add(fmt.Sprintf("buttons[%d]", i), b.Title, b.ID, b.URL); err != nil {
			return nil, err
		}
	}
	if list != nil {
		for i, sec := range list.Sections {
			for j, r := range sec.Rows {
				if err := add(fmt.Sprintf("list.sections[%d].rows[%d]", i, j), r.Title, r.ID, ""); err != nil {
					return nil, err
				}
			}
		}
	}
	if len(k.InlineKeyboard) == 0 {
		return nil, nil
	}
	return &k, nil
}

// SerializeMediaRef implements channel.MediaRefCodec: the file_id, valid
// only with this bot's token (which is not stored).
func (p *Provider) SerializeMediaRef(m channel.Media) (channel.StoredRef, bool) {
	if m.Ref == "" {
		return channel.StoredRef{}, false
	}
	data, _ := json.Marshal(map[string]string{"file_id": m.Ref})
	return channel.StoredRef{V: 1, Data: data}, true
}

// RehydrateMediaRef implements channel.MediaRefCodec.
func (p *Provider) RehydrateMediaRef(s channel.StoredRef) (channel.Media, error) {
	var d struct {
		FileID string `json:"file_id"`
	}
	if s.V != 1 {
		return channel.Media{}, fmt.Errorf("telegram media ref version %d is unknown", s.V)
	}
	if err := json.Unmarshal(s.Data, &d); err != nil || d.FileID == "" || len(d.FileID) > 256 {
		return channel.Media{}, errors.New("telegram media ref is invalid")
	}
	return channel.Media{Ref: d.FileID}, nil
}

// LoadMedia implements channel.MediaLoader: getFile, then the download from
// {api}/file/bot<token>/<file_path>.
func (p *Provider) LoadMedia(ctx context.Context, m channel.Media, max int64) ([]byte, error) {
	if m.Ref == "" {
		return nil, fmt.Errorf("%w: telegram media without a file_id", channel.ErrMediaUnavailable)
	}
	var f struct {
		FilePath string `json:"file_path"`
	}
	if err := p.call(ctx, "getFile", map[string]any{"file_id": m.Ref}, &f); err != nil {
		return nil, err // a permanent error means the file is gone
	}
	if f.FilePath == "" || strings.Contains(f.FilePath, "..") {
		return nil, fmt.Errorf("%w: telegram %s: getFile gave no usable file_path", channel.ErrMediaUnavailable, p.cfg.ID)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.cfg.APIURL+"/file/bot"+p.cfg.Token+"/"+f.FilePath, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: telegram %s: bad file_path", channel.ErrMediaUnavailable, p.cfg.ID)
	}
	return httpkit.Download(p.Client, req, max, func(err error) string { return redact(err, p.cfg.Token) })
}
