package twilio

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/host/channel"
)

// SMS and WhatsApp through Twilio have no buttons: a send's reply buttons and
// list rows become numbered lines ("1. Yes"), URL buttons "Title: url" lines,
// and the numbered choices are remembered per chat. A reply that is just one
// of those numbers ("2") arrives as the press of the second choice.

// choice is one numbered choice of the last send with choices to a chat.
type choice struct {
	ID    string `json:"id"`
	Title string `json:"title"`
}

// choices remembers each chat's numbered choices, in the backend's Kv when
// the host gives one (they survive a restart), else in memory.
type choices struct {
	kv     durability.Kv
	prefix string

	mu  sync.Mutex
	mem map[string][]choice
}

func (c *choices) key(chat string) string { return c.prefix + chat }

// set replaces chat's choices (none: forgets them).
func (c *choices) set(ctx context.Context, chat string, cs []choice) error {
	if c.kv == nil {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.mem == nil {
			c.mem = map[string][]choice{}
		}
		if len(cs) == 0 {
			delete(c.mem, chat)
		} else {
			c.mem[chat] = cs
		}
		return nil
	}
	b, _ := json.Marshal(cs)
	return c.kv.Commit(ctx, []durability.Write{{Key: c.key(chat), Version: durability.AnyVersion, Value: b, Delete: len(cs) == 0}})
}

// get returns chat's choices.
func (c *choices) get(ctx context.Context, chat string) ([]choice, error) {
	if c.kv == nil {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.mem[chat], nil
	}
	b, v, err := c.kv.Get(ctx, c.key(chat))
	if err != nil || v == 0 {
		return nil, err
	}
	var cs []choice
	if err := json.Unmarshal(b, &cs); err != nil {
		return nil, fmt.Errorf("twilio: remembered choices of %s: %w", chat, err)
	}
	return cs, nil
}

// withChoices returns the body that shows msg's choices as text, and the
// numbered ones.
func withChoices(msg channel.Outbound) (string, []choice) {
	var lines []string
	var cs []choice
	number := func(id, title, desc string) {
		cs = append(cs, choice{ID: id, Title: title})
		line := strconv.Itoa(len(cs)) + ". " + title
		if desc != "" {
			line += " (" + desc + ")"
		}
		lines = append(lines, line)
	}
	for _, b := range msg.Buttons {
		if b.URL != "" {
			lines = append(lines, b.Title+": "+b.URL)
			continue
		}
		number(b.ID, b.Title, "")
	}
	if l := msg.List; l != nil {
		for _, sec := range l.Sections {
			if sec.Title != "" {
				lines = append(lines, sec.Title+":")
			}
			for _, r := range sec.Rows {
				number(r.ID, r.Title, r.Description)
			}
		}
	}
	if len(lines) == 0 {
		return msg.Text, nil
	}
	body := strings.Join(lines, "\n")
	if msg.Text != "" {
		body = msg.Text + "\n" + body
	}
	if len(cs) > 0 {
		body += "\n(reply with a number)"
	}
	return body, cs
}

// pressOf turns a reply that is one of chat's choice numbers into its press.
func (p *Provider) pressOf(ctx context.Context, msg *channel.Message) error {
	n, err := strconv.Atoi(strings.TrimSpace(msg.Text))
	if err != nil || n < 1 || len(msg.Media) > 0 {
		return nil
	}
	cs, err := p.choices.get(ctx, msg.Chat)
	if err != nil || n > len(cs) {
		return err
	}
	msg.Interaction = &abi.Interaction{ID: cs[n-1].ID, Title: cs[n-1].Title}
	return nil
}
