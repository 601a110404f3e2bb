// Package host is the botrun runtime: it owns a bot's module, its providers
// and the path of every message, from admission through the per-chat queues
// and the WASM handler to the send path.
//
// host imports abi, durability and its own subpackages; nothing imports host
// except cmd/botrun.
package host
