// Package messengertest is a fake Messenger Send API for tests: the Messenger
// Platform fake (messagingtest) with Messenger's rules (POST
// /v21.0/me/messages with the page token, messaging_type required, texts of
// at most 2,000 characters), and Messenger's webhook bodies (object "page").
package messengertest

import (
	"unicode/utf8"

	"github.com/botrun/botrun/host/channel/graph/messaging/messagingtest"
)

// Version is the Graph version the fake serves under: api_url is
// <server URL>/<Version>.
const Version = "v21.0"

// New returns a fake Send API for the page token, with recipients (PSIDs).
func New(pageToken string, recipients ...string) *messagingtest.API {
	return messagingtest.New(messagingtest.Options{
		Token: pageToken, Path: "/" + Version + "/me/messages", MessagingType: true,
		TooLong: func(text string) string {
			if utf8.RuneCountInString(text) > 2000 {
				return "(#100) Length of param message[text] must be less than or equal to 2000"
			}
			return ""
		},
	}, recipients...)
}

// Notification is a webhook body for pageID carrying events built with
// messagingtest (Text, Media, QuickReplyPress, PostbackPress, Echo, …).
func Notification(pageID string, events ...map[string]any) []byte {
	return messagingtest.Body("page", pageID, events...)
}
