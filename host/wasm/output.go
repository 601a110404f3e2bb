package wasm

import (
	"bytes"
	"context"
	"log/slog"
	"sync"
)

// guestOutput turns a guest's stdout or stderr into log lines tagged with the
// module and the event being handled. Partial lines are held until a newline or
// the end of the event.
type guestOutput struct {
	mu     sync.Mutex
	logger *slog.Logger
	stream string
	event  string
	buf    bytes.Buffer
}

const maxOutputLine = 8 << 10

func (o *guestOutput) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.buf.Write(p)
	for {
		i := bytes.IndexByte(o.buf.Bytes(), '\n')
		if i < 0 {
			if o.buf.Len() > maxOutputLine {
				o.emit(o.buf.Next(maxOutputLine))
			}
			return len(p), nil
		}
		o.emit(o.buf.Next(i + 1)[:i])
	}
}

// flush logs a trailing partial line and sets the event for the next lines.
func (o *guestOutput) flush(nextEvent string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.buf.Len() > 0 {
		o.emit(o.buf.Bytes())
		o.buf.Reset()
	}
	o.event = nextEvent
}

func (o *guestOutput) emit(line []byte) {
	o.logger.LogAttrs(context.Background(), slog.LevelInfo, string(line),
		slog.String("stream", o.stream), slog.String("event", o.event))
}
