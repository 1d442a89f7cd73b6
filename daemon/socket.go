package daemon

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// sharedDirs are directories that hold more than the daemon's socket. The
// daemon makes its socket's directory 0700, which would break them.
var sharedDirs = []string{"/", "/run", "/var/run", "/tmp", "/var/tmp", "/var", "/etc", "/dev", "/dev/shm"}

// listenSocket listens on path, in a directory only root can enter. A socket
// file left by a daemon that is gone is replaced; one that a live daemon
// answers on is not.
//
// The directory is made 0700 whoever created it (a hostPath volume makes it
// 0755), and the socket is created 0600: with umask, the umask is set around
// the bind, so there is no moment at which it has a wider mode. The umask is
// the process's, so that runs before the daemon starts goroutines that
// create files. Without it (a socket taken later, as Multus's), the socket is
// made 0600 right after the bind, while its directory, already 0700, keeps
// everyone but root out.
func listenSocket(path string, umask bool) (*net.UnixListener, error) {
	dir := filepath.Dir(path)
	if !filepath.IsAbs(path) || slices.Contains(sharedDirs, dir) {
		return nil, fmt.Errorf("--socket %s: give the socket an absolute path in a directory of its own, which the daemon makes 0700 (not %s)", path, dir)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create socket dir for %s: %w", path, err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, fmt.Errorf("restrict socket dir %s to 0700: %w", dir, err)
	}
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		c.Close()
		return nil, fmt.Errorf("listen on %s: %w", path, errSocketBusy)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("remove stale socket %s: %w", path, err)
	}
	var old int
	if umask {
		old = syscall.Umask(0o177)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if umask {
		syscall.Umask(old)
	}
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	if !umask {
		if err := os.Chmod(path, 0o600); err != nil {
			ln.Close()
			return nil, fmt.Errorf("restrict socket %s to 0600: %w", path, err)
		}
	}
	return ln, nil
}

// peerCred is the connecting process's pid and uid, from the kernel.
func peerCred(conn *net.UnixConn) (*unix.Ucred, error) {
	raw, err := conn.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return nil, err
	}
	return cred, credErr
}
