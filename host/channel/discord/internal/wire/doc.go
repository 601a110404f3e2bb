// Package wire is Discord's JSON as botrun reads and writes it: the
// Gateway's frames (Payload and its opcodes), the messages and interactions
// they and the interactions webhook carry, decoded from untrusted bytes
// (DecodePayload, DecodeMessage, DecodeInteraction) and translated to the
// channel SPI's inbound message (Inbound); and the messages botrun creates,
// with their components (MessageBody), from a channel.Outbound.
//
// wire may import the standard library, abi, the channel SPI
// (host/channel) and its toolkit (host/channel/httpkit); it knows no
// transport: the Gateway, the REST calls and the webhook are the discord
// package's.
package wire
