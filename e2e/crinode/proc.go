package crinode

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/manifold-cni/manifold/internal/testenv"
)

// runtimeProc is a runtime's own process, containerd or crio: started so that
// it dies with the test process, killed as a crash kills it, stopped as
// systemd stops it, and its log. Its shims, conmons and containers are not
// its children's business here: each runtime's Stop removes those.
type runtimeProc struct {
	name    string
	log     io.Writer // Options.Log; nil: logFile
	logFile string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed once cmd has exited
}

// startProc starts cmd, its output going to the log. The process gets SIGKILL
// when the test process dies (Pdeathsig); the kernel sends it when the
// forking thread exits (golang/go#27505), so the fork and the Wait run on one
// goroutine locked to its thread.
func (p *runtimeProc) startProc(cmd *exec.Cmd) error {
	if p.log != nil {
		cmd.Stdout, cmd.Stderr = p.log, p.log
	} else {
		f, err := os.OpenFile(p.logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return err
		}
		defer f.Close()
		cmd.Stdout, cmd.Stderr = f, f
	}
	done, err := testenv.StartTied(cmd, nil)
	if err != nil {
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	p.mu.Lock()
	p.cmd, p.done = cmd, done
	p.mu.Unlock()
	return nil
}

func (p *runtimeProc) current() (*exec.Cmd, chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd, p.done
}

func (p *runtimeProc) doneChan() chan struct{} {
	_, done := p.current()
	return done
}

// Kill ends the runtime with SIGKILL, as a crash would; what it started
// (shims, conmons, sandboxes) keeps running.
func (p *runtimeProc) Kill() {
	cmd, done := p.current()
	if cmd != nil && !p.exited() {
		cmd.Process.Kill()
		<-done
	}
}

// terminate stops the runtime with SIGTERM, and SIGKILL after grace.
func (p *runtimeProc) terminate(grace time.Duration) {
	cmd, done := p.current()
	if cmd == nil || p.exited() {
		return
	}
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(grace):
		cmd.Process.Kill()
		<-done
	}
}

// LogFile is the runtime's log file (empty when Options.Log is set).
func (p *runtimeProc) LogFile() string {
	if p.log != nil {
		return ""
	}
	return p.logFile
}

// LogTail is the end of the runtime's log, when it goes to its file.
func (p *runtimeProc) LogTail() string {
	b, _ := os.ReadFile(p.logFile)
	if len(b) > 8<<10 {
		b = b[len(b)-8<<10:]
	}
	return string(b)
}

func (p *runtimeProc) exited() bool {
	_, done := p.current()
	if done == nil {
		return true
	}
	select {
	case <-done:
		return true
	default:
		return false
	}
}
