package journalfile

import (
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
)

// ErrNotPrivate is wrapped by the error of opening a journal file that is a
// symbolic link, not a regular file, a hard link to another name, owned by
// another user, or open to the file's group or to others: its content (the
// bot's state and random secret) could be read, or the file could point
// botrun's writes at another file.
var ErrNotPrivate = errors.New("journal file is not private")

// OpenPrivate opens the journal file at path with flag (os.O_RDONLY,
// os.O_CREATE|os.O_WRONLY|os.O_APPEND, ...), never following a symbolic link
// (O_NOFOLLOW) and never waiting on a FIFO (O_NONBLOCK, cleared once open),
// and refuses, with an error wrapping ErrNotPrivate that names the file and
// the fix, a file that is not a regular file with one link, owned by this
// process's user, with no group or other permission bits. A file it creates
// is FileMode.
func OpenPrivate(path string, flag int) (*os.File, error) {
	var fd int
	var err error
	for {
		fd, err = syscall.Open(path, flag|syscall.O_NOFOLLOW|syscall.O_CLOEXEC|syscall.O_NONBLOCK, uint32(FileMode.Perm()))
		if err != syscall.EINTR {
			break
		}
	}
	switch {
	case err == syscall.ELOOP:
		return nil, fmt.Errorf("%w: %s is a symbolic link; botrun does not follow links for its journal files (replace the link with the file itself, or point the configured path at the real file)", ErrNotPrivate, path)
	case err == syscall.ENXIO:
		// A FIFO without a reader, opened for writing.
		return nil, fmt.Errorf("%w: %s is not a regular file; move it aside", ErrNotPrivate, path)
	case err != nil:
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	if err := syscall.SetNonblock(fd, false); err != nil {
		syscall.Close(fd)
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	if err := checkPrivate(path, f); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// checkPrivate refuses an open file that is not a regular file owned by this
// process's user and closed to group and others.
func checkPrivate(path string, f *os.File) error {
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("journal file %s: %w", path, err)
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("%w: %s is not a regular file (%s); move it aside", ErrNotPrivate, path, st.Mode().Type())
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if ok && sys.Nlink > 1 {
		return fmt.Errorf("%w: %s has %d hard links: another name shares its content (it holds the bot's state and random secret); copy it to a file of its own (cp %s %s.new && mv %s.new %s)", ErrNotPrivate, path, sys.Nlink, path, path, path, path)
	}
	if ok && int(sys.Uid) != os.Geteuid() {
		return fmt.Errorf("%w: %s is owned by uid %d, not by this process's user (uid %d): run botrun as the file's owner or chown it to the bot's user", ErrNotPrivate, path, sys.Uid, os.Geteuid())
	}
	if perm := st.Mode().Perm(); perm&0o077 != 0 {
		return fmt.Errorf("%w: %s has mode %#o, open to its group or to others (it holds the bot's state and random secret): chmod 600 %s", ErrNotPrivate, path, perm, path)
	}
	return nil
}

// ReadPrivate reads the whole journal file at path through OpenPrivate. A
// missing file is an error wrapping os.ErrNotExist.
func ReadPrivate(path string) ([]byte, error) {
	f, err := OpenPrivate(path, os.O_RDONLY)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}
