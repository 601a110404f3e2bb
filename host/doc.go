// Package host is the botrun runtime's composition root: New builds a bot
// from its config (module, channels, journals) and Run, Stop, Admit,
// Handler and Mount drive it, over packages of one concept each under
// host/internal: rules (the turn's rule book, shared with host/dryrun),
// dispatch (the per-chat queue), worker (the turn runner: claim,
// heartbeat, run, completion or failure, chats' turns under coordination),
// turn (one event's run, its wasm.Env), send (the sender and its outbox),
// lease (record leases, chats' turns, leader elections), sweep (the
// sweeper), reload (the module: its loading and hot reload), guard (the
// channels' panics: recovered, counted, loops restarted), alertsink (the
// [alerts] url: its sink channel and the alerts' forwarding), observe
// (counters, Prometheus metrics, queue depths, last hour, module history,
// alerts, tracing) and clock. A few accessors hand out what the surfaces
// mounted on it use: Operator (host/ops: what an operator reads and does,
// shared with botrun's CLI) and Observer.
//
// Calls run one way, down from host into those packages; none of them
// imports host (internal/archtest checks it). host imports abi,
// durability, the channel SPI, host/wasm, host/config and its own
// subpackages; cmd/botrun, host/admin and host/dryrun's callers import it.
package host
