package admin

// The built-in channels and backends, registered as cmd/botrun registers
// them, for the tests that build bots from a bot.toml.
import (
	_ "github.com/botrun/botrun/durability/file"
	_ "github.com/botrun/botrun/durability/memory"
	_ "github.com/botrun/botrun/durability/postgres"
	_ "github.com/botrun/botrun/durability/redis"
	_ "github.com/botrun/botrun/durability/sqlite"
	_ "github.com/botrun/botrun/host/provider/httpchan"
	_ "github.com/botrun/botrun/host/provider/metawhatsapp"
	_ "github.com/botrun/botrun/host/provider/telegram"
	_ "github.com/botrun/botrun/host/provider/twilio"
	_ "github.com/botrun/botrun/host/provider/webchat"
)
