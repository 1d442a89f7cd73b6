package delegate

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// A plugin gets blocking stdin, stdout and stderr, as from a runtime: a
// plugin that is not written in Go may not retry a read or write that
// would block. Only manifold's own ends are non-blocking.
func TestPluginStdioBlocks(t *testing.T) {
	dir := t.TempDir()
	// grep inherits the script's 0, 1 and 2 as they are, and prints the
	// flags of each on its stdout, the plugin's.
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

// A plugin that exits while a process it started holds its stdout is
// answered all the same, with what it printed: manifold's end of the pipe is
// in Go's netpoller, so awaitOutput's deadline ends the read.
func TestPluginOutputHeldOpen(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "held")
	p := scriptPlugin(t, dir, "p", "", "sleep 60 & echo $! > "+pidFile)
	t.Cleanup(func() {
		if b, err := os.ReadFile(pidFile); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	out, err := (&Exec{Busy: idle}).ExecPlugin(context.Background(), p, []byte("config"), call(p, "ADD", "eth0").Env)
	if err != nil {
		t.Fatalf("ExecPlugin: %v", err)
	}
	if !strings.Contains(string(out), "10.1.1.1/24") {
		t.Errorf("ExecPlugin printed %q, want the plugin's result", out)
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("pid file %q: %v", b, err)
	}
	// Orphaned, it may stay a zombie: only a process still running holds
	// the pipe.
	if b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat"); err != nil || strings.Contains(string(b), ") Z ") {
		t.Fatalf("the process that held stdout (pid %d) has ended already: the answer waited for it", pid)
	}
}
