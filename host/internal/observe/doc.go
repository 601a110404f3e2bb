// Package observe is the bot's observability: its durability counters and
// Prometheus instruments and collectors, the queue depths, the last hour a
// minute at a time and the module's history (the console's charts), the
// alerts and their listeners, and the tracing helpers (spans and the log
// handler that tags lines with their trace id).
//
// observe imports durability, internal/groupcommit, the Prometheus client
// and OpenTelemetry's trace API; never github.com/botrun/botrun/host (which
// builds an Observer and hands it out through Bot.Observer), and no
// exporter: botrun builds the OTLP exporter and passes it in
// (host.Options.TracerProvider). Its types the admin API shows (Metrics,
// Minute, ModuleChange, Alert) are read by host/admin, which may import it.
// Its Counters are the one set of counters of the message path: host hands
// the same *Counters to the sender (host/internal/send), the turn
// (host/internal/turn) and the worker, which import observe; observe
// imports none of them.
package observe
