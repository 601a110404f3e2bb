package wire

import (
	"errors"
	"strings"
	"testing"
)

// FuzzDecodeInteraction: any bytes decode to an interaction or to
// ErrBadPayload; a command or a press that is admitted has an id, a chat and
// (a press) the pressed id.
func FuzzDecodeInteraction(f *testing.F) {
	f.Add([]byte(`{"id":"1200000000000000001","application_id":"1","type":1,"token":"t","version":1}`))
	f.Add([]byte(`{"id":"1200000000000000002","type":2,"token":"tok","channel_id":"7","member":{"user":{"id":"6"}},"data":{"name":"ask","options":[{"name":"text","type":3,"value":"hola"},{"name":"file","type":11,"value":"9"}],"resolved":{"attachments":{"9":{"id":"9","url":"https://cdn.discordapp.com/a/b/c.png","content_type":"image/png"}}}}}`))
	f.Add([]byte(`{"id":"1200000000000000003","type":2,"token":"tok","channel_id":"7","user":{"id":"6"},"data":{"name":"config","options":[{"name":"set","type":1,"options":[{"name":"n","type":4,"value":5},{"name":"on","type":5,"value":null}]}]}}`))
	f.Add([]byte(`{"id":"1200000000000000004","type":3,"token":"tok","channel_id":"7","user":{"id":"6"},"message":{"id":"8","channel_id":"7","components":[{"type":1,"components":[{"type":2,"style":1,"label":"Yes","custom_id":"yes"},null]}]},"data":{"custom_id":"yes","component_type":2}}`))
	f.Add([]byte(`{"id":"1200000000000000005","type":3,"token":"tok","channel_id":"7","user":{"id":"6","bot":true},"data":{"custom_id":"botrun:list","component_type":3,"values":[]}}`))
	f.Add([]byte(`{"id":"12","type":2,"token":"../x","channel_id":"7","data":{}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		ix, err := DecodeInteraction(b)
		if err != nil {
			if !errors.Is(err, ErrBadPayload) {
				t.Fatal(err)
			}
			return
		}
		m, ok := ix.Inbound()
		if !ok {
			return
		}
		if m.ID == "" || m.Chat == "" || strings.ContainsAny(ix.Token, "/?#%") {
			t.Fatalf("admitted %+v (token %q) from %q", m, ix.Token, b)
		}
		if ix.Type == InteractionComponent && (m.Interaction == nil || m.Interaction.ID == "") {
			t.Fatalf("a press without its id from %q", b)
		}
		if ix.Type == InteractionCommand && m.Text == "" && len(m.Media) == 0 {
			t.Fatalf("an empty command from %q", b)
		}
	})
}

// FuzzDecodePayload: any bytes decode to a Gateway frame or to
// ErrBadPayload, and a MESSAGE_CREATE's data to a message or to
// ErrBadPayload; an admitted message has an id, a chat and an author who is
// no bot.
func FuzzDecodePayload(f *testing.F) {
	f.Add([]byte(`{"op":10,"d":{"heartbeat_interval":41250}}`))
	f.Add([]byte(`{"op":11}`))
	f.Add([]byte(`{"op":9,"d":false}`))
	f.Add([]byte(`{"op":0,"s":2,"t":"MESSAGE_CREATE","d":{"id":"13","channel_id":"7","type":0,"author":{"id":"6"},"content":"hola","timestamp":"2026-01-02T03:04:05.678+00:00","attachments":[{"id":"9","filename":"a.png","content_type":"image/png","size":3,"url":"https://cdn.discordapp.com/a/b/a.png?ex=1&"}]}}`))
	f.Add([]byte(`{"op":0,"s":3,"t":"MESSAGE_CREATE","d":{"id":"14","channel_id":"7","author":{"id":"1","bot":true},"content":"mine"}}`))
	f.Add([]byte(`{"op":0,"s":4,"t":"MESSAGE_CREATE","d":{"id":"15","channel_id":"7","webhook_id":"2","author":{"id":"1"},"content":"hook"}}`))
	f.Add([]byte(`{"op":0,"s":0,"t":"READY","d":{}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := DecodePayload(b)
		if err != nil {
			if !errors.Is(err, ErrBadPayload) {
				t.Fatal(err)
			}
			return
		}
		if p.Op == OpDispatch && (p.S <= 0 || p.T == "") {
			t.Fatalf("a dispatch without seq or type from %q", b)
		}
		if p.T != "MESSAGE_CREATE" {
			return
		}
		m, err := DecodeMessage(p.D)
		if err != nil {
			if !errors.Is(err, ErrBadPayload) {
				t.Fatal(err)
			}
			return
		}
		if msg, ok := m.Inbound(); ok && (msg.ID == "" || msg.Chat == "" || m.Author == nil || m.Author.Bot || (msg.Text == "" && len(msg.Media) == 0)) {
			t.Fatalf("admitted %+v from %q", msg, b)
		}
	})
}
