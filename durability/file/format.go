package file

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/durability/memory"
	"github.com/botrun/botrun/internal/journalfile"
)

const snapshotFormat = "botrun-file-journal/1"

type snapshot struct {
	Format string       `json:"format"`
	Seq    int64        `json:"seq"`
	KV     memory.State `json:"kv"`
}

// Snapshot is a decoded snapshot file.
type Snapshot struct {
	Seq int64
	KV  memory.State
}

// DecodeSnapshot parses a snapshot file's bytes.
func DecodeSnapshot(b []byte) (Snapshot, error) {
	var s snapshot
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return Snapshot{}, err
	}
	if s.Format != snapshotFormat {
		return Snapshot{}, fmt.Errorf("format %q, want %q", s.Format, snapshotFormat)
	}
	if dec.More() {
		return Snapshot{}, errors.New("trailing data after the snapshot")
	}
	if s.KV.Items == nil {
		s.KV.Items = map[string]memory.Item{}
	}
	return Snapshot{Seq: s.Seq, KV: s.KV}, nil
}

// encodeSnapshot encodes a snapshot file. Its bytes start with
// {"format":"botrun-file-journal/1","seq":<seq>, which snapshotSeq reads.
func encodeSnapshot(state memory.State, seq int64) ([]byte, error) {
	return json.Marshal(snapshot{Format: snapshotFormat, Seq: seq, KV: state})
}

// snapshotHeader is how encodeSnapshot's output starts, up to the sequence.
const snapshotHeader = `{"format":"` + snapshotFormat + `","seq":`

// snapshotSeq reads the sequence number from the first bytes of a snapshot
// file; ok is false when they are not encodeSnapshot's header.
func snapshotSeq(head []byte) (seq int64, ok bool) {
	rest, found := bytes.CutPrefix(head, []byte(snapshotHeader))
	if !found {
		return 0, false
	}
	end := bytes.IndexByte(rest, ',')
	if end <= 0 {
		return 0, false
	}
	seq, err := strconv.ParseInt(string(rest[:end]), 10, 64)
	return seq, err == nil
}

// entry is one log line: a commit's writes and index ops.
type entry struct {
	Seq    int64      `json:"seq"`
	Writes []logWrite `json:"w"`
}

type logWrite struct {
	Key     string `json:"k"`
	Version int64  `json:"n,omitempty"`
	Value   []byte `json:"v,omitempty"`
	Delete  bool   `json:"d,omitempty"`
	Group   string `json:"g,omitempty"`
	Due     *int64 `json:"due,omitempty"`
	Order   *int64 `json:"o,omitempty"`
}

func newEntry(seq int64, writes []durability.Write) entry {
	e := entry{Seq: seq}
	for _, w := range writes {
		e.Writes = append(e.Writes, logWrite{Key: w.Key, Version: w.Next, Value: w.Value, Delete: w.Delete, Group: w.Group, Due: w.Due, Order: w.Order})
	}
	return e
}

func (e entry) writes() []durability.Write {
	ws := make([]durability.Write, len(e.Writes))
	for i, w := range e.Writes {
		ws[i] = durability.Write{Key: w.Key, Version: durability.AnyVersion, Next: w.Version, Value: w.Value, Delete: w.Delete, Group: w.Group, Due: w.Due, Order: w.Order}
	}
	return ws
}

// CodeAppendLogCorrupt is the code of a log with a bad line before its end.
const CodeAppendLogCorrupt = journalfile.CodeAppendLogCorrupt

// CorruptError is a log that cannot be replayed: a bad line followed by more
// lines. Cutting there would silently drop every later entry, so Open refuses.
type CorruptError = journalfile.CorruptError

// DecodeLog parses a log's bytes. It returns the entries and how many bytes
// hold them: a truncated or unreadable last line is left out (keep is where
// the file should be cut). A bad line with more lines after it is a
// *CorruptError. Sequence numbers must increase.
func DecodeLog(name string, b []byte) (entries []entry, keep int, err error) {
	return journalfile.Scan(name, b, decodeEntry)
}

// decodeEntry reads one log line: one JSON object with only the known
// fields.
func decodeEntry(raw []byte) (entry, int64, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var e entry
	if err := dec.Decode(&e); err != nil {
		return e, 0, err
	}
	if dec.More() {
		return e, 0, errors.New("more than one JSON value on the line")
	}
	return e, e.Seq, nil
}
