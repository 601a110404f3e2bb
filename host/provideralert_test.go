package host

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/durability/memory"
	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/config"
	"github.com/botrun/botrun/host/wasm"
)

// alertingConfig is a channel type of these tests whose provider keeps its
// Env, so a test can raise alerts through it.
type alertingConfig struct{}

func (c *alertingConfig) Check(channel.Setting, channel.Problem) {}

func (c *alertingConfig) Open(env channel.Env) (channel.Channel, error) {
	alertingEnvs <- env
	return alertingProvider(env.ID), nil
}

type alertingProvider string

func (p alertingProvider) ID() string { return string(p) }
func (p alertingProvider) Send(context.Context, channel.Outbound) (string, error) {
	return "", nil
}

var alertingEnvs = make(chan channel.Env, 1)

func init() {
	channel.Register(channel.Type{Name: "test-alerting", Config: func() channel.Config { return &alertingConfig{} }})
}

// TestChannelAlertsReachTheOperator: a channel's Env.Alert is an operator
// alert, with the channel's id.
func TestChannelAlertsReachTheOperator(t *testing.T) {
	src := "[bot]\nmodule = \"unused.wasm\"\n\n[[providers]]\nid = \"dev\"\ntype = \"test-alerting\"\n"
	cfg, err := config.Parse(filepath.Join(t.TempDir(), "bot.toml"), src, func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	b := newTestBot(t, cfg, memory.New(), native(func(context.Context, abi.Event, wasm.Env) error { return nil }))
	defer b.stop(t)
	env := <-alertingEnvs
	env.RaiseAlert("channel:logged_out", "the device was unlinked")
	select {
	case al := <-b.events:
		if al.Provider != "dev" || al.Name != "channel:logged_out" || al.Error != "the device was unlinked" {
			t.Fatalf("alert %+v", al)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no alert")
	}
}
