package config

import "github.com/botrun/botrun/unit"

// Duration is a bot.toml duration (see unit.Duration).
type Duration = unit.Duration

// Size is a bot.toml byte size (see unit.Size).
type Size = unit.Size
