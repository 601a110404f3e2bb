// Package journalfile holds the files of a journal kept in one local file:
// the snapshot written atomically, the append log with its corruption rules
// (a torn last line is trimmed, a bad line before the end is refused with
// APPEND_LOG_CORRUPT), the pid lock file of a journal one process owns, and
// the cross-process mutex of a journal several processes share.
//
// durability/file and the events journals both use it, so they read, trim and
// refuse a damaged file the same way. The files it creates are readable by
// their owner only (0600), and the directories 0700, whatever the umask.
//
// journalfile imports only the standard library.
package journalfile

import "os"

// Modes of the files and directories a journal creates: the owner's only.
const (
	FileMode os.FileMode = 0o600
	DirMode  os.FileMode = 0o700
)
