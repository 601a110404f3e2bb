package main

// The built-in channels and durability backends (see package builtin).
import _ "github.com/botrun/botrun/cmd/botrun/builtin"
