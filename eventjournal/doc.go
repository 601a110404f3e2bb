// Package eventjournal is an application's append-only event journal, usable
// without any bot: Append events (each on a channel, with a type, a time and
// a payload), List them by channel, type, state and time, Replay one, and let
// workers Claim due events under a lease with a fencing token, Extend,
// Complete or Fail them. A claim without a channel takes only events without
// a channel.
//
// Two journals keep it in one local file, in the format of botrun's file
// journal (a JSON snapshot written atomically, plus an optional append log):
//
//   - FileEventJournal: one process. With Lock, a pid lock file refuses a
//     second process, and a second open of the same file in this process
//     until Close.
//   - SharedFileEventJournal: a few processes on one host. Every operation
//     runs under a cross-process mutex (<file>.mutex) over the current file,
//     so claims are exclusive and fencing tokens hold across processes.
//
// A file that a live locked FileEventJournal holds is refused by the shared
// journal, and the other way round. The channels and event ids that start
// with "botrun:" are botrun's own: durability/events keeps a bot's inbox there
// (channel botrun:durable), so a bot can share the application's journal.
//
// events imports durability (its Kv, errors and the file store) and the
// standard library; it never imports host.
package eventjournal
