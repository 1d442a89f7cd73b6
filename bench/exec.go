package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"
)

// procStat is what the benchmark learns about one plugin process it started.
type procStat struct {
	Plugin string
	PID    int
	Wall   time.Duration
	// MaxRSSKiB is ru_maxrss from wait4: the peak RSS of the process or of any
	// of its reaped descendants, whichever is larger.
	MaxRSSKiB int64
}

// recorder collects the procStats of the plugin calls made with its context.
type recorder struct {
	mu    sync.Mutex
	procs []procStat
}

type recorderKey struct{}

func withRecorder(ctx context.Context, r *recorder) context.Context {
	return context.WithValue(ctx, recorderKey{}, r)
}

func (r *recorder) add(p procStat) {
	r.mu.Lock()
	r.procs = append(r.procs, p)
	r.mu.Unlock()
}

// benchExec is the invoke.Exec the benchmark's libcni "runtime" uses for both
// arms alike, manifold and the direct reference. It behaves like libcni's own
// RawExec (stdin in, stdout out, a CNI error decoded from stdout on failure) and
// also records each process's wall time and peak RSS from wait4.
type benchExec struct {
	version.PluginDecoder
}

var _ invoke.Exec = &benchExec{}

func (*benchExec) ExecPlugin(ctx context.Context, pluginPath string, stdinData []byte, environ []string) ([]byte, error) {
	var stdout, stderr bytes.Buffer
	c := exec.CommandContext(ctx, pluginPath)
	c.Env = environ
	c.Stdin = bytes.NewReader(stdinData)
	c.Stdout = &stdout
	c.Stderr = &stderr
	start := time.Now()
	err := c.Run()
	wall := time.Since(start)
	if r, ok := ctx.Value(recorderKey{}).(*recorder); ok && c.ProcessState != nil {
		p := procStat{Plugin: pluginPath, PID: c.ProcessState.Pid(), Wall: wall}
		if ru, ok := c.ProcessState.SysUsage().(*syscall.Rusage); ok {
			p.MaxRSSKiB = ru.Maxrss
		}
		r.add(p)
	}
	if err != nil {
		return nil, pluginError(err, stdout.Bytes(), stderr.Bytes())
	}
	return stdout.Bytes(), nil
}

func (*benchExec) FindInPath(plugin string, paths []string) (string, error) {
	return invoke.FindInPath(plugin, paths)
}

// pluginError turns a failed plugin run into the CNI error it printed, as
// libcni's RawExec does.
func pluginError(err error, stdout, stderr []byte) error {
	e := &types.Error{}
	switch {
	case len(stdout) > 0 && json.Unmarshal(stdout, e) == nil && e.Msg != "":
	case len(stderr) > 0:
		e.Msg = fmt.Sprintf("plugin failed: %v: %q", err, stderr)
	default:
		e.Msg = fmt.Sprintf("plugin failed with no message: %v", err)
	}
	return e
}
