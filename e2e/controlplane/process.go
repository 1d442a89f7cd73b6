package controlplane

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/manifold-cni/manifold/internal/testenv"
)

// process is one running server with its log file.
type process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{} // closed once the process has been reaped
	waitErr error         // valid after done is closed
}

// startProcess launches bin with args, appending its stdout and stderr to
// logPath (append, so a restarted kube-apiserver keeps its earlier history).
//
// Pdeathsig is delivered when the thread that forked the child exits, not
// when the whole test binary does (see golang/go#27505). The Go runtime
// retires a thread when a goroutine exits while locked to it, which the netns
// tests do on purpose. So the fork and the Wait happen on one goroutine that
// stays locked to its thread for the child's whole life: that thread cannot
// be retired early, and if the test binary dies the kernel kills the child.
func startProcess(name, bin string, args []string, logPath string, env []string) (*process, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open %s log: %w", name, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.Env = env
	p := &process{name: name, cmd: cmd, logPath: logPath}
	done, err := testenv.StartTied(cmd, &p.waitErr)
	// The child, if started, holds its own copy of the descriptor now.
	_ = logf.Close()
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p.done = done
	return p, nil
}

// exited reports whether the process has already been reaped.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// kill sends SIGKILL and waits for the process to be reaped. SIGKILL also ends
// a SIGSTOPped process, so Pause needs no undo first.
func (p *process) kill() error {
	if p.exited() {
		return nil
	}
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("kill %s (pid %d): %w", p.name, p.cmd.Process.Pid, err)
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(30 * time.Second):
		// Only an uninterruptible sleep in the kernel gets here.
		return fmt.Errorf("wait for %s (pid %d) to exit after SIGKILL: timed out", p.name, p.cmd.Process.Pid)
	}
}

// signal sends sig unless the process is already gone.
func (p *process) signal(sig syscall.Signal) error {
	if p.exited() {
		return fmt.Errorf("signal %s: process has exited: %v", p.name, p.waitErr)
	}
	if err := p.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("signal %s (pid %d) with %v: %w", p.name, p.cmd.Process.Pid, sig, err)
	}
	if sig == syscall.SIGSTOP {
		// kill(2) returns before every thread has stopped: a thread that is
		// running on the other CPU can still answer a request. Return only
		// once all of them are.
		return waitStopped(p.cmd.Process.Pid, 5*time.Second)
	}
	return nil
}

// waitStopped waits until every thread of pid is in the stopped state.
func waitStopped(pid int, bound time.Duration) error {
	dir := fmt.Sprintf("/proc/%d/task", pid)
	for deadline := time.Now().Add(bound); ; time.Sleep(time.Millisecond) {
		tasks, err := os.ReadDir(dir)
		if err != nil {
			return fmt.Errorf("wait for pid %d to stop: %w", pid, err)
		}
		running := 0
		for _, task := range tasks {
			stat, err := os.ReadFile(filepath.Join(dir, task.Name(), "stat"))
			if err != nil {
				continue // the thread has exited
			}
			if f := testenv.StatFields(string(stat)); len(f) == 0 || (f[0][0] != 'T' && f[0][0] != 't') {
				running++
			}
		}
		if running == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pid %d: %d threads still not stopped after %s", pid, running, bound)
		}
	}
}

// logTail returns the last few KiB of the process log, for error messages.
func (p *process) logTail() string {
	return fileTail(p.logPath, 4096)
}

func fileTail(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Size() > n {
		// One byte more than kept, so tail can drop the cut first line.
		_, _ = f.Seek(-(n + 1), io.SeekEnd)
	}
	b, _ := io.ReadAll(f)
	return tail(b, int(n))
}

// tail keeps the last n bytes of b, starting at a line boundary.
func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	return strings.TrimRight(string(b), "\n")
}

// childEnv is the environment for the servers. etcd reads every ETCD_* variable
// as a flag, so a developer's shell settings could silently change or break
// the test etcd; drop them.
func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "ETCD_") {
			continue
		}
		env = append(env, kv)
	}
	return env
}
