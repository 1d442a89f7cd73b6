package delegate

import (
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
