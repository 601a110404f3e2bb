// Package host is the composition root of a bot: New builds one from its
// config (the journals, the module, the channels) and Run, Stop, Admit,
// Handler and Mount drive it; a few accessors hand out what the surfaces
// mounted on it use: Operator (host/ops: what an operator reads and does,
// shared with botrun's CLI) and Observer (host/internal/observe: counters,
// Prometheus metrics, queue depths, last hour, module history, alerts).
//
// The path of every message, from admission through the per-chat queues and
// the WASM handler to the send path, is wired here over host's own
// packages: each concept in one package under host/internal (observe, …),
// calls running down from host to them and never back up.
//
// host imports abi, durability, its own subpackages and host/internal/...;
// none of those imports host. host is imported by cmd/botrun, host/admin
// (the admin API and console) and host/dryrun.
package host
