package admin

// The built-in channels and backends, registered as cmd/botrun registers
// them, for the tests that build bots from a bot.toml.
import _ "github.com/botrun/botrun/cmd/botrun/builtin"
