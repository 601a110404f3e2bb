package httpkit

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"time"

	"github.com/botrun/botrun/host/channel"
)

// Base is what an HTTP channel embeds: the entry's id, the host's admitter
// and logger, the API's base URL and the guarded client to it. Open fills
// it from the entry and the Env, the way every HTTP channel's constructor
// did; the channel keeps its own config, wire format and error table.
type Base struct {
	id string
	// Admitter journals the channel's inbound messages (Env.Admitter).
	Admitter channel.Admitter
	// Log is the channel's logger (Env.Log).
	Log *slog.Logger
	// API is the API's base URL: api_url without its trailing slash, or
	// the channel's default.
	API *url.URL
	// Client is the guarded client to API (NewClient), made by Dial.
	Client *http.Client
}

// Open fills b for the entry id (env.ID when empty) of the channel kind
// (its name in errors: "tiktok"), whose API is apiURL, or def when apiURL
// is empty; an apiURL that is no absolute http(s) URL is an error.
func (b *Base) Open(kind, id string, env channel.Env, apiURL, def string) error {
	if id == "" {
		id = env.ID
	}
	api, err := APIBase(apiURL, def)
	if err != nil {
		return fmt.Errorf("%s %s: %w", kind, id, err)
	}
	*b = Base{id: id, Admitter: env.Admitter, Log: env.Log(), API: api}
	return nil
}

// Dial makes Client: a NewClient to API with timeout, whose redirects
// follow only the URLs allowed accepts (nil: none).
func (b *Base) Dial(timeout time.Duration, allowed func(*url.URL) bool) {
	b.Client = NewClient(timeout, b.API, allowed)
}

// ID implements channel.Channel: the entry's id.
func (b *Base) ID() string { return b.id }

// Answer admits a webhook's messages for the channel and answers it, as
// AdmitAndAnswer does.
func (b *Base) Answer(w http.ResponseWriter, r *http.Request, msgs ...channel.Message) {
	AdmitAndAnswer(w, r, b.Admitter, b.id, msgs...)
}
