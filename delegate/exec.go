package delegate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"
	"golang.org/x/sys/unix"

	"github.com/manifold-cni/manifold/netconf"
)

// DefaultPrestartGuard is how long a started process may wait for its turn
// (Exec.Guard).
const DefaultPrestartGuard = 5 * time.Second

// Exec runs delegate plugins for libcni. It can start the process of the call
// that it expects next before that call's turn (docs/performance-history.md, change 7;
// docs/configuration.md), so that the plugin's start-up (for a Go plugin,
// about 10 ms of runtime start and page faults) overlaps what comes before.
//
// A started process is given its config on stdin only when its turn comes, in
// order, after the call before it has returned; until then it has only its
// environment, and a CNI plugin reads its config before it acts. A process
// that is not used (the calls went another way, the ADD failed, or Close) is
// killed and reaped before it has read anything.
//
// One Exec serves one CNI call; it is not shared between calls.
type Exec struct {
	// Root, when set, is the host's root filesystem as mounted in the node
	// daemon's container: plugins run chrooted into it, and their paths are
	// paths inside it (manifold daemon --host-root).
	Root string
	// Stderr receives a plugin's stderr after it succeeded, as with libcni's
	// own exec; nil discards it.
	Stderr io.Writer
	// Guard bounds how long a started process waits for its turn. Past it
	// the process is killed, and started again when its turn comes. This
	// undoes the one way an early start could block: a plugin that took a
	// lock that the call before it needs, before reading stdin. 0 means
	// DefaultPrestartGuard.
	Guard time.Duration
	// Busy reports whether the node's CPUs are saturated; no process is
	// started early then (nil: cpuBusy).
	Busy func() bool
	// ReapLater answers a plugin's call as soon as it has exited and its
	// output is read, and reaps the process reapDelay later, off the call's
	// path: reaped at once, a plugin that looked at its threads in /proc
	// (as the CNI ns package does) costs its reaper 1.5-2.5 ms of CPU, most
	// of it spent waiting on the plugin's own exiting threads
	// (docs/performance-history.md, change 18). The node daemon sets it; the
	// binary, which exits after its call, does not, so that it leaves no
	// exited child to the node's init.
	ReapLater bool

	mu   sync.Mutex
	plan []Call // the calls expected next, in order
	// anyOrder: the calls of plan come at once, in any order (a wave of
	// concurrent attachments); next serves whichever of them it matches,
	// and nothing more is started early.
	anyOrder bool
	next     *proc // started for plan[0] (anyOrder: for one of plan); nil if none
	stats    PrestartStats
}

var _ invoke.Exec = (*Exec)(nil)

// Call is one expected plugin run: what libcni will pass to ExecPlugin.
type Call struct {
	Path string
	Env  []string
}

// equal compares the environments as sets: libcni builds them through a map,
// so the order differs from one build to the next.
func (c Call) equal(path string, env []string) bool {
	if c.Path != path || len(c.Env) != len(env) {
		return false
	}
	a, b := slices.Clone(c.Env), slices.Clone(env)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// PrestartStats counts what became of started processes.
type PrestartStats struct {
	Started   int // processes started before their turn
	Used      int // of those, given their call
	Discarded int // killed unused: a different call came, Expect or Close, or the guard
	Skipped   int // not started early because the node was busy (cpuBusy)
}

// Expect sets the calls that come next, in order, and starts the first one's
// process. A process already waiting for exactly that call is kept. A nil or
// empty list stops any waiting process. Nil-safe, so that callers need not
// know whether early starts are on.
func (e *Exec) Expect(calls []Call) {
	e.expect(calls, false)
}

// ExpectAnyOrder sets calls that come next all at once, in any order: the
// first plugin call of each attachment of a wave that Add runs concurrently.
// A process already waiting for one of them is kept and serves it; no other
// is started early, since each starts at once anyway.
func (e *Exec) ExpectAnyOrder(calls []Call) {
	e.expect(calls, true)
}

func (e *Exec) expect(calls []Call, anyOrder bool) {
	if e == nil {
		return
	}
	e.mu.Lock()
	e.plan, e.anyOrder = slices.Clone(calls), anyOrder
	var stale *proc
	if e.next != nil && e.planIndexLocked(e.next.call.Path, e.next.call.Env) < 0 {
		stale, e.next = e.next, nil
		stale.guard.Stop()
		e.stats.Discarded++
	}
	e.startNextLocked()
	e.mu.Unlock()
	stale.kill()
}

// planIndexLocked is the position in plan of the call (path, env) as the
// plan expects it: in order, only plan[0]; in any order, any; -1 if none.
func (e *Exec) planIndexLocked(path string, env []string) int {
	for i, c := range e.plan {
		if c.equal(path, env) {
			return i
		}
		if !e.anyOrder {
			break
		}
	}
	return -1
}

// Close stops any waiting process. It is safe to call more than once, and on nil.
func (e *Exec) Close() {
	e.Expect(nil)
}

// LogStats logs, at debug level, what became of the processes started early,
// if there were any.
func (e *Exec) LogStats(log *slog.Logger) {
	if e == nil {
		return
	}
	if s := e.Stats(); s.Started > 0 || s.Skipped > 0 {
		log.Debug("delegate processes started early", "started", s.Started, "used", s.Used, "discarded", s.Discarded, "skippedBusy", s.Skipped)
	}
}

// Stats reports what became of the processes started early so far.
func (e *Exec) Stats() PrestartStats {
	if e == nil {
		return PrestartStats{}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.stats
}

// startNextLocked starts plan[0]'s process if there is none, in the
// background: the fork and exec take a millisecond or more, and the caller has
// its own work to do meanwhile. A failure to start is not an error here: the
// call starts its own process when its turn comes. A process still waiting
// after Guard is killed (and started again when its turn comes).
func (e *Exec) startNextLocked() {
	if e.next != nil || len(e.plan) == 0 || e.anyOrder {
		return
	}
	busy := e.Busy
	if busy == nil {
		busy = cpuBusy
	}
	if busy() {
		e.stats.Skipped++
		return
	}
	p := &proc{call: e.plan[0], started: make(chan struct{})}
	go func() {
		p.err = e.startProc(p)
		close(p.started)
	}()
	guard := e.Guard
	if guard <= 0 {
		guard = DefaultPrestartGuard
	}
	p.guard = time.AfterFunc(guard, func() {
		e.mu.Lock()
		if e.next != p {
			e.mu.Unlock()
			return
		}
		e.next = nil
		e.stats.Discarded++
		e.mu.Unlock()
		p.kill()
	})
	e.next = p
	e.stats.Started++
}

// cpuBusy reports whether the run queue is long: more than busyPerCPU
// runnable tasks per CPU, from /proc/loadavg. An early start pays off when it
// runs on a CPU that has time for it; on a saturated node it only moves work
// ahead of other pods' delegates. On the 2-CPU benchmark machine, one pod at a
// time keeps at most about 11 tasks runnable, and 20 pods started at once
// 20 to 40 (docs/performance-history.md, change 7).
func cpuBusy() bool {
	b, err := os.ReadFile("/proc/loadavg")
	return err == nil && busyFrom(string(b), runtime.NumCPU())
}

// busyPerCPU is how many runnable tasks per CPU make a node busy.
const busyPerCPU = 8

// busyFrom reads the running-task count from /proc/loadavg's text ("0.52
// 0.58 0.59 3/467 1234": 3 runnable) and compares it with busyPerCPU*ncpu.
// Anything it cannot read counts as not busy.
func busyFrom(loadavg string, ncpu int) bool {
	f := strings.Fields(loadavg)
	if len(f) < 4 {
		return false
	}
	running, _, _ := strings.Cut(f[3], "/")
	n, err := strconv.Atoi(running)
	return err == nil && n > busyPerCPU*ncpu
}

// take returns the process waiting for this call, or nil, and moves the plan
// on. In order, a call the plan did not expect ends the plan, and the
// process waiting for another call is returned as stale. In any order, the
// waiting process serves only its own call, and waits for it otherwise.
func (e *Exec) take(path string, env []string) (mine, stale *proc) {
	e.mu.Lock()
	defer e.mu.Unlock()
	i := e.planIndexLocked(path, env)
	switch {
	case i >= 0:
		e.plan = slices.Delete(e.plan, i, i+1)
	case !e.anyOrder:
		e.plan = nil
	}
	p := e.next
	if p == nil || (e.anyOrder && !p.call.equal(path, env)) {
		return nil, nil
	}
	e.next = nil
	p.guard.Stop()
	if i < 0 {
		e.stats.Discarded++
		return nil, p
	}
	return p, nil
}

// startNext starts the next expected call's process while the current call
// runs.
func (e *Exec) startNext() {
	e.mu.Lock()
	e.startNextLocked()
	e.mu.Unlock()
}

// outputDelay bounds the wait for a plugin's output after the plugin exited
// or was killed.
const outputDelay = time.Second

// busyRetries is how often a plugin that is being replaced ("text file
// busy") is tried again, a second apart, as libcni's own exec does.
const busyRetries = 5

// ExecPlugin runs the plugin at pluginPath with stdinData and environ, using
// the process started for this call if there is one. A failure is returned as
// the plugin's CNI error when it printed one, as libcni does.
func (e *Exec) ExecPlugin(ctx context.Context, pluginPath string, stdinData []byte, environ []string) ([]byte, error) {
	p, stale := e.take(pluginPath, environ)
	stale.kill()
	if p != nil {
		<-p.started
		e.mu.Lock()
		if p.err == nil {
			e.stats.Used++
		} else {
			p = nil // it could not be started early; try again now
		}
		e.mu.Unlock()
	}
	for attempt := 0; p == nil; attempt++ {
		p = &proc{call: Call{Path: pluginPath, Env: environ}}
		err := e.startProc(p)
		if err == nil {
			break
		}
		p = nil
		if !errors.Is(err, syscall.ETXTBSY) || attempt >= busyRetries {
			return nil, e.pluginError(pluginPath, err, nil, nil)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Second):
		}
	}
	done := p.give(ctx, stdinData, e.ReapLater)
	e.startNext()
	err := <-done
	if err != nil && ctx.Err() != nil {
		cause := context.Cause(ctx)
		if errors.Is(err, errGroupLeft) {
			cause = fmt.Errorf("%w; %v", cause, err)
		}
		return nil, e.killedError(pluginPath, cause)
	}
	if err == nil && p.stdout.dropped > 0 {
		return nil, types.NewError(types.ErrIOFailure, fmt.Sprintf("plugin %s wrote %d bytes to stdout, more than the limit of %d for a CNI result", pluginPath, int64(p.stdout.Len())+p.stdout.dropped, MaxPluginStdout), "")
	}
	if err != nil {
		return nil, e.pluginError(pluginPath, err, p.stdout.Bytes(), p.stderr.text())
	}
	if e.Stderr != nil && p.stderr.Len() > 0 {
		e.Stderr.Write(p.stderr.text())
	}
	return p.stdout.Bytes(), nil
}

// FindInPath finds plugin in paths; under Root, as seen from Root, returning
// its path inside Root.
func (e *Exec) FindInPath(plugin string, paths []string) (string, error) {
	if e.Root == "" {
		return invoke.FindInPath(plugin, paths)
	}
	rooted := make([]string, len(paths))
	for i, p := range paths {
		rooted[i] = filepath.Join(e.Root, p)
	}
	full, err := invoke.FindInPath(plugin, rooted)
	if err != nil {
		return "", fmt.Errorf("find plugin %q under host root %s: %w", plugin, e.Root, err)
	}
	return "/" + strings.TrimPrefix(strings.TrimPrefix(full, filepath.Clean(e.Root)), "/"), nil
}

// Decode reads a plugin's VERSION answer.
func (e *Exec) Decode(jsonBytes []byte) (version.PluginInfo, error) {
	return (&version.PluginDecoder{}).Decode(jsonBytes)
}

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
	reapOnce   sync.Once
	reapErr    error // cmd.Wait's answer, once reaped
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
	// The output pipes are this package's own, not os/exec's, so that the
	// output can be read to its end without reaping the process (ReapLater).
	outR, outW, err := os.Pipe()
	if err != nil {
		return err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return err
	}
	cmd.Stdout, cmd.Stderr = outW, errW
	stdin, err := cmd.StdinPipe()
	if err == nil {
		if err = spawn(cmd); err != nil {
			stdin.Close()
		}
	}
	// The child has its own copies of the write ends.
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		return err
	}
	p.outR, p.errR, p.output = outR, errR, make(chan struct{}, 2)
	go p.readOutput(outR, &p.stdout)
	go p.readOutput(errR, &p.stderr)
	// The process is ours and not yet reaped, so its pid cannot have been
	// reused. This pidfd is a file of its own: making it non-blocking does
	// not touch the one os.Process waits on.
	p.pidfd = -1
	if fd, err := unix.PidfdOpen(cmd.Process.Pid, 0); err == nil {
		p.pidfd = fd
	}
	p.cmd, p.stdin = cmd, stdin
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
// process's exit. ctx ending kills the process.
func (p *proc) give(ctx context.Context, stdin []byte, reapLater bool) <-chan error {
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
	p.awaitGroup()
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
// is reaped reapDelay later (Exec.ReapLater); until then it is a zombie,
// which holds its pid and so its process group's id.
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
		time.AfterFunc(reapDelay, func() { p.reap() })
	}
	return status
}

// reapDelay is how long after a plugin's exit ReapLater reaps it: by then
// the plugin's threads have finished their own exit, which a reap at once
// waits for, spinning (docs/performance-history.md, change 18). Those threads
// run late on a busy node: at a load of 8 on 2 CPUs, a reap 5 ms after the
// exit still cost 0.8-1.6 ms, one 50 ms after it 0.1-0.3 ms. A zombie holds
// only its pid and its task until then.
const reapDelay = 100 * time.Millisecond

// reap reaps the process, once, and returns its exit as exec.Cmd.Wait does.
func (p *proc) reap() error {
	p.reapOnce.Do(func() { p.reapErr = p.cmd.Wait() })
	return p.reapErr
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

// awaitExit returns once the process of pidfd has exited, leaving it to be
// reaped, with its siginfo (ok), or as soon as an error makes waiting on the
// pidfd impossible (then Wait blocks as usual). It closes pidfd.
func awaitExit(pidfd int) (info unix.Siginfo, ok bool) {
	if err := unix.SetNonblock(pidfd, true); err != nil {
		unix.Close(pidfd)
		return info, false
	}
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
