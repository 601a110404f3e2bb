// Package config reads bot.toml: strict decoding (an unknown key is an error
// naming the file, line and key), ${VAR} expansion from the environment,
// durations as strings ("15s", "7d") or integer milliseconds, sizes as strings
// ("64MiB") or integer bytes, defaults, and validation with line-precise errors.
//
// It imports only the standard library and BurntSushi/toml.
package config
