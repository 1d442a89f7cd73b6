package delegate

import (
	"errors"
	"os"
	"os/exec"
	"strconv"
	"testing"

	"github.com/manifold-cni/manifold/internal/testenv"
)

// awaitExit returns once the process has exited and leaves it unreaped, so
// that exec.Cmd.Wait still gets its exit status.
func TestAwaitExitLeavesTheExitToWait(t *testing.T) {
	cmd := exec.Command("/bin/sh", "-c", "sleep 0.2; exit 3")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	pidfd := openPidfd(cmd.Process.Pid)
	if pidfd < 0 {
		t.Fatal("no pidfd for the process")
	}
	awaitExit(pidfd)
	if state := procState(t, cmd.Process.Pid); state != "Z" {
		t.Errorf("after awaitExit the process is in state %q, want Z (exited, not yet reaped)", state)
	}
	var exit *exec.ExitError
	if err := cmd.Wait(); !errors.As(err, &exit) || exit.ExitCode() != 3 {
		t.Errorf("Wait after awaitExit = %v, want exit status 3", err)
	}
}

// procState is the state letter in /proc/<pid>/stat.
func procState(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	fields := testenv.StatFields(string(b))
	if len(fields) == 0 {
		t.Fatalf("/proc/%d/stat: %q", pid, b)
	}
	return fields[0]
}

// Plugin runs, used or killed unused, leave no file descriptor behind: each
// process's pidfd is closed once it has been waited for.
func TestExecClosesPidfds(t *testing.T) {
	dir := t.TempDir()
	p := scriptPlugin(t, dir, "p", "", "")
	before := openFDs(t)
	for i := 0; i < 10; i++ {
		e := &Exec{Busy: idle}
		e.Expect([]Call{call(p, "ADD", "eth0"), call(p, "ADD", "net1")})
		run(t, e, call(p, "ADD", "eth0"), "config")
		e.Close() // kills and reaps the process started for net1
		if s := e.Stats(); s.Discarded != 1 {
			t.Fatalf("stats %+v, want the net1 process discarded", s)
		}
	}
	if after := openFDs(t); after > before {
		t.Errorf("%d file descriptors open after 10 used and 10 killed plugin processes, %d before", after, before)
	}
}

func openFDs(t *testing.T) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(fds)
}
