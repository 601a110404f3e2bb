// Package durability is the journal SPI of botrun: the inbox journal that
// records every inbound message before a handler runs, the outbox journal that
// records every send under an idempotency key before a channel is called, the
// records and states they hold, leases and fencing tokens, scopes, and the small
// Kv interface from which KvDurability builds both journals for any store.
//
// Every backend (memory, file, events, sqlite, postgres, redis) implements
// Backend and passes durabilitytest.Run unchanged. Times are Unix milliseconds
// passed in by the caller, so the contract is testable without a clock.
//
// durability imports only the standard library; it never imports host or abi.
package durability
