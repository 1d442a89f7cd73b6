// Command shim starts a CNI plugin on behalf of manifold's benchmark and
// reports the plugin's peak memory.
//
// Why: ru_maxrss of a process started by a large Go program is at least that
// program's own RSS, because Go starts children with vfork (CLONE_VM) and the
// kernel carries the parent's memory high-water mark into the child at exec.
// The benchmark itself is large (it links client-go), so it cannot measure a
// plugin's peak directly. The shim is small: a plugin it starts inherits only
// the shim's own couple of MiB.
//
// A copy of the shim is installed under a plugin's name. It runs the real
// binary of the same name from the ".real" directory beside it, passes stdin,
// stdout, stderr, the environment and the exit status through, and appends one
// line to ".shim.log" beside it:
//
//	<parent pid> <CNI_COMMAND> <plugin> <nanoseconds> <peak RSS, KiB>
//
// The peak is that of the plugin or of any process it ran and reaped,
// whichever is larger. The benchmark uses the shim for memory figures only;
// times come from kernel process events, with no shim in the way.
package main

import (
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

func main() {
	self, err := os.Executable()
	if err != nil {
		fail(err)
	}
	dir, name := filepath.Split(self)
	real := filepath.Join(dir, ".real", name)
	argv := append([]string{real}, os.Args[1:]...)
	attr := &syscall.ProcAttr{Env: os.Environ(), Files: []uintptr{0, 1, 2}}

	start := time.Now()
	pid, err := syscall.ForkExec(real, argv, attr)
	if err != nil {
		fail(err)
	}
	var ws syscall.WaitStatus
	var ru syscall.Rusage
	for {
		_, err = syscall.Wait4(pid, &ws, 0, &ru)
		if err != syscall.EINTR {
			break
		}
	}
	elapsed := time.Since(start)
	if err != nil {
		fail(err)
	}

	line := strconv.Itoa(os.Getppid()) + " " + os.Getenv("CNI_COMMAND") + " " + name + " " +
		strconv.FormatInt(elapsed.Nanoseconds(), 10) + " " + strconv.FormatInt(ru.Maxrss, 10) + "\n"
	// One write with O_APPEND: lines of concurrent shims never interleave.
	if f, err := os.OpenFile(filepath.Join(dir, ".shim.log"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644); err == nil {
		_, _ = f.WriteString(line)
		_ = f.Close()
	}

	switch {
	case ws.Exited():
		os.Exit(ws.ExitStatus())
	case ws.Signaled():
		os.Exit(128 + int(ws.Signal()))
	}
	os.Exit(1)
}

func fail(err error) {
	_, _ = os.Stderr.WriteString("bench shim: " + err.Error() + "\n")
	os.Exit(127)
}
