//go:build !wasip1

package bot

import "embed"

// Sources are this SDK's files (its go.mod, its sources and the hook
// packages'), for "botrun new" to copy into a new project: the project
// builds wherever it is moved. Not in a guest: a module built for wasip1
// leaves them out.
//
//go:embed go.mod *.go aftersend/*.go beforesend/*.go
var Sources embed.FS
