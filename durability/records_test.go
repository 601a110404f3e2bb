package durability

import (
	"encoding/json"
	"testing"
)

// FuzzDecodeInboxRecord feeds stored-record bytes (what the SQLite, file and
// custom Kv backends hand back) to the decoder: it must never panic, and what
// it accepts must encode and decode to the same record.
func FuzzDecodeInboxRecord(f *testing.F) {
	good, _ := json.Marshal(InboxRecord{ID: "web:1", Chat: "c1", Payload: []byte(`{"id":"web:1"}`), State: InboxProcessing, Attempts: 2, Token: 3, LeaseUntil: 99})
	f.Add(good)
	f.Add([]byte(`{"id":1}`))
	f.Add([]byte(`{"payload":"!!"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		rec, err := decodeRecord[InboxRecord](b)
		if err != nil {
			return
		}
		again, _ := json.Marshal(rec)
		back, err := decodeRecord[InboxRecord](again)
		if err != nil || back.ID != rec.ID || back.State != rec.State || back.Token != rec.Token || string(back.Payload) != string(rec.Payload) {
			t.Fatalf("round trip of %q: %+v %v", b, back, err)
		}
	})
}

func FuzzDecodeOutboxRecord(f *testing.F) {
	good, _ := json.Marshal(OutboxRecord{Key: "web:1:1", Chat: "c1", Payload: []byte(`{"text":"hi"}`), State: OutboxSent, Ref: "7", PreviousPart: "k"})
	f.Add(good)
	f.Add([]byte(`{"state":5}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		rec, err := decodeRecord[OutboxRecord](b)
		if err != nil {
			return
		}
		again, _ := json.Marshal(rec)
		back, err := decodeRecord[OutboxRecord](again)
		if err != nil || back.Key != rec.Key || back.State != rec.State || back.Ref != rec.Ref {
			t.Fatalf("round trip of %q: %+v %v", b, back, err)
		}
	})
}
