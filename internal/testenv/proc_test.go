package testenv

import (
	"os/exec"
	"slices"
	"syscall"
	"testing"
	"time"
)

func TestStatFields(t *testing.T) {
	for _, tc := range []struct {
		stat string
		want []string
	}{
		{"4242 (manifold) S 1 4242", []string{"S", "1", "4242"}},
		{"4242 (a) b (c) d) Z 1\n", []string{"Z", "1"}}, // a name with ') ' in it
		{"4242 (m)", []string{}},
		{"no name", nil},
	} {
		if got := StatFields(tc.stat); !slices.Equal(got, tc.want) || (got == nil) != (tc.want == nil) {
			t.Errorf("StatFields(%q) = %q, want %q", tc.stat, got, tc.want)
		}
	}
}

// TestStartTiedOutlivesThreads: a process started with StartTied is not
// killed when threads of this process end, as one forked from an ordinary
// goroutine would be once the thread that forked it is gone; and done closes
// when it exits.
func TestStartTiedOutlivesThreads(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	done, err := StartTied(cmd, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); <-done }()
	if err := EndThreads(200); err != nil {
		t.Fatal(err)
	}
	if !AliveUnsignalled(cmd.Process.Pid) {
		t.Fatal("the process was killed while threads ended around it")
	}
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("done not closed 10s after the process was signalled")
	}
}
