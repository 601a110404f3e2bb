package rules

import "github.com/botrun/botrun/abi"

// Kind is what an outbox record is: a send to a channel, or one of the
// host's own records. The journal keeps the kind in the record's provider
// field (an id starting with '_', which no [[providers]] id can be), so the
// records of every earlier version read the same.
type Kind int

const (
	// KindSend is a send to a configured channel.
	KindSend Kind = iota
	// KindAlert is an alert for the operator's webhook ([alerts] url).
	KindAlert
	// KindAfterSend runs botrun_after_send once its send is delivered.
	KindAfterSend
	// KindInternal is a host record of a kind this version does not know.
	KindInternal
)

// The provider ids the journal keeps the host's own kinds under.
const (
	// AlertsChannel is the id of the internal channel that POSTs alerts to
	// [alerts] url.
	AlertsChannel = "_alerts"
	// AfterSendChannel is the id under which the records that run
	// botrun_after_send are journaled: one per send of a module that
	// exports it, keyed AfterSendKey(send key) and journaled with the send,
	// so the outbox runs the hook at least once after the send was
	// delivered, whatever crashes.
	AfterSendChannel = "_after_send"
)

// KindOf is the kind of an outbox record journaled under provider.
func KindOf(provider string) Kind {
	switch {
	case provider == AlertsChannel:
		return KindAlert
	case provider == AfterSendChannel:
		return KindAfterSend
	case Internal(provider):
		return KindInternal
	}
	return KindSend
}

// Internal reports whether id is one of the host's own channels (alerts,
// after_send), which no [[providers]] id can name.
func Internal(id string) bool { return id != "" && id[0] == '_' }

// AfterSendKey is the key of the after_send record of the send keyed key.
func AfterSendKey(key string) string { return key + abi.ReservedKeySuffix }
