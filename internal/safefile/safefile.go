// Package safefile reads the files that manifold takes from directories
// other software writes (conf dirs, chain directories, Multus's records, the
// device plugins' Device Info files, the kubelet's checkpoint) so that no
// such file can hang or swell a call: only a regular file is read, opened
// without blocking (a FIFO would block the call forever), and no more than a
// limit.
package safefile

import (
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
)

// Read reads the regular file at path, following symlinks as the runtimes do
// for the files of a conf dir. It fails, naming the reason, for anything but
// a regular file and for a file larger than limit bytes. Every error names
// the path; one from opening it wraps the os error (os.ErrNotExist, …).
func Read(path string, limit int64) ([]byte, error) {
	return read(path, limit, 0)
}

// ReadNoFollow is Read that also refuses a symlink in the last component,
// for a directory whose files an unprivileged writer might point elsewhere.
func ReadNoFollow(path string, limit int64) ([]byte, error) {
	return read(path, limit, syscall.O_NOFOLLOW)
}

func read(path string, limit int64, flags int) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|flags, 0)
	if err != nil {
		if flags&syscall.O_NOFOLLOW != 0 && errors.Is(err, syscall.ELOOP) {
			return nil, fmt.Errorf("%s is a symlink, which is not followed", path)
		}
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file (%s)", path, st.Mode().Type())
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s is larger than the limit of %d bytes", path, limit)
	}
	return b, nil
}
