package httpkit

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/botrun/botrun/host/channel"
)

// StoreURL is the stored form of a media reference that is a URL (a signed
// CDN URL, a URL fetched with credentials added at download):
// {"v":1,"data":{"url":…}}. The caller checks the URL is one it may fetch.
func StoreURL(u string) channel.StoredRef {
	data, _ := json.Marshal(map[string]string{"url": u})
	return channel.StoredRef{V: 1, Data: data}
}

// StoredURL returns the URL of a StoreURL form; an unknown version, bad data
// or a URL allowed refuses is an error.
func StoredURL(s channel.StoredRef, allowed func(string) bool) (string, error) {
	if s.V != 1 {
		return "", fmt.Errorf("media ref version %d is unknown", s.V)
	}
	var d struct {
		URL string `json:"url"`
	}
	if err := json.Unmarshal(s.Data, &d); err != nil || !allowed(d.URL) {
		return "", errors.New("media ref is invalid or not on an allowed host")
	}
	return d.URL, nil
}

// CaptionText is the text of a message that carries a media's caption and
// a text in one place: the caption, a blank line, the text (either alone
// when the other is empty or both are the same).
func CaptionText(caption, text string) string {
	switch {
	case caption == "" || caption == text:
		return text
	case text == "":
		return caption
	}
	return caption + "\n\n" + text
}
