// Package guestsdk holds the sources of the C, Rust and AssemblyScript
// guest SDKs for "botrun new", which copies the SDK of its language into
// the new project (botrun-sdk/): the project builds wherever it is moved,
// with no path to a botrun checkout. The Go SDK is a module of its own and
// embeds its sources itself (guest-sdk/go, Sources).
package guestsdk

import "embed"

// Sources are the SDKs' files, by their path under guest-sdk/.
//
//go:embed c/botrun.c c/botrun.h rust/src/*.rs assemblyscript/assembly/*.ts
var Sources embed.FS
