// Package wamsg is WhatsApp Web's messages as botrun reads, journals and
// addresses them: a whatsmeow message event decoded into the channel SPI's
// inbound message, or the reason it is ignored (Decode); the media
// reference, its live and journaled forms and the message whatsmeow
// downloads from it (Ref, DecodeRef, DecodeRefJSON); the HTTP client that
// caps a media download at its limit (MediaClient, WithMediaLimit); and a
// send's chat, a JID or a phone number (ParseChat, PhoneDigits).
//
// wamsg may import the standard library, whatsmeow's types and protobufs,
// abi and the channel SPI (host/channel); it holds no connection and no
// state: the session is the whatsappweb package's.
package wamsg
