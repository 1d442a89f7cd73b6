package delegate

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// A plugin gets blocking stdin, stdout and stderr, as from a runtime: a
// plugin that is not written in Go may not retry a read or write that
// would block. Only manifold's own ends are non-blocking.
func TestPluginStdioBlocks(t *testing.T) {
	dir := t.TempDir()
	// grep prints the flags of the 0, 1 and 2 it inherits on its stdout,
	// the plugin's. (TestPipeEnds checks the ends themselves.)
	p := scriptPlugin(t, dir, "p", "grep -H '^flags:' /proc/self/fdinfo/0 /proc/self/fdinfo/1 /proc/self/fdinfo/2", "")
	out := run(t, &Exec{Busy: idle}, call(p, "ADD", "eth0"), "config")
	seen := 0
	for _, line := range strings.Split(string(out), "\n") {
		file, value, ok := strings.Cut(line, ":flags:")
		if !ok {
			continue
		}
		seen++
		v, err := strconv.ParseUint(strings.TrimSpace(value), 8, 64)
		if err != nil {
			t.Fatalf("%s: flags %q: %v", file, value, err)
		}
		if v&syscall.O_NONBLOCK != 0 {
			t.Errorf("the plugin's %s is non-blocking (flags %o)", file, v)
		}
	}
	if seen != 3 {
		t.Fatalf("the plugin printed %q, want the flags of its fds 0, 1 and 2", out)
	}
}

// pipe's ends: this process's non-blocking, the child's blocking, each the
// right way round, and both close-on-exec.
func TestPipeEnds(t *testing.T) {
	for _, parentReads := range []bool{true, false} {
		parent, child, err := pipe(parentReads)
		if err != nil {
			t.Fatal(err)
		}
		wantParent, wantChild := unix.O_WRONLY, unix.O_RDONLY
		if parentReads {
			wantParent, wantChild = wantChild, wantParent
		}
		for _, end := range []struct {
			name     string
			f        *os.File
			nonblock bool
			access   int
		}{{"this process's", parent, true, wantParent}, {"the child's", child, false, wantChild}} {
			fl, err := unix.FcntlInt(end.f.Fd(), unix.F_GETFL, 0)
			if err != nil {
				t.Fatal(err)
			}
			fd, err := unix.FcntlInt(end.f.Fd(), unix.F_GETFD, 0)
			if err != nil {
				t.Fatal(err)
			}
			if fl&unix.O_NONBLOCK != 0 != end.nonblock || fl&unix.O_ACCMODE != end.access || fd&unix.FD_CLOEXEC == 0 {
				t.Errorf("parentReads %v: %s end has flags %o and fd flags %o, want non-blocking %v, access mode %o, close-on-exec",
					parentReads, end.name, fl, fd, end.nonblock, end.access)
			}
		}
		parent.Close()
		child.Close()
	}
}
