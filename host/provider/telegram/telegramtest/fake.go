// Package telegramtest is a fake Telegram Bot API for tests: it speaks the
// real wire format and rejects what the real API rejects.
package telegramtest

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"unicode/utf8"
)

// API speaks the Bot API's wire format and rejects what it rejects: a
// wrong token, a non-JSON body, an unknown chat, an empty or too long text.
type API struct {
	token string

	mu sync.Mutex
	// Chats exist; Blocked answer 403; Limited calls answer 429.
	Chats   map[int64]bool
	Blocked map[int64]bool
	Limited int
	// Sent are the accepted sends' arguments (with "method").
	Sent []map[string]any
	// Files are the downloadable files by file_id.
	Files map[string][]byte
	// Updates are served to getUpdates.
	Updates   []json.RawMessage
	offsets   []int64
	nextMsgID int64
}

// New returns a fake Bot API for token with the given chats.
func New(token string, chats ...int64) *API {
	f := &API{token: token, Chats: map[int64]bool{}, Blocked: map[int64]bool{}, Files: map[string][]byte{}}
	for _, c := range chats {
		f.Chats[c] = true
	}
	return f
}

// Lock and Unlock guard the exported fields while the fake serves.
func (f *API) Lock() { f.mu.Lock() }

// Unlock releases Lock.
func (f *API) Unlock() { f.mu.Unlock() }

// Offsets returns the offsets getUpdates was called with.
func (f *API) Offsets() []int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]int64(nil), f.offsets...)
}

// Texts returns the texts of the accepted sendMessage calls to chat.
func (f *API) Texts(chat int64) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, s := range f.Sent {
		if s["method"] == "sendMessage" && int64(s["chat_id"].(float64)) == chat {
			out = append(out, s["text"].(string))
		}
	}
	return out
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
	f.mu.Lock()
	defer f.mu.Unlock()
	method := strings.TrimPrefix(r.URL.Path, prefix)
	if method == "getUpdates" {
		off := int64(args["offset"].(float64))
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
	if f.Limited > 0 {
		f.Limited--
		fail(429, "Too Many Requests: retry after 7", 7)
		return
	}
	chat := int64(args["chat_id"].(float64))
	switch {
	case f.Blocked[chat]:
		fail(403, "Forbidden: bot was blocked by the user", 0)
		return
	case !f.Chats[chat]:
		fail(400, "Bad Request: chat not found", 0)
		return
	}
	switch method {
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
	f.nextMsgID++
	args["method"] = method
	f.Sent = append(f.Sent, args)
	json.NewEncoder(w).Encode(map[string]any{"ok": true, "result": map[string]any{"message_id": f.nextMsgID, "chat": map[string]any{"id": chat}}})
}

// download serves {api}/file/bot<token>/<file_path> as the real API does: 404
// for a wrong token or an unknown path.
func (f *API) download(w http.ResponseWriter, r *http.Request) {
	rest, ok := strings.CutPrefix(r.URL.Path, "/file/bot"+f.token+"/photos/")
	f.mu.Lock()
	b, known := f.Files[strings.TrimSuffix(rest, ".jpg")]
	f.mu.Unlock()
	if !ok || !known {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "image/jpeg")
	w.Write(b)
}
