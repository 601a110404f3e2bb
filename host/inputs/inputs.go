// Package inputs is the record of what a turn's guest read from the host
// beyond its event: the answers of state_get that reached the store and the
// outcomes of media_load (length and digest, or why not; never the bytes).
// The host stores it with the inbound record's completion
// (durability.Completion.Inputs), so a dry run can run the same event through
// another module and answer it exactly as the original turn was answered,
// even after later events changed the state.
package inputs

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
)

// Version is the format of the record this package writes.
const Version = 1

// MaxBytes caps a record's recorded state values and media outcomes (a guest
// is hostile: it may read every key it can name). Past it the record says
// TooLarge and holds nothing else: the turn goes on, and a dry run reports the
// record as not replayable.
const MaxBytes = 256 << 10

// Record is one turn's recorded inputs.
type Record struct {
	// V is the format version (Version).
	V int `json:"v"`
	// State are the state_get answers that came from the store, first read
	// of each key only, in read order.
	State []StateRead `json:"state,omitempty"`
	// Media are the media_load outcomes, first load of each index only.
	Media []MediaLoad `json:"media,omitempty"`
	// TooLarge says the inputs were over MaxBytes and were not kept.
	TooLarge bool `json:"too_large,omitempty"`
}

// StateRead is one state_get answer: the key as the guest named it, and its
// value then (Found false: absent).
type StateRead struct {
	Key   string `json:"k"`
	Value []byte `json:"v,omitempty"`
	Found bool   `json:"ok,omitempty"`
}

// MediaLoad is one media_load outcome: Len and SHA256 of the bytes, or the
// reason the media was unavailable (abi.MediaUnavailableError), or the kind
// of error the guest got (ErrTooLarge, ErrUnsupported).
type MediaLoad struct {
	Index   int    `json:"i"`
	Len     int    `json:"n,omitempty"`
	SHA256  string `json:"sha256,omitempty"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
	Err     string `json:"err,omitempty"`
}

// Error kinds of MediaLoad.Err.
const (
	ErrTooLarge    = "too-large"
	ErrUnsupported = "unsupported"
)

// empty is the record of a turn that read nothing: "recorded, nothing read",
// distinct from no record at all.
var empty = []byte(`{"v":1}`)

// Recorder records a turn's inputs. The zero value is ready; a turn that
// reads nothing allocates nothing.
type Recorder struct {
	rec  Record
	size int
}

// State records a state_get answer from the store; the caller records each
// key's first store read only (a later read answers the same, or the turn's
// own write).
func (r *Recorder) State(key string, value []byte, found bool) {
	if r.rec.TooLarge {
		return
	}
	if !r.grow(len(key) + len(value) + 16) {
		return
	}
	r.rec.State = append(r.rec.State, StateRead{Key: key, Value: append([]byte(nil), value...), Found: found})
}

// Media records a media_load outcome by its bytes.
func (r *Recorder) Media(index int, b []byte) {
	sum := sha256.Sum256(b)
	r.media(MediaLoad{Index: index, Len: len(b), SHA256: hex.EncodeToString(sum[:])})
}

// MediaUnavailable records a media_load that had no bytes: the reason and
// message of an abi.MediaUnavailableError, or an error kind (ErrTooLarge,
// ErrUnsupported) with reason empty.
func (r *Recorder) MediaUnavailable(index int, reason, message, kind string) {
	r.media(MediaLoad{Index: index, Reason: reason, Message: message, Err: kind})
}

func (r *Recorder) media(m MediaLoad) {
	if r.rec.TooLarge {
		return
	}
	for _, o := range r.rec.Media {
		if o.Index == m.Index {
			return
		}
	}
	if r.grow(len(m.SHA256) + len(m.Reason) + len(m.Message) + len(m.Err) + 16) {
		r.rec.Media = append(r.rec.Media, m)
	}
}

func (r *Recorder) grow(n int) bool {
	r.size += n
	if r.size > MaxBytes {
		r.rec = Record{TooLarge: true}
		return false
	}
	return true
}

// Bytes is the record, compact JSON; never empty.
func (r *Recorder) Bytes() []byte {
	if !r.rec.TooLarge && len(r.rec.State) == 0 && len(r.rec.Media) == 0 {
		return empty
	}
	rec := r.rec
	rec.V = Version
	b, err := json.Marshal(rec)
	if err != nil { // not reachable: the record is plain data
		return []byte(`{"v":1,"too_large":true}`)
	}
	return b
}

// Parse reads a record. Empty b (a record completed before inputs were
// recorded) and a version this package does not know are errors.
func Parse(b []byte) (Record, error) {
	if len(b) == 0 {
		return Record{}, fmt.Errorf("inputs not recorded (the record was completed before this botrun recorded them)")
	}
	var rec Record
	if err := json.Unmarshal(b, &rec); err != nil {
		return Record{}, fmt.Errorf("recorded inputs are unreadable: %w", err)
	}
	if rec.V != Version {
		return Record{}, fmt.Errorf("recorded inputs are version %d; this botrun reads version %d", rec.V, Version)
	}
	return rec, nil
}
