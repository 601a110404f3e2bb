package file

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/durability/memory"
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
const CodeAppendLogCorrupt = "APPEND_LOG_CORRUPT"

// CorruptError is a log that cannot be replayed: a bad line followed by more
// lines. Cutting there would silently drop every later entry, so Open refuses.
type CorruptError struct {
	Code string
	File string
	Line int
	Byte int
	Err  error
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("file journal %s: %s at line %d (byte %d): %v (restore it from a backup or move it aside)", e.File, e.Code, e.Line, e.Byte, e.Err)
}

// Unwrap returns the parse error.
func (e *CorruptError) Unwrap() error { return e.Err }

// DecodeLog parses a log's bytes. It returns the entries and how many bytes
// hold them: a truncated or unreadable last line is left out (keep is where
// the file should be cut). A bad line with more lines after it is a
// *CorruptError. Sequence numbers must increase.
func DecodeLog(name string, b []byte) (entries []entry, keep int, err error) {
	off, line := 0, 0
	for off < len(b) {
		line++
		end := bytes.IndexByte(b[off:], '\n')
		last := end < 0
		if last {
			end = len(b) - off
		}
		raw := b[off : off+end]
		var e entry
		perr := decodeEntry(raw)
		if perr == nil {
			perr = json.Unmarshal(raw, &e)
		}
		if perr == nil && len(entries) > 0 && e.Seq <= entries[len(entries)-1].Seq {
			perr = fmt.Errorf("sequence %d after %d", e.Seq, entries[len(entries)-1].Seq)
		}
		if perr != nil || last {
			rest := bytes.TrimSpace(b[min(off+end+1, len(b)):])
			if perr != nil && len(rest) > 0 {
				return nil, 0, &CorruptError{Code: CodeAppendLogCorrupt, File: name, Line: line, Byte: off, Err: perr}
			}
			// The last line: complete lines end in '\n'; one without it, or
			// one that does not parse, was cut by a crash.
			if perr != nil || last {
				return entries, off, nil
			}
		}
		entries = append(entries, e)
		off += end + 1
	}
	return entries, off, nil
}

// decodeEntry checks a line is one JSON object with only the known fields.
func decodeEntry(raw []byte) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var e entry
	if err := dec.Decode(&e); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("more than one JSON value on the line")
	}
	if e.Seq <= 0 {
		return fmt.Errorf("sequence %d is not positive", e.Seq)
	}
	return nil
}
