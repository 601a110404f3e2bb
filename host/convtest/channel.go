package convtest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/host/channel"
)

// channelID is the test channel's id: the conversation's records are
// "test:<message id>".
const channelID = "test"

// testChannel is the channel of a conversation test: it records what the
// bot sends and edits, in order. It is idempotent (a send's key delivers
// once), so a crash around a send never loses or doubles it: what a
// --crash run finds different is the bot's doing.
type testChannel struct {
	mu    sync.Mutex
	got   []Reply
	byKey map[string]string
	// msgs are the messages sent, by ref, for presses and edits.
	msgs map[string]*sent
	last map[string]string // chat -> the ref of the latest message with choices
	refs int
	// dir is the test file's directory: an attachment's file is there.
	dir string
}

type sent struct {
	chat    string
	text    string
	buttons []abi.Button
	list    *abi.List
}

func newTestChannel(dir string) *testChannel {
	return &testChannel{byKey: map[string]string{}, msgs: map[string]*sent{}, last: map[string]string{}, dir: dir}
}

// LoadMedia implements channel.MediaLoader: an attachment's bytes are its
// file's, beside the test; a file that is not there (or a path that leaves
// the test's directory) is unavailable, as a channel's expired media is.
func (c *testChannel) LoadMedia(_ context.Context, m channel.Media, max int64) ([]byte, error) {
	if !filepath.IsLocal(m.Ref) {
		return nil, fmt.Errorf("%w: %q is not a file beside the test", channel.ErrMediaUnavailable, m.Ref)
	}
	b, err := os.ReadFile(filepath.Join(c.dir, m.Ref))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", channel.ErrMediaUnavailable, err)
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("%w: %s is %d bytes, over the %d the bot may load", channel.ErrMediaTooLarge, m.Ref, len(b), max)
	}
	return b, nil
}

// ID implements channel.Channel.
func (c *testChannel) ID() string { return channelID }

// IdempotentSends implements channel.Idempotent.
func (c *testChannel) IdempotentSends() bool { return true }

// Send implements channel.Channel.
func (c *testChannel) Send(_ context.Context, out channel.Outbound) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ref, ok := c.byKey[out.Key]; ok && out.Key != "" {
		return ref, nil
	}
	c.refs++
	ref := fmt.Sprintf("r%d", c.refs)
	c.byKey[out.Key] = ref
	c.msgs[ref] = &sent{chat: out.Chat, text: out.Text, buttons: out.Buttons, list: out.List}
	if len(out.Buttons) > 0 || out.List != nil {
		c.last[out.Chat] = ref
	}
	c.got = append(c.got, Reply{Chat: out.Chat, Text: out.Text, Extra: extra(out)})
	return ref, nil
}

// Edit implements channel.Editor: an edit that changes the message's text
// is a reply ("<~ text"); one that leaves it as it is (a replay's) is not.
func (c *testChannel) Edit(_ context.Context, chat, ref, text string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	m, ok := c.msgs[ref]
	if !ok || m.chat != chat {
		return fmt.Errorf("the test channel sent no message %q in chat %q", ref, chat)
	}
	if m.text == text {
		return nil
	}
	m.text = text
	c.got = append(c.got, Reply{Chat: chat, Text: text, Edit: true})
	return nil
}

// Typing implements channel.Typist: the test shows nothing of it.
func (c *testChannel) Typing(context.Context, string, string) error { return nil }

// replies returns what the bot did from index from on, and the next index.
func (c *testChannel) replies(from int) ([]Reply, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Reply(nil), c.got[from:]...), len(c.got)
}

// press finds the button or list row titled title on the latest message
// with choices in chat.
func (c *testChannel) press(chat, title string) (*abi.Interaction, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ref, ok := c.last[chat]
	if !ok {
		return nil, fmt.Errorf("no message in chat %q has buttons or a list to press [%s] on", chat, title)
	}
	m := c.msgs[ref]
	var titles []string
	for _, b := range m.buttons {
		if b.URL == "" && b.Title == title {
			return &abi.Interaction{ID: b.ID, Title: b.Title, Message: ref}, nil
		}
		titles = append(titles, "["+b.Title+"]")
	}
	if m.list != nil {
		for _, s := range m.list.Sections {
			for _, r := range s.Rows {
				if r.Title == title {
					return &abi.Interaction{ID: r.ID, Title: r.Title, Message: ref}, nil
				}
				titles = append(titles, "["+r.Title+"]")
			}
		}
	}
	return nil, fmt.Errorf("the latest message with choices in chat %q (%q) has no button or row [%s]; it has %s", chat, short(m.text), title, strings.Join(titles, " "))
}

// extra is the indented line a send's buttons, list or media show as.
func extra(out channel.Outbound) string {
	var parts []string
	if m := out.Media; m != nil {
		where := m.URL
		if where == "" {
			where = m.Ref
		}
		parts = append(parts, "("+m.Type+" "+where+")")
	}
	if len(out.Buttons) > 0 {
		var bs []string
		for _, b := range out.Buttons {
			if b.URL != "" {
				bs = append(bs, "["+b.Title+"]("+b.URL+")")
			} else {
				bs = append(bs, "["+b.Title+"]")
			}
		}
		parts = append(parts, strings.Join(bs, " "))
	}
	if l := out.List; l != nil {
		var rows []string
		for _, s := range l.Sections {
			for _, r := range s.Rows {
				rows = append(rows, r.Title)
			}
		}
		parts = append(parts, "{"+l.Button+": "+strings.Join(rows, " | ")+"}")
	}
	return strings.Join(parts, " ")
}
