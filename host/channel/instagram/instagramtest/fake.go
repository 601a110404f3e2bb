// Package instagramtest is a fake Instagram Send API for tests: the
// Messenger Platform fake (messagingtest) with Instagram's rules (POST
// /v21.0/{account_id}/messages with the Bearer token, texts of at most
// 1,000 bytes of UTF-8), and Instagram's webhook bodies (object
// "instagram").
package instagramtest

import (
	"github.com/botrun/botrun/host/channel/graph/messaging/messagingtest"
)

// Version is the Graph version the fake serves under: api_url is
// <server URL>/<Version>.
const Version = "v21.0"

// New returns a fake Send API for the account and token, with recipients
// (IGSIDs).
func New(token, accountID string, recipients ...string) *messagingtest.API {
	return messagingtest.New(messagingtest.Options{
		Token: token, Path: "/" + Version + "/" + accountID + "/messages",
		TooLong: func(text string) string {
			if len(text) > 1000 {
				return "(#100) Length of param message[text] must be less than or equal to 1000 bytes"
			}
			return ""
		},
	}, recipients...)
}

// Notification is a webhook body for accountID carrying events built with
// messagingtest (Text, Media, QuickReplyPress, PostbackPress, Echo, …).
func Notification(accountID string, events ...map[string]any) []byte {
	return messagingtest.Body("instagram", accountID, events...)
}
