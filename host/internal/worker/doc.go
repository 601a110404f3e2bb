// Package worker is the turn runner: what a dispatcher's worker does with
// a queued job. A claimed send goes to the sender; an inbound record is
// claimed (unless admission or the sweeper already did), its lease kept by
// a heartbeat started with its turn, its journaled event (media rebuilt)
// run against the guest, and the turn completed with its buffered state
// writes, or failed to a retry or the dead-letter queue. With [durability]
// coordination, it runs a record under its chat's turn (lease.ChatTurns):
// the holder runs the chat's unfinished records oldest first, and a record
// whose chat's turn another replica holds is parked for that holder.
//
// worker imports abi, durability, host/channel, host/wasm and
// host/internal/{clock,dispatch,lease,observe,rules,send,sweep,turn}; it
// never imports host. It reads time only through its Config's clock.
package worker
