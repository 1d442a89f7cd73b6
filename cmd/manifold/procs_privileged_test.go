package main_test

import (
	"bufio"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/manifold-cni/manifold/internal/testenv"
)

// gomaxprocsOf reads go_sched_gomaxprocs_threads, the GOMAXPROCS that Go's
// runtime reports, from a daemon's /metrics at addr. The daemon serves
// /metrics a moment after its socket.
func gomaxprocsOf(t *testing.T, addr string) int {
	t.Helper()
	res, err := http.Get("http://" + addr + "/metrics")
	for deadline := time.Now().Add(10 * time.Second); err != nil && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		res, err = http.Get("http://" + addr + "/metrics")
	}
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "go_sched_gomaxprocs_threads "); ok {
			n, err := strconv.Atoi(v)
			if err != nil {
				t.Fatalf("go_sched_gomaxprocs_threads %q: %v", v, err)
			}
			return n
		}
	}
	t.Fatalf("no go_sched_gomaxprocs_threads in the daemon's /metrics (%v)", sc.Err())
	return 0
}

// TestDaemonProcs: the daemon runs Go on one P for every 8 CPUs that Go
// would use (one on this machine), and a GOMAXPROCS in its environment, as an
// admin may set in the DaemonSet, stands (docs/thick-mode.md, "CPU"). On a
// machine of one CPU the default case cannot tell the rule from Go's own
// default; the admin's case still can.
func TestDaemonProcs(t *testing.T) {
	def := runtime.GOMAXPROCS(0) // the test's own: Go's default here
	n := newThickNode(t, false)
	t.Run("default", func(t *testing.T) {
		t.Setenv("GOMAXPROCS", "")
		os.Unsetenv("GOMAXPROCS")
		addr := testenv.FreeLoopbackAddr(t)
		n.startDaemon(t, "--metrics-address", addr)
		if got, want := gomaxprocsOf(t, addr), (def+7)/8; got != want {
			t.Errorf("the daemon runs on %d Ps with Go's default of %d, want %d", got, def, want)
		}
	})
	t.Run("set by the admin", func(t *testing.T) {
		t.Setenv("GOMAXPROCS", "2")
		addr := testenv.FreeLoopbackAddr(t)
		n.startDaemon(t, "--metrics-address", addr)
		if got := gomaxprocsOf(t, addr); got != 2 {
			t.Errorf("the daemon runs on %d Ps with GOMAXPROCS=2 in its environment, want 2", got)
		}
	})
}
