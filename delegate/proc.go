package delegate

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/manifold-cni/manifold/netconf"
	"github.com/manifold-cni/manifold/scratch"
)

// One plugin process, from its start to its reap: its pipes, the exit read
// on its pidfd, and the kill of its group.

// proc is a plugin process that has not yet been given its stdin.
type proc struct {
	call Call
	// started is closed once the start has been tried, err is its outcome;
	// nil started: the start was tried before the proc was shared.
	started chan struct{}
	err     error
	guard   *time.Timer // kills the process if its turn does not come in time
	cmd     *exec.Cmd
	pidfd   int // the process's pidfd, or -1; closed by wait
	stdin   io.WriteCloser
	stdout  cappedBuffer
	stderr  cappedBuffer
	// outR and errR are the read ends of the plugin's stdout and stderr;
	// read, each sends once on output when its reader has reached its end.
	outR, errR *os.File
	output     chan struct{}
	reaper     *reaper
	// startTime is the process's start time (procStart), 0 if unknown;
	// groupLog is where give noted its group, nil if nowhere (orphans.go).
	startTime uint64
	groupLog  *scratch.GroupLog
}

func (e *Exec) startProc(p *proc) error {
	cmd := exec.Command(p.call.Path)
	// The mark tells a manifold that finds itself run as a delegate, however
	// it got there, to refuse (netconf.NestedEnv).
	cmd.Env = append(slices.Clip(p.call.Env), netconf.NestedEnv+"=manifold")
	if e.Root != "" {
		cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: e.Root}
		cmd.Dir = "/"
	}
	p.stdout.max, p.stderr.max = MaxPluginStdout, MaxPluginStderr
	// The pipes are this package's own, not os/exec's: the output can be
	// read to its end without reaping the process (ReapLater), and each
	// pipe costs fewer system calls (pipes.go).
	var ends [6]*os.File // this process's end and the child's, of stdin, stdout, stderr
	var err error
	for i := 0; i < 3 && err == nil; i++ {
		ends[2*i], ends[2*i+1], err = pipe(i > 0)
	}
	if err == nil {
		cmd.Stdin, cmd.Stdout, cmd.Stderr = ends[1], ends[3], ends[5]
		err = spawn(cmd)
	}
	// The child has its own copies of its ends.
	for i := 1; i < 6; i += 2 {
		if ends[i] != nil {
			ends[i].Close()
		}
	}
	if err != nil {
		for i := 0; i < 6; i += 2 {
			if ends[i] != nil {
				ends[i].Close()
			}
		}
		return err
	}
	stdin, outR, errR := ends[0], ends[2], ends[4]
	p.outR, p.errR, p.output = outR, errR, make(chan struct{}, 2)
	go p.readOutput(outR, &p.stdout)
	go p.readOutput(errR, &p.stderr)
	// The process is ours and not yet reaped, so its pid cannot have been
	// reused. This pidfd is a file of its own: os.Process waits on another.
	p.pidfd = openPidfd(cmd.Process.Pid)
	p.cmd, p.stdin, p.reaper = cmd, stdin, &reaper{cmd: cmd}
	// Read now, off the call's path for a process started early; give
	// notes it with the group.
	p.startTime, _ = procStart(cmd.Process.Pid)
	return nil
}

// readOutput reads one of the plugin's output pipes to its end (or until
// awaitOutput closes it) into buf, closes it, and says so on p.output.
func (p *proc) readOutput(r *os.File, buf *cappedBuffer) {
	buf.ReadFrom(r)
	r.Close()
	p.output <- struct{}{}
}

// awaitOutput waits for the plugin's stdout and stderr to reach their end.
// A process the plugin left behind may hold them open: outputDelay after the
// plugin's own exit, what was read so far is taken, as exec.Cmd.WaitDelay
// would.
func (p *proc) awaitOutput() {
	t := time.NewTimer(outputDelay)
	defer t.Stop()
	for n := 0; n < 2; n++ {
		select {
		case <-p.output:
		case <-t.C:
			// Unblocks the readers' Read; each closes its file once done.
			p.outR.SetReadDeadline(time.Now())
			p.errR.SetReadDeadline(time.Now())
			for ; n < 2; n++ {
				<-p.output
			}
			return
		}
	}
}

// give writes the call's stdin and returns a channel that receives the
// process's exit. ctx ending kills the process. The process's group is
// noted in the call's GroupLog first (orphans.go), and noted as ended
// before the exit is sent, unless a kill of it did not take.
func (p *proc) give(ctx context.Context, stdin []byte, reapLater bool) <-chan error {
	if p.groupLog == nil {
		p.note(groupLogFrom(ctx))
	}
	go func() {
		// A plugin that exits without reading all of it makes this fail;
		// its exit status is what counts.
		p.stdin.Write(stdin)
		p.stdin.Close()
	}()
	waited := make(chan error, 1)
	go func() {
		waited <- p.wait(reapLater)
	}()
	done := make(chan error, 1)
	go func() {
		select {
		case err := <-waited:
			groups.done(p.cmd.Process.Pid)
			p.noteEnded()
			done <- err
		case <-ctx.Done():
			// The whole group, so that what the plugin started dies with it;
			// before the leader is reaped, while its group id is still its own.
			killGroup(p.cmd.Process.Pid)
			<-waited
			p.reap() // now: awaitGroup needs the leader gone
			err := ctx.Err()
			if left := p.awaitGroup(); left != nil {
				err = left
			} else {
				p.noteEnded()
			}
			done <- err
		}
	}()
	return done
}

// awaitGroup waits, at most groupWait, for the processes of the group of a
// killed plugin to be gone, and names them in its error if some are not.
func (p *proc) awaitGroup() error {
	pid := p.cmd.Process.Pid
	if err := awaitGroup(pid, groupWait); err != nil {
		return fmt.Errorf("%w %s after SIGKILL (process group %d)", err, groupWait, pid)
	}
	return nil
}

// kill stops a process that was never given its stdin, and reaps it. Nil-safe.
func (p *proc) kill() {
	if p == nil {
		return
	}
	if p.started != nil {
		<-p.started
	}
	if p.err != nil || p.cmd == nil {
		return
	}
	killGroup(p.cmd.Process.Pid)
	p.stdin.Close()
	p.wait(false)
	if p.awaitGroup() == nil {
		p.noteEnded()
	}
}

// wait waits for the process to exit and for its output to end, and returns
// its exit as exec.Cmd.Wait would. The exit is awaited on the process's
// pidfd through Go's netpoller, not in a blocking waitid: a goroutine blocked
// in a system call for a delegate's 40 ms makes the Go runtime's monitor
// thread (sysmon) take its P back after 10 ms and poll every 20 µs for a
// while after that, which cost about 45 context switches and 0.6-0.9 ms of
// CPU per delegate on this project's test machine, CPU that the running
// delegate needs (docs/performance-history.md, change 10). Without a pidfd it
// falls back to Wait alone.
//
// With reapLater, the exit status is read without reaping, and the process
// is reaped later, in a batch with others (queueReap); until then it is a
// zombie, which holds its pid and so its process group's id.
func (p *proc) wait(reapLater bool) error {
	var status error
	reaped := true
	if p.pidfd >= 0 {
		info, ok := awaitExit(p.pidfd)
		p.pidfd = -1
		if ok && reapLater {
			status, reaped = exitStatus(info), false
		}
	}
	if reaped {
		status = p.reap()
	}
	p.awaitOutput()
	if !reaped {
		// The queue holds the reaper alone, not the process's output.
		queueReap(p.reaper)
	}
	return status
}

// reap reaps the process, once, and returns its exit as exec.Cmd.Wait does.
func (p *proc) reap() error { return p.reaper.reap() }

// reaper reaps one process, once.
type reaper struct {
	once sync.Once
	cmd  *exec.Cmd
	err  error // cmd.Wait's answer, once reaped
}

func (r *reaper) reap() error {
	r.once.Do(func() { r.err = r.cmd.Wait() })
	return r.err
}

// exitError is a plugin's exit other than success, read from its siginfo
// without reaping it; its text is that of exec.ExitError.
type exitError struct {
	code   int            // the exit code, when signal is 0
	signal syscall.Signal // the signal that ended it, or 0
	core   bool
}

func (e *exitError) Error() string {
	switch {
	case e.signal == 0:
		return "exit status " + strconv.Itoa(e.code)
	case e.core:
		return "signal: " + e.signal.String() + " (core dumped)"
	}
	return "signal: " + e.signal.String()
}

// The si_code values of SIGCHLD (<asm-generic/siginfo.h>) that waitid gives
// for an exited child.
const (
	cldExited = 1
	cldKilled = 2
	cldDumped = 3
)

// exitStatus is the exit that info (waitid's answer for an exited child)
// reports: nil for exit code 0.
func exitStatus(info unix.Siginfo) error {
	// x/sys lays out only the head of siginfo_t; for SIGCHLD the kernel puts
	// si_pid, si_uid and si_status after it, si_status at byte 24 on every
	// 64-bit Linux.
	status := int(*(*int32)(unsafe.Add(unsafe.Pointer(&info), 24)))
	switch info.Code {
	case cldExited:
		if status == 0 {
			return nil
		}
		return &exitError{code: status}
	case cldKilled, cldDumped:
		return &exitError{signal: syscall.Signal(status), core: info.Code == cldDumped}
	}
	return fmt.Errorf("plugin ended with siginfo code %d, status %d", info.Code, status)
}

// awaitExit returns once the process of pidfd (non-blocking: openPidfd) has
// exited, leaving it to be reaped, with its siginfo (ok), or as soon as an
// error makes waiting on the pidfd impossible (then Wait blocks as usual).
// It closes pidfd.
func awaitExit(pidfd int) (info unix.Siginfo, ok bool) {
	f := os.NewFile(uintptr(pidfd), "pidfd")
	defer f.Close()
	rc, err := f.SyscallConn()
	if err != nil {
		return info, false
	}
	// A pidfd polls readable once its process has exited. Read calls the
	// function again each time it does, until it returns true.
	err = rc.Read(func(fd uintptr) bool {
		info = unix.Siginfo{}
		err := unix.Waitid(unix.P_PIDFD, int(fd), &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
		ok = err == nil && info.Signo != 0
		return err != nil || info.Signo != 0
	})
	return info, ok && err == nil
}
