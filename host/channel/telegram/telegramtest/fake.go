// Package telegramtest is a fake Telegram Bot API for tests: it speaks the
// real wire format and rejects what the real API rejects.
package telegramtest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/botrun/botrun/host/channel/internal/fakekit"
)

// MaxCallbackData is the longest callback_data the Bot API takes, in bytes.
const MaxCallbackData = 64

// API speaks the Bot API's wire format and rejects what it rejects: a
// wrong token, a non-JSON body, an unknown chat, an empty or too long text,
// an inline keyboard with an empty button text, a callback_data that is not
// 1-64 bytes or a bad button URL; answerCallbackQuery for a query it never
// issued (see Press).
type API struct {
	token string

	// Kit: Limited calls answer 429; Sent are the accepted sends'
	// arguments (with "method" and the "message_id" the fake gave the
	// message). Its Media is unused: Files are the telegram files.
	fakekit.Kit[map[string]any]
	// Chats exist; Blocked answer 403.
	Chats   map[int64]bool
	Blocked map[int64]bool
	// Files are the downloadable files by file_id.
	Files map[string][]byte
	// Updates are served to getUpdates.
	Updates []json.RawMessage
	// Answered are the callback query ids answerCallbackQuery accepted, in
	// order (an id answered twice is there twice).
	Answered []string
	// Actions are the accepted sendChatAction calls, as "chat:action".
	Actions []string

	offsets   []int64
	nextMsgID int64
	calls     map[string]int
	queries   map[string]bool
	markups   map[int64]json.RawMessage // reply_markup by message_id
}

// New returns a fake Bot API for token with the given chats.
func New(token string, chats ...int64) *API {
	f := &API{token: token, Chats: map[int64]bool{}, Blocked: map[int64]bool{}, Files: map[string][]byte{},
		calls: map[string]int{}, queries: map[string]bool{}, markups: map[int64]json.RawMessage{}}
	for _, c := range chats {
		f.Chats[c] = true
	}
	return f
}

// Offsets returns the offsets getUpdates was called with.
func (f *API) Offsets() []int64 {
	f.Lock()
	defer f.Unlock()
	return append([]int64(nil), f.offsets...)
}

// Texts returns the texts of the accepted sendMessage calls to chat.
func (f *API) Texts(chat int64) []string {
	return f.Collect(func(s map[string]any) (string, bool) {
		if s["method"] != "sendMessage" || int64(s["chat_id"].(float64)) != chat {
			return "", false
		}
		return s["text"].(string), true
	})
}

// Calls returns how many requests named method (with the right token) the
// fake received, accepted or not.
func (f *API) Calls(method string) int {
	f.Lock()
	defer f.Unlock()
	return f.calls[method]
}

// AnsweredQueries returns a copy of Answered.
func (f *API) AnsweredQueries() []string {
	f.Lock()
	defer f.Unlock()
	return append([]string(nil), f.Answered...)
}

// ReplyMarkup returns the reply_markup the accepted send of messageID
// carried (normalized JSON), or nil.
func (f *API) ReplyMarkup(messageID int64) json.RawMessage {
	f.Lock()
	defer f.Unlock()
	return f.markups[messageID]
}

// Keyboard returns the inline keyboard the accepted send of messageID
// carried, or nil.
func (f *API) Keyboard(messageID int64) [][]Button {
	var k struct {
		InlineKeyboard [][]Button `json:"inline_keyboard"`
	}
	if json.Unmarshal(f.ReplyMarkup(messageID), &k) != nil {
		return nil
	}
	return k.InlineKeyboard
}

// Button is an inline keyboard button as the fake recorded it.
type Button struct {
	Text         string `json:"text"`
	CallbackData string `json:"callback_data,omitempty"`
	URL          string `json:"url,omitempty"`
}

// Callback describes the press of an inline keyboard button, for Press.
type Callback struct {
	// UpdateID is the update's update_id.
	UpdateID int64
	// ID is the callback query's id; Press makes it answerable.
	ID string
	// From is the user who pressed; FromBot marks a bot.
	From    int64
	FromBot bool
	// Chat and MessageID are the message the button was on. When the fake
	// sent MessageID, its reply_markup goes along, as Telegram does.
	Chat      int64
	MessageID int64
	// Data is the button's callback_data; empty (a game's) leaves it out.
	Data string
}

// Press returns the body of a callback_query update (webhook or getUpdates)
// for c, and lets answerCallbackQuery accept c.ID.
func (f *API) Press(c Callback) []byte {
	f.Lock()
	f.queries[c.ID] = true
	markup := f.markups[c.MessageID]
	f.Unlock()
	return CallbackUpdate(c, markup)
}

// CallbackUpdate returns the body of a callback_query update for c with the
// message's reply_markup (nil for none), without registering c.ID with a
// fake.
func CallbackUpdate(c Callback, markup json.RawMessage) []byte {
	msg := map[string]any{"message_id": c.MessageID, "date": 1764412800, "chat": map[string]any{"id": c.Chat, "type": "private"},
		"from": map[string]any{"id": 1, "is_bot": true, "first_name": "bot"}}
	if markup != nil {
		msg["reply_markup"] = markup
	}
	q := map[string]any{"id": c.ID, "from": map[string]any{"id": c.From, "is_bot": c.FromBot, "first_name": "user"},
		"message": msg, "chat_instance": "-1"}
	if c.Data != "" {
		q["data"] = c.Data
	}
	b, err := json.Marshal(map[string]any{"update_id": c.UpdateID, "callback_query": q})
	if err != nil {
		panic(err)
	}
	return b
}

// checkMarkup validates a reply_markup as the Bot API does (an object, or
// the same serialized in a string) and returns it normalized, or the API's
// error description.
func checkMarkup(v any) (json.RawMessage, string) {
	if s, ok := v.(string); ok {
		var obj any
		if json.Unmarshal([]byte(s), &obj) != nil {
			return nil, "Bad Request: can't parse reply keyboard markup JSON object"
		}
		v = obj
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, "Bad Request: can't parse reply keyboard markup JSON object"
	}
	var k struct {
		InlineKeyboard [][]map[string]any `json:"inline_keyboard"`
	}
	if json.Unmarshal(raw, &k) != nil || k.InlineKeyboard == nil {
		return nil, "Bad Request: can't parse reply keyboard markup JSON object"
	}
	for _, row := range k.InlineKeyboard {
		for _, b := range row {
			text, _ := b["text"].(string)
			if text == "" {
				return nil, "Bad Request: text buttons are unallowed in the inline keyboard (a button's text is empty)"
			}
			data, hasData := b["callback_data"]
			link, hasURL := b["url"]
			switch {
			case hasData && hasURL:
				return nil, "Bad Request: can't parse inline keyboard button: exactly one of the optional fields must be used"
			case hasData:
				d, ok := data.(string)
				if !ok || d == "" || len(d) > MaxCallbackData {
					return nil, "Bad Request: BUTTON_DATA_INVALID"
				}
			case hasURL:
				s, _ := link.(string)
				u, err := url.Parse(s)
				if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http" && u.Scheme != "tg") {
					return nil, "Bad Request: BUTTON_URL_INVALID"
				}
			default:
				return nil, "Bad Request: text buttons are unallowed in the inline keyboard"
			}
		}
	}
	return raw, ""
}

// ServeHTTP implements http.Handler.
func (f *API) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	fail := func(code int, desc string, retry int) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		body := map[string]any{"ok": false, "error_code": code, "description": desc}
		if retry > 0 {
			body["parameters"] = map[string]any{"retry_after": retry}
		}
		json.NewEncoder(w).Encode(body)
	}
	if r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/file/bot") {
		f.download(w, r)
		return
	}
	prefix := "/bot" + f.token + "/"
	if !strings.HasPrefix(r.URL.Path, prefix) {
		fail(401, "Unauthorized", 0)
		return
	}
	if r.Header.Get("Content-Type") != "application/json" {
		fail(400, "Bad Request: unsupported content type", 0)
		return
	}
	var args map[string]any
	if err := json.NewDecoder(r.Body).Decode(&args); err != nil {
		fail(400, "Bad Request: can't parse JSON", 0)
		return
	}
	f.Lock()
	defer f.Unlock()
	method := strings.TrimPrefix(r.URL.Path, prefix)
	f.calls[method]++
	if method == "getUpdates" {
		o, _ := args["offset"].(float64)
		off := int64(o)
		f.offsets = append(f.offsets, off)
		var out []json.RawMessage
		for _, u := range f.Updates {
			var id struct {
				UpdateID int64 `json:"update_id"`
			}
			json.Unmarshal(u, &id)
			if id.UpdateID >= off {
				out = append(out, u)
			}
		}
		json.NewEncoder(w).Encode(map[string]any{"ok": true, "result": out})
		return
	}
	if method == "getFile" {
		id, _ := args["file_id"].(string)
		if _, ok := f.Files[id]; !ok {
			fail(400, "Bad Request: invalid file_id", 0)
			return
		}
		json.NewEncoder(w).Encode(map[string]any{"ok": true, "result": map[string]any{"file_id": id, "file_path": "photos/" + id + ".jpg"}})
		return
	}
	if method == "answerCallbackQuery" {
		id, _ := args["callback_query_id"].(string)
		if id == "" || !f.queries[id] {
			fail(400, "Bad Request: query is too old and response timeout expired or query ID is invalid", 0)
			return
		}
		f.Answered = append(f.Answered, id)
		json.NewEncoder(w).Encode(map[string]any{"ok": true, "result": true})
		return
	}
	if f.RateLimited() {
		fail(429, "Too Many Requests: retry after 7", 7)
		return
	}
	chatID, _ := args["chat_id"].(float64)
	chat := int64(chatID)
	switch {
	case f.Blocked[chat]:
		fail(403, "Forbidden: bot was blocked by the user", 0)
		return
	case !f.Chats[chat]:
		fail(400, "Bad Request: chat not found", 0)
		return
	}
	switch method {
	case "sendChatAction":
		switch action, _ := args["action"].(string); action {
		case "typing", "upload_photo", "record_video", "upload_video", "record_voice", "upload_voice", "upload_document", "choose_sticker", "find_location":
			f.Actions = append(f.Actions, fmt.Sprintf("%d:%s", chat, action))
			json.NewEncoder(w).Encode(map[string]any{"ok": true, "result": true})
		default:
			fail(400, "Bad Request: wrong parameter action in request", 0)
		}
		return
	case "editMessageText":
		id, _ := args["message_id"].(float64)
		text, _ := args["text"].(string)
		var sent map[string]any
		for _, m := range f.Sent {
			if m["message_id"] == id && m["chat_id"] == chatID {
				sent = m
			}
		}
		switch {
		case sent == nil:
			fail(400, "Bad Request: message to edit not found", 0)
		case text == "":
			fail(400, "Bad Request: message text is empty", 0)
		case utf8.RuneCountInString(text) > 4096:
			fail(400, "Bad Request: MESSAGE_TOO_LONG", 0)
		case sent["text"] == text:
			fail(400, "Bad Request: message is not modified: specified new message content and reply markup are exactly the same as a current content and reply markup of the message", 0)
		default:
			sent["text"] = text
			json.NewEncoder(w).Encode(map[string]any{"ok": true, "result": map[string]any{"message_id": int64(id), "chat": map[string]any{"id": chat}, "text": text}})
		}
		return
	case "sendMessage":
		text, _ := args["text"].(string)
		if text == "" {
			fail(400, "Bad Request: message text is empty", 0)
			return
		}
		if utf8.RuneCountInString(text) > 4096 {
			fail(400, "Bad Request: message is too long", 0)
			return
		}
	case "sendPhoto", "sendDocument":
		if args[strings.ToLower(strings.TrimPrefix(method, "send"))] == nil {
			fail(400, "Bad Request: there is no photo in the request", 0)
			return
		}
	default:
		fail(404, "Not Found: method not found", 0)
		return
	}
	var markup json.RawMessage
	if v, ok := args["reply_markup"]; ok {
		var desc string
		if markup, desc = checkMarkup(v); desc != "" {
			fail(400, desc, 0)
			return
		}
	}
	f.nextMsgID++
	if markup != nil {
		f.markups[f.nextMsgID] = markup
	}
	args["method"] = method
	args["message_id"] = float64(f.nextMsgID)
	f.Sent = append(f.Sent, args)
	json.NewEncoder(w).Encode(map[string]any{"ok": true, "result": map[string]any{"message_id": f.nextMsgID, "chat": map[string]any{"id": chat}}})
}

// download serves {api}/file/bot<token>/<file_path> as the real API does: 404
// for a wrong token or an unknown path.
func (f *API) download(w http.ResponseWriter, r *http.Request) {
	rest, ok := strings.CutPrefix(r.URL.Path, "/file/bot"+f.token+"/photos/")
	f.Lock()
	b, known := f.Files[strings.TrimSuffix(rest, ".jpg")]
	f.Unlock()
	if !ok || !known {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "image/jpeg")
	w.Write(b)
}
