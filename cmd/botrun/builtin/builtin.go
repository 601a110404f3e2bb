// Package builtin registers botrun's built-in channels and durability
// backends: each package below registers its [[providers]] type or its
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
	_ "github.com/botrun/botrun/host/provider/discord"
	_ "github.com/botrun/botrun/host/provider/email"
	_ "github.com/botrun/botrun/host/provider/evolution"
	_ "github.com/botrun/botrun/host/provider/gohighlevel"
	_ "github.com/botrun/botrun/host/provider/gupshup"
	_ "github.com/botrun/botrun/host/provider/httpchan"
	_ "github.com/botrun/botrun/host/provider/instagram"
	_ "github.com/botrun/botrun/host/provider/messenger"
	_ "github.com/botrun/botrun/host/provider/metawhatsapp"
	_ "github.com/botrun/botrun/host/provider/telegram"
	_ "github.com/botrun/botrun/host/provider/tiktok"
	_ "github.com/botrun/botrun/host/provider/twilio"
	_ "github.com/botrun/botrun/host/provider/webchat"
	_ "github.com/botrun/botrun/host/provider/whatsappweb"
	_ "github.com/botrun/botrun/host/provider/wppconnect"
)
