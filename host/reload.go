package host

import "github.com/botrun/botrun/host/internal/send"

// SendHooks is implemented by a Guest that runs the module's send hooks
// (botrun_before_send and botrun_after_send, abi/SPEC.md section 4.7); see
// send.Hooks.
type SendHooks = send.Hooks
