package delegate

import (
	"os"

	"golang.org/x/sys/unix"
)

// A delegate's pipes and pidfd, made with the system calls they need and no
// more (docs/performance-history.md, change 23). os.Pipe makes both ends of a
// pipe non-blocking and puts both in Go's netpoller; os/exec then makes the
// child's end blocking again before the fork, and closing that end takes it
// out of the netpoller again: five system calls per child's end that do
// nothing, fifteen per delegate, on a node where a system call is not cheap.

// pipe makes a pipe, and returns the end that this process keeps
// (non-blocking, in Go's netpoller, so that its reads and writes park only
// their goroutine and take deadlines) and the end that the child gets as it
// is (blocking, as a plugin expects its stdin, stdout and stderr; never
// polled). With parentReads, this process keeps the read end. Both are
// close-on-exec here; the fork gives the child its own copy of its end.
func pipe(parentReads bool) (parent, child *os.File, err error) {
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_CLOEXEC); err != nil {
		return nil, nil, os.NewSyscallError("pipe2", err)
	}
	p, c := fds[0], fds[1]
	if !parentReads {
		p, c = c, p
	}
	// A new pipe's ends have no file status flags but their access mode,
	// which F_SETFL leaves as it is: one call, not F_GETFL and F_SETFL.
	if _, err := unix.FcntlInt(uintptr(p), unix.F_SETFL, unix.O_NONBLOCK); err != nil {
		unix.Close(p)
		unix.Close(c)
		return nil, nil, os.NewSyscallError("fcntl", err)
	}
	// os.NewFile puts a non-blocking descriptor in the netpoller, and leaves
	// a blocking one alone.
	return os.NewFile(uintptr(p), "|parent"), os.NewFile(uintptr(c), "|child"), nil
}

// openPidfd returns a non-blocking pidfd of the child pid, or -1. The child
// must not have been reaped yet, so that its pid is still its own.
func openPidfd(pid int) int {
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if err == unix.EINVAL {
		// PIDFD_NONBLOCK came with Linux 5.10.
		if fd, err = unix.PidfdOpen(pid, 0); err == nil {
			if err = unix.SetNonblock(fd, true); err != nil {
				unix.Close(fd)
			}
		}
	}
	if err != nil {
		return -1
	}
	return fd
}
