package wamsg

import (
	"fmt"
	"strings"

	"go.mau.fi/whatsmeow/types"

	"github.com/botrun/botrun/host/channel"
)

// ParseChat reads a send's chat: a JID (a user's "…@s.whatsapp.net" or
// "…@lid", a group's "…@g.us"), or a phone number in international format.
func ParseChat(chat string) (types.JID, error) {
	if !strings.Contains(chat, "@") {
		digits, err := PhoneDigits(chat)
		if err != nil {
			return types.JID{}, fmt.Errorf("%w: chat %q is neither a WhatsApp JID nor a phone number", channel.ErrRecipientUnreachable, chat)
		}
		return types.NewJID(digits, types.DefaultUserServer), nil
	}
	jid, err := types.ParseJID(chat)
	if err != nil || jid.User == "" || jid.Device != 0 ||
		(jid.Server != types.DefaultUserServer && jid.Server != types.HiddenUserServer && jid.Server != types.GroupServer) {
		return types.JID{}, fmt.Errorf("%w: chat %q is not a WhatsApp user or group JID", channel.ErrRecipientUnreachable, chat)
	}
	return jid, nil
}

// PhoneDigits returns the digits of an international phone number.
func PhoneDigits(s string) (string, error) {
	var d strings.Builder
	for i, r := range s {
		switch {
		case r >= '0' && r <= '9':
			d.WriteRune(r)
		case r == '+' && i == 0, r == ' ', r == '-', r == '(', r == ')':
		default:
			return "", fmt.Errorf("%q: want the account's number in international format, e.g. \"+15551234567\"", s)
		}
	}
	n := d.String()
	if len(n) < 7 || len(n) > 15 || n[0] == '0' {
		return "", fmt.Errorf("%q: want the account's number in international format with its country code, e.g. \"+15551234567\"", s)
	}
	return n, nil
}
