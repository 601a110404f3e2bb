package wamsg

import (
	"testing"
	"time"

	"go.mau.fi/whatsmeow/proto/waE2E"
	"go.mau.fi/whatsmeow/types"
	"go.mau.fi/whatsmeow/types/events"
	"google.golang.org/protobuf/proto"
)

// FuzzDecodeMessage feeds Decode the decrypted protobuf bytes of a
// Message from untrusted senders, as whatsmeow unmarshals and unwraps them:
// it must not panic, and every media reference it makes must decode again.
func FuzzDecodeMessage(f *testing.F) {
	seeds := []*waE2E.Message{
		{Conversation: proto.String("hola")},
		{ExtendedTextMessage: &waE2E.ExtendedTextMessage{Text: proto.String("re"), ContextInfo: &waE2E.ContextInfo{StanzaID: proto.String("3EB0")}}},
		{ImageMessage: &waE2E.ImageMessage{DirectPath: proto.String("/v/t62/1.enc?x=1"), MediaKey: make([]byte, 32), FileSHA256: make([]byte, 32), FileEncSHA256: make([]byte, 32), Caption: proto.String("c")}},
		{ViewOnceMessageV2: &waE2E.FutureProofMessage{Message: &waE2E.Message{VideoMessage: &waE2E.VideoMessage{DirectPath: proto.String("/v")}}}},
		{ButtonsResponseMessage: &waE2E.ButtonsResponseMessage{SelectedButtonID: proto.String("yes")}},
		{InteractiveResponseMessage: &waE2E.InteractiveResponseMessage{InteractiveResponseMessage: &waE2E.InteractiveResponseMessage_NativeFlowResponseMessage_{
			NativeFlowResponseMessage: &waE2E.InteractiveResponseMessage_NativeFlowResponseMessage{ParamsJSON: proto.String(`{"id":"a"}`)}}}},
	}
	for _, m := range seeds {
		b, _ := proto.Marshal(m)
		f.Add(b, false)
	}
	chat := types.NewJID("15552223333", types.DefaultUserServer)
	f.Fuzz(func(t *testing.T, b []byte, isGroup bool) {
		var m waE2E.Message
		if proto.Unmarshal(b, &m) != nil {
			return
		}
		info := types.MessageInfo{ID: "3EB0FUZZ", Timestamp: time.Unix(1, 0), MessageSource: types.MessageSource{Chat: chat, Sender: chat, IsGroup: isGroup}}
		msg, skip := Decode((&events.Message{Info: info, RawMessage: &m}).UnwrapRaw(), true, true)
		if skip != "" {
			return
		}
		if msg.ID == "" || msg.Chat == "" {
			t.Fatalf("admitted without id or chat: %+v", msg)
		}
		for _, md := range msg.Media {
			if md.Ref == "" {
				continue
			}
			if _, err := DecodeRef(md.Ref); err != nil {
				t.Fatalf("a reference it made does not decode: %v", err)
			}
		}
	})
}

// FuzzDecodeMediaRef feeds the stored and live media reference parsers
// untrusted bytes (a journal's, a guest's): a reference that decodes
// validates, and encodes back to itself.
func FuzzDecodeMediaRef(f *testing.F) {
	good := Ref{Type: "image", DirectPath: "/v/t62.7118-24/1_2_n.enc?ccb=11-4", MediaKey: make([]byte, 32), FileSHA256: make([]byte, 32),
		FileEncSHA256: make([]byte, 32), FileLength: 10, MIME: "image/jpeg", Key: MsgKey{ID: "3EB0AA", Chat: "1555@s.whatsapp.net", Sender: "1555@s.whatsapp.net"}}
	f.Add(good.Encode())
	f.Add("wa1.e30")
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		r, err := DecodeRef(s)
		if err != nil {
			DecodeRefJSON([]byte(s))
			return
		}
		if r.Valid() != nil {
			t.Fatal("decoded an invalid reference")
		}
		if again, err := DecodeRef(r.Encode()); err != nil || again.Encode() != r.Encode() {
			t.Fatalf("a decoded reference does not encode back: %v", err)
		}
	})
}
