// Package builtin registers botrun's built-in channels and durability
// backends: each package below registers its [[channels]] type or its
// [durability] backend in an init function. cmd/botrun imports it, and so do
// the tests that load a bot.toml. A channel or a backend added to botrun is
// one more line here.
package builtin

import (
	_ "github.com/botrun/botrun/durability/events"
	_ "github.com/botrun/botrun/durability/file"
	_ "github.com/botrun/botrun/durability/memory"
	_ "github.com/botrun/botrun/durability/postgres"
	_ "github.com/botrun/botrun/durability/redis"
	_ "github.com/botrun/botrun/durability/sqlite"
	_ "github.com/botrun/botrun/host/channel/discord"
	_ "github.com/botrun/botrun/host/channel/email"
	_ "github.com/botrun/botrun/host/channel/evolution"
	_ "github.com/botrun/botrun/host/channel/gohighlevel"
	_ "github.com/botrun/botrun/host/channel/gupshup"
	_ "github.com/botrun/botrun/host/channel/httpchan"
	_ "github.com/botrun/botrun/host/channel/instagram"
	_ "github.com/botrun/botrun/host/channel/messenger"
	_ "github.com/botrun/botrun/host/channel/metawhatsapp"
	_ "github.com/botrun/botrun/host/channel/telegram"
	_ "github.com/botrun/botrun/host/channel/tiktok"
	_ "github.com/botrun/botrun/host/channel/twilio"
	_ "github.com/botrun/botrun/host/channel/webchat"
	_ "github.com/botrun/botrun/host/channel/whatsappweb"
	_ "github.com/botrun/botrun/host/channel/wppconnect"
)
