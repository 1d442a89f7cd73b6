package delegate

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/manifold-cni/manifold/netconf"
	"github.com/manifold-cni/manifold/scratch"
)

// These tests run shell-script plugins: each saves its stdin in
// dir/stdin-$CNI_COMMAND-$CNI_IFNAME, so a file that exists but is empty is a
// process that was started and not (yet) given its config.

// scriptPlugin writes a plugin named name into dir. before runs before it
// reads stdin, after runs after; then it prints a one-address result.
func scriptPlugin(t *testing.T, dir, name, before, after string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	script := "#!/bin/sh\n" + before + "\ncat > \"" + dir + "/stdin-$CNI_COMMAND-$CNI_IFNAME\"\n" + after +
		"\necho '{\"cniVersion\":\"1.0.0\",\"ips\":[{\"address\":\"10.1.1.1/24\"}]}'\n"
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// idle makes the tests independent of the machine's load: every early start
// happens.
func idle() bool { return false }

func call(path, cmd, ifname string) Call {
	return Call{Path: path, Env: []string{"CNI_COMMAND=" + cmd, "CNI_CONTAINERID=c1", "CNI_IFNAME=" + ifname, "PATH=/usr/bin:/bin"}}
}

// waitStarted waits until the plugin for cmd/ifname has opened its stdin file,
// and returns what the file holds.
func waitStarted(t *testing.T, dir, cmd, ifname string) string {
	t.Helper()
	name := filepath.Join(dir, "stdin-"+cmd+"-"+ifname)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if b, err := os.ReadFile(name); err == nil {
			return string(b)
		}
	}
	t.Fatalf("plugin for %s %s never started", cmd, ifname)
	return ""
}

func stdinOf(t *testing.T, dir, cmd, ifname string) (string, bool) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "stdin-"+cmd+"-"+ifname))
	if errors.Is(err, os.ErrNotExist) {
		return "", false
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(b), true
}

func run(t *testing.T, e *Exec, c Call, stdin string) []byte {
	t.Helper()
	out, err := e.ExecPlugin(context.Background(), c.Path, []byte(stdin), c.Env)
	if err != nil {
		t.Fatalf("ExecPlugin %s: %v", c.Env, err)
	}
	if !strings.Contains(string(out), "10.1.1.1/24") {
		t.Fatalf("ExecPlugin %s printed %q, want the plugin's result", c.Env, out)
	}
	return out
}

// twoCalls is an Exec that expects ADD on eth0 and then on net1, of one
// script plugin in dir.
func twoCalls(t *testing.T) (dir string, e *Exec, a, b Call) {
	dir = t.TempDir()
	p := scriptPlugin(t, dir, "p", "", "")
	e = &Exec{Busy: idle}
	t.Cleanup(e.Close)
	a, b = call(p, "ADD", "eth0"), call(p, "ADD", "net1")
	e.Expect([]Call{a, b})
	return dir, e, a, b
}

// A started process waits for its turn with no config, and gets its own
// config when the turn comes; the next one starts while the current one runs.
func TestExecStartsEarlyAndWaitsForTurn(t *testing.T) {
	dir, e, a, b := twoCalls(t)
	if got := waitStarted(t, dir, "ADD", "eth0"); got != "" {
		t.Fatalf("eth0's plugin read %q before its call", got)
	}
	if _, ok := stdinOf(t, dir, "ADD", "net1"); ok {
		t.Fatal("net1's plugin started before eth0's call")
	}
	run(t, e, a, "config-a")
	if got, _ := stdinOf(t, dir, "ADD", "eth0"); got != "config-a" {
		t.Errorf("eth0's plugin read %q, want config-a", got)
	}
	if got := waitStarted(t, dir, "ADD", "net1"); got != "" {
		t.Fatalf("net1's plugin read %q before its call", got)
	}
	run(t, e, b, "config-b")
	if got, _ := stdinOf(t, dir, "ADD", "net1"); got != "config-b" {
		t.Errorf("net1's plugin read %q, want config-b", got)
	}
	if s := e.Stats(); s != (PrestartStats{Started: 2, Used: 2}) {
		t.Errorf("stats %+v, want 2 started and used", s)
	}
}

// A call the plan did not expect gets a process of its own, and the waiting
// one is killed before it read anything.
func TestExecUnexpectedCall(t *testing.T) {
	dir, e, a, _ := twoCalls(t)
	run(t, e, a, "config-a")
	waitStarted(t, dir, "ADD", "net1")
	other := call(a.Path, "DEL", "eth0")
	run(t, e, other, "config-del")
	if got, _ := stdinOf(t, dir, "ADD", "net1"); got != "" {
		t.Errorf("the unused net1 process read %q", got)
	}
	if got, _ := stdinOf(t, dir, "DEL", "eth0"); got != "config-del" {
		t.Errorf("the unexpected call's plugin read %q, want config-del", got)
	}
	if s := e.Stats(); s != (PrestartStats{Started: 2, Used: 1, Discarded: 1}) {
		t.Errorf("stats %+v, want 2 started, 1 used, 1 discarded", s)
	}
	// The plan ended with the unexpected call: nothing else starts.
	e.mu.Lock()
	next := e.next
	e.mu.Unlock()
	if next != nil {
		t.Errorf("a process is waiting after the plan ended: %v", next.call.Env)
	}
}

// Close kills and reaps a waiting process, which never reads its config.
func TestExecCloseReapsWaiting(t *testing.T) {
	dir := t.TempDir()
	p := scriptPlugin(t, dir, "p", "", "")
	e := &Exec{Busy: idle}
	e.Expect([]Call{call(p, "ADD", "eth0")})
	waitStarted(t, dir, "ADD", "eth0")
	e.mu.Lock()
	waiting := e.next
	e.mu.Unlock()
	e.Close()
	e.Close() // twice is fine
	if waiting == nil || waiting.cmd == nil || waiting.cmd.ProcessState == nil {
		t.Fatal("the waiting process was not reaped by Close")
	}
	if ws := waiting.cmd.ProcessState.String(); ws != "signal: killed" {
		t.Errorf("waiting process ended with %q, want killed", ws)
	}
	if s := e.Stats(); s != (PrestartStats{Started: 1, Discarded: 1}) {
		t.Errorf("stats %+v, want 1 started, 1 discarded", s)
	}
	var nilExec *Exec
	nilExec.Expect([]Call{call(p, "ADD", "eth0")})
	nilExec.Close()
}

// The guard: the next plugin takes a lock before it reads stdin, and the
// running one needs that lock. Without the guard the two would wait on each
// other; with it, the waiting process is killed, the running call goes on,
// and the next call gets a fresh process.
func TestExecGuardBreaksLockBeforeStdin(t *testing.T) {
	dir := t.TempDir()
	lock, held := filepath.Join(dir, "lock"), filepath.Join(dir, "held")
	// The first waits (at most 10 s) until the second holds the lock, so that
	// the two always meet in that order.
	first := scriptPlugin(t, dir, "first", "", "i=0; while [ ! -e "+held+" ] && [ $i -lt 1000 ]; do sleep 0.01; i=$((i+1)); done; flock "+lock+" true")
	second := scriptPlugin(t, dir, "second", "exec 9>"+lock+"; flock 9; touch "+held, "")
	e := &Exec{Guard: 500 * time.Millisecond, Busy: idle}
	defer e.Close()
	a, b := call(first, "ADD", "eth0"), call(second, "ADD", "net1")
	e.Expect([]Call{a, b})
	waitStarted(t, dir, "ADD", "eth0")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// The second plugin starts when the first gets its config, and takes
	// the lock; the first then waits for the lock until the guard fires.
	out, err := e.ExecPlugin(ctx, a.Path, []byte("config-a"), a.Env)
	if err != nil || !strings.Contains(string(out), "10.1.1.1/24") {
		t.Fatalf("first plugin: %q, %v; want its result once the guard freed the lock", out, err)
	}
	run(t, e, b, "config-b")
	if got, _ := stdinOf(t, dir, "ADD", "net1"); got != "config-b" {
		t.Errorf("second plugin read %q, want config-b", got)
	}
	// The second call's process was the guard's victim: it ran in a new one.
	if s := e.Stats(); s != (PrestartStats{Started: 2, Used: 1, Discarded: 1}) {
		t.Errorf("stats %+v, want 2 started, the first used, the second discarded by the guard", s)
	}
}

// A cancelled call kills its plugin and says so.
func TestExecContextKillsPlugin(t *testing.T) {
	dir := t.TempDir()
	p := scriptPlugin(t, dir, "p", "", "exec sleep 30")
	e := &Exec{}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := e.ExecPlugin(ctx, p, []byte("x"), call(p, "ADD", "eth0").Env)
	var te *types.Error
	if !errors.As(err, &te) || !strings.Contains(te.Msg, "deadline") {
		t.Fatalf("ExecPlugin after the deadline: %v, want a CNI error naming the deadline", err)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("ExecPlugin returned after %s, the plugin was not killed", d)
	}
}

// A plugin that succeeds but leaves a child holding its stdout open: the
// call returns its result once the output wait (1 s) is over, rather than when
// the child goes.
func TestExecLeftoverChildHoldsOutput(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "child")
	p := scriptPlugin(t, dir, "p", "", "sleep 30 & echo $! > "+pidFile)
	t.Cleanup(func() {
		if b, err := os.ReadFile(pidFile); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	run(t, &Exec{Busy: idle}, call(p, "ADD", "eth0"), "config")
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("pid file %q: %v", b, err)
	}
	// Orphaned, the child may stay a zombie: only one still running holds
	// the pipe. The answer came before it ended only if manifold's end of
	// the pipe is in Go's netpoller, where awaitOutput's deadline ends the
	// read (pipes.go). procState fails the test if the child is gone.
	if state := procState(t, pid); state == "Z" {
		t.Errorf("the leftover child (pid %d) had ended when ExecPlugin returned: it waited for the child", pid)
	}
}

func scriptAtt(name, ifname string, types ...string) netconf.Attachment {
	var plugins []string
	for _, t := range types {
		plugins = append(plugins, `{"type":"`+t+`"}`)
	}
	return netconf.Attachment{Network: name, IfName: ifname,
		Config: []byte(`{"cniVersion":"1.0.0","name":"` + name + `","plugins":[` + strings.Join(plugins, ",") + `]}`)}
}

func scriptRunner(t *testing.T, binDir string) (*Runner, *Exec) {
	e := &Exec{Busy: idle}
	return &Runner{
		CNI:      NewCNI(binDir, "", t.TempDir(), e),
		Store:    &scratch.Store{Dir: t.TempDir()},
		Log:      slog.New(slog.NewTextHandler(io.Discard, nil)),
		Prestart: e,
	}, e
}

// Runner's predictions match what libcni passes, for ADD and for DEL (which
// runs a conflist's plugins in reverse): every process started early is used.
func TestRunnerPredictsLibcniCalls(t *testing.T) {
	dir := t.TempDir()
	scriptPlugin(t, dir, "p", "", "")
	scriptPlugin(t, dir, "q", "", "")
	r, e := scriptRunner(t, dir)
	rec := &scratch.Record{ContainerID: "c1", NetNS: "/var/run/netns/none",
		RuntimeArgs: [][2]string{{"K8S_POD_NAME", "p1"}},
		Attachments: []netconf.Attachment{scriptAtt("a", "eth0", "p"), scriptAtt("b", "net1", "p", "q"), scriptAtt("c", "net2", "q")}}
	if _, err := r.Add(context.Background(), rec); err != nil {
		t.Fatal(err)
	}
	if s := e.Stats(); s != (PrestartStats{Started: 4, Used: 4}) {
		t.Errorf("after ADD: stats %+v, want all 4 plugin calls started early and used", s)
	}
	if err := r.Del(context.Background(), DelRequest{ContainerID: "c1", IfName: "eth0"}); err != nil {
		t.Fatal(err)
	}
	if s := e.Stats(); s != (PrestartStats{Started: 8, Used: 8}) {
		t.Errorf("after DEL: stats %+v, want all 8 plugin calls started early and used", s)
	}
}

// When a delegate fails, the process waiting for the next one is killed
// before it read anything, the rollback runs, and no process is left.
func TestRunnerAddFailureDiscardsWaiting(t *testing.T) {
	dir := t.TempDir()
	scriptPlugin(t, dir, "p", "", "")
	bad := filepath.Join(dir, "bad")
	if err := os.WriteFile(bad, []byte("#!/bin/sh\ncat >/dev/null\nif [ \"$CNI_COMMAND\" = ADD ]; then echo '{\"code\":42,\"msg\":\"no\"}'; exit 1; fi\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	r, e := scriptRunner(t, dir)
	rec := &scratch.Record{ContainerID: "c1", NetNS: "/var/run/netns/none",
		Attachments: []netconf.Attachment{scriptAtt("a", "eth0", "p"), scriptAtt("b", "net1", "bad"), scriptAtt("c", "net2", "p")}}
	_, err := r.Add(context.Background(), rec)
	var te *types.Error
	if !errors.As(err, &te) || te.Code != 42 {
		t.Fatalf("Add: %v, want the failing delegate's code 42", err)
	}
	if got, ok := stdinOf(t, dir, "ADD", "net2"); got != "" {
		t.Errorf("net2's plugin read %q (started: %v), want nothing", got, ok)
	}
	if got, ok := stdinOf(t, dir, "DEL", "eth0"); !ok || got == "" {
		t.Error("eth0 was not rolled back")
	}
	if s := e.Stats(); s.Used != 2 || s.Started != s.Used+s.Discarded {
		t.Errorf("stats %+v, want 2 used and every other start discarded", s)
	}
	if kids := children(t); kids != "" {
		t.Errorf("processes left after the failed ADD: %s", kids)
	}
}

// children lists this test process's child processes.
func children(t *testing.T) string {
	t.Helper()
	tasks, err := filepath.Glob("/proc/self/task/*/children")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range tasks {
		b, err := os.ReadFile(f)
		if err == nil && strings.TrimSpace(string(b)) != "" {
			out = append(out, strings.TrimSpace(string(b)))
		}
	}
	return strings.Join(out, " ")
}

// On a busy node nothing starts early, and the calls run as usual.
func TestExecNoEarlyStartWhenBusy(t *testing.T) {
	dir := t.TempDir()
	p := scriptPlugin(t, dir, "p", "", "")
	e := &Exec{Busy: func() bool { return true }}
	defer e.Close()
	a, b := call(p, "ADD", "eth0"), call(p, "ADD", "net1")
	e.Expect([]Call{a, b})
	if _, ok := stdinOf(t, dir, "ADD", "eth0"); ok {
		t.Fatal("a process was started early on a busy node")
	}
	run(t, e, a, "config-a")
	run(t, e, b, "config-b")
	if got, _ := stdinOf(t, dir, "ADD", "net1"); got != "config-b" {
		t.Errorf("net1's plugin read %q, want config-b", got)
	}
	if s := e.Stats(); s != (PrestartStats{Skipped: 2}) {
		t.Errorf("stats %+v, want 2 skipped and nothing started", s)
	}
}

// busyFrom: more than 8 runnable tasks per CPU is busy; text it cannot read is not.
func TestBusyFrom(t *testing.T) {
	for _, tc := range []struct {
		loadavg string
		ncpu    int
		want    bool
	}{
		{"0.52 0.58 0.59 16/467 1234\n", 2, false},
		{"0.52 0.58 0.59 17/467 1234\n", 2, true},
		{"9.00 9.00 9.00 40/467 1234\n", 16, false},
		{"0.52 0.58 0.59", 2, false},
		{"a b c x/y z", 2, false},
		{"", 2, false},
	} {
		if got := busyFrom(tc.loadavg, tc.ncpu); got != tc.want {
			t.Errorf("busyFrom(%q, %d) = %v, want %v", tc.loadavg, tc.ncpu, got, tc.want)
		}
	}
	// cpuBusy's reads, from the one open file: each gets the whole text.
	for i := 0; i < 3; i++ {
		b, ok := readLoadavg()
		if f := strings.Fields(b); !ok || len(f) < 4 || !strings.Contains(f[3], "/") {
			t.Errorf("read %d of /proc/loadavg = %q (ok %v), which busyFrom cannot read", i+1, b, ok)
		}
	}
}

// DEL starts the process of its first delegate, the last recorded
// attachment, as soon as it has the record, while the libcni cache is read
// (a directory of every container's entries). Here the cache read is held
// up: one of the container's entries is a FIFO that nobody writes yet.
func TestDelStartsFirstDelegateBeforeCacheRead(t *testing.T) {
	dir := t.TempDir()
	scriptPlugin(t, dir, "p", "", "")
	r, _ := scriptRunner(t, dir)
	cacheDir := t.TempDir()
	r.CNI = NewCNI(dir, "", cacheDir, r.Prestart)
	rec := &scratch.Record{ContainerID: "c1", NetNS: "/var/run/netns/none",
		Attachments: []netconf.Attachment{scriptAtt("a", "eth0", "p"), scriptAtt("b", "net1", "p")}}
	if _, err := r.Add(context.Background(), rec); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(cacheDir, "results", "x-c1-net9")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	// Opening the FIFO's other end (read-write, which never blocks) lets
	// libcni's read of it end, empty: not an entry it keeps.
	release := func() {
		if f, err := os.OpenFile(fifo, os.O_RDWR, 0); err == nil {
			f.Close()
		}
	}
	t.Cleanup(release)
	done := make(chan error, 1)
	go func() { done <- r.Del(context.Background(), DelRequest{ContainerID: "c1", IfName: "eth0"}) }()
	// The shell opens its stdin file as it starts, before it reads stdin.
	waitStarted(t, dir, "DEL", "net1")
	select {
	case err := <-done:
		t.Fatalf("DEL finished (%v) while the cache read was held up", err)
	default:
	}
	if got, _ := stdinOf(t, dir, "DEL", "net1"); got != "" {
		t.Errorf("net1's DEL read its config (%q) before the cache was read", got)
	}
	release()
	if err := <-done; err != nil {
		t.Fatalf("DEL: %v", err)
	}
	for _, ifname := range []string{"eth0", "net1"} {
		if got, ok := stdinOf(t, dir, "DEL", ifname); !ok || got == "" {
			t.Errorf("%s was not deleted", ifname)
		}
	}
}
