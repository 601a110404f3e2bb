package abi

// Names of the exports a v1 module must provide.
const (
	// ExportMarker is the function whose presence says "this is ABI v1".
	ExportMarker = "botrun_abi_v1"
	// ExportOnEvent is the one exported entry point, (len i32) -> i32.
	ExportOnEvent = "botrun_on_event"
	// ExportMemory is the guest memory the host reads and writes.
	ExportMemory = "memory"
	// ExportInitialize is the optional reactor start function.
	ExportInitialize = "_initialize"
	// ExportBeforeSend is the optional send hook run before a send is
	// journaled, (len i32) -> i32: it may rewrite or cancel the send.
	ExportBeforeSend = "botrun_before_send"
	// ExportAfterSend is the optional send hook run after a send was
	// delivered, (len i32) -> i32, at least once per send.
	ExportAfterSend = "botrun_after_send"
)

// Names of the host modules a guest may import from.
const (
	// HostModule is the module that holds the botrun host functions.
	HostModule = "botrun"
	// WASIModule is the WASI preview 1 module.
	WASIModule = "wasi_snapshot_preview1"
	// EnvModule holds env.abort, which AssemblyScript's runtime imports.
	EnvModule = "env"
)

// Host function names in HostModule.
const (
	FuncEventRead   = "event_read"
	FuncSend        = "send"
	FuncEnqueue     = "enqueue"
	FuncPost        = "post"
	FuncResultRead  = "result_read"
	FuncStateGet    = "state_get"
	FuncStateSet    = "state_set"
	FuncStateDelete = "state_delete"
	FuncLog         = "log"
	FuncNowMs       = "now_ms"
	FuncMediaLoad   = "media_load"
	FuncBroadcast   = "broadcast"
	FuncEdit        = "edit"
	FuncTyping      = "typing"
	FuncRewrite     = "rewrite"
	FuncFetch       = "fetch"
)

// Status is what botrun_on_event returns.
type Status int32

// Handler statuses.
const (
	// StatusOK means the event was handled.
	StatusOK Status = 0
	// StatusHandlerError means the handler returned an error; the host reports it
	// and does not retry, because the handler's effects already happened.
	StatusHandlerError Status = 1
	// StatusCancel is botrun_before_send's answer that cancels the send.
	StatusCancel Status = 2
)

// Code is a negative result of a host function: an error the guest can act on.
type Code int32

// Error codes returned by host functions.
const (
	CodeBadPointer  Code = -1
	CodeBadPayload  Code = -2
	CodeNotFound    Code = -3
	CodeUnsupported Code = -4
	CodeTooLarge    Code = -5
	CodeNoResult    Code = -6
	CodeHostError   Code = -7
	// CodeMediaUnavailable answers media_load when the media's bytes cannot be
	// had; the pending result is a MediaUnavailable JSON naming the reason.
	CodeMediaUnavailable Code = -8
	// CodeChannelFailed answers edit or typing when the channel refused or
	// failed: the event goes on; the pending result is {"error":…} (at most
	// 1 KiB).
	CodeChannelFailed Code = -9
	// CodeFetchFailed answers fetch when the call got no response (refused
	// destination, connection, timeout, a response over the API's
	// max_response): the event goes on; the pending result is a FetchError.
	CodeFetchFailed Code = -10
)

// String names the code as SPEC.md does.
func (c Code) String() string {
	switch c {
	case CodeBadPointer:
		return "BAD_POINTER"
	case CodeBadPayload:
		return "BAD_PAYLOAD"
	case CodeNotFound:
		return "NOT_FOUND"
	case CodeUnsupported:
		return "UNSUPPORTED"
	case CodeTooLarge:
		return "TOO_LARGE"
	case CodeNoResult:
		return "NO_RESULT"
	case CodeHostError:
		return "HOST_ERROR"
	case CodeMediaUnavailable:
		return "MEDIA_UNAVAILABLE"
	case CodeChannelFailed:
		return "CHANNEL_FAILED"
	case CodeFetchFailed:
		return "FETCH_FAILED"
	}
	return "UNKNOWN"
}

// Log levels accepted by the log host function.
const (
	LogDebug int32 = 0
	LogInfo  int32 = 1
	LogWarn  int32 = 2
	LogError int32 = 3
)

// Limits on what a guest may pass to the host.
const (
	// MaxPayload is the largest JSON payload a guest may pass.
	MaxPayload = 1 << 20
	// MaxStateKey is the longest state key.
	MaxStateKey = 64 << 10
	// MaxMedia is the largest media file media_load returns.
	MaxMedia = 20 << 20
	// MaxStateKeys is how many distinct state keys one event may set or
	// delete.
	MaxStateKeys = 64
	// MaxStateBytes is how many bytes of keys and values one event's state
	// writes may hold (a key written twice counts once, at its last value).
	MaxStateBytes = 1 << 20
)

// Reasons a media file is unavailable to media_load.
const (
	// MediaNotDurable: the channel gave no reference that survives a restart,
	// and the live one was not journaled.
	MediaNotDurable = "not-durable"
	// MediaProviderMismatch: the stored reference belongs to a provider that is
	// not this event's, or that no longer reads references.
	MediaProviderMismatch = "provider-mismatch"
	// MediaRehydrateFailed: the stored reference did not validate, or the
	// channel no longer has the file.
	MediaRehydrateFailed = "rehydrate-failed"
)

// MediaUnavailableError is why media_load has no bytes for a media; it is the
// JSON result that comes with CodeMediaUnavailable.
type MediaUnavailableError struct {
	Reason  string `json:"reason"`
	Message string `json:"message,omitempty"`
}

func (e *MediaUnavailableError) Error() string {
	if e.Message == "" {
		return "media unavailable: " + e.Reason
	}
	return "media unavailable: " + e.Reason + ": " + e.Message
}
