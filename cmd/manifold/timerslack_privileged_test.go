package main_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/manifold-cni/manifold/delegate"
	"github.com/manifold-cni/manifold/shimproto"
)

// slackOf reads the timer slack of one thread, by its tid.
func slackOf(t *testing.T, tid string) string {
	t.Helper()
	b, err := os.ReadFile("/proc/" + tid + "/timerslack_ns")
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// assertSlacks checks, while a call's gate delegate waits, that every thread
// of the daemon pid has delegate.TimerSlack, and that the gate, its
// delegate, has the slack manifold's starter had (docs/thick-mode.md).
func assertSlacks(t *testing.T, pid int, want string) {
	t.Helper()
	tids, err := filepath.Glob(filepath.Join("/proc", strconv.Itoa(pid), "task", "*"))
	if err != nil || len(tids) < 2 {
		t.Fatalf("threads of %d: %v %v", pid, tids, err)
	}
	for _, p := range tids {
		if got := slackOf(t, filepath.Base(p)); got != strconv.Itoa(delegate.TimerSlack) {
			t.Errorf("manifold's thread %s has a timer slack of %s ns, want %d", filepath.Base(p), got, delegate.TimerSlack)
		}
	}
	gates := childrenNamed(t, pid, "gate")
	if len(gates) != 1 {
		t.Fatalf("gate processes under %d: %v, want 1", pid, gates)
	}
	if got := slackOf(t, strconv.Itoa(gates[0])); got != want {
		t.Errorf("the delegate's timer slack is %s ns, want %s, as if the runtime had started it", got, want)
	}
}

// TestTimerSlack: the daemon runs with a timer slack of delegate.TimerSlack
// on all its threads, and its delegates without it.
func TestTimerSlack(t *testing.T) {
	// What manifold inherits from this test, and so what its delegates must have.
	own := slackOf(t, "self")
	n := newThickNode(t, false)
	d := n.startDaemon(t)
	gate, reached, release := gateDelegate(t)
	conf := singlePlugin(t, n.manifoldConf(t, "1.0.0", nil, gate))
	pod, _ := newPod(t)
	for _, verb := range []string{"ADD", "DEL"} {
		conn := rawCall(t, d.Socket, podEnv(verb, pod, n.rt.BinDir), conf)
		if verb == "ADD" {
			waitFile(t, reached, 30*time.Second)
			assertSlacks(t, d.Pid(), own)
			os.WriteFile(release, nil, 0o600)
		}
		conn.SetDeadline(time.Now().Add(time.Minute))
		rep, err := shimproto.ReadReply(conn)
		if err != nil || rep.ExitCode != 0 {
			t.Fatalf("%s: %v %+v", verb, err, rep)
		}
	}
	assertClean(t, n, "DEL")
}
