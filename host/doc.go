// Package host is the botrun runtime's composition root: New builds a bot
// from its config (module, channels, journals) over the packages of the
// message path under host/internal, each one concept: rules (the turn's
// rule book, shared with host/dryrun), dispatch (the per-chat queue), turn
// (one event's run, its wasm.Env), send (the sender and its outbox),
// lease (record leases and chats' turns), sweep (the sweeper) and clock.
// Calls run one way, down from host into those packages; they never import
// host.
//
// host imports abi, durability and its own subpackages; cmd/botrun and
// host/admin import it.
package host
