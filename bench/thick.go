package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/containernetworking/cni/libcni"

	"github.com/manifold-cni/manifold/e2e/controlplane"
	"github.com/manifold-cni/manifold/internal/testenv"
)

// armThick is thick mode (docs/thick-mode.md): the runtime calls manifold-shim,
// which passes the call to a running `manifold daemon`. The delegates are the
// daemon's children, so only wall time is measured for this arm.
const armThick = "thick"

// setupThick builds thickDir (the plugins, manifold-shim, and manifold for the
// shim's fallback) and starts the daemon on a socket under the bench dir.
func (b *bench) setupThick() error {
	shim := os.Getenv("MANIFOLD_SHIM")
	if shim == "" {
		root, err := controlplane.RepoRoot()
		if err != nil {
			return err
		}
		shim = filepath.Join(b.dir, "manifold-shim")
		cmd := exec.CommandContext(b.ctx, "go", "build", "-trimpath", "-ldflags", "-s -w", "-o", shim, "./cmd/manifold-shim")
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if msg, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("build manifold-shim: %w: %s", err, msg)
		}
	}
	b.thickDir = filepath.Join(b.dir, "thickbin")
	if err := os.Mkdir(b.thickDir, 0o755); err != nil {
		return err
	}
	if err := testenv.LinkPlugins(b.thickDir, b.plugins); err != nil {
		return err
	}
	for name, src := range map[string]string{"manifold": b.manifold, "manifold-shim": shim} {
		if err := os.Symlink(src, filepath.Join(b.thickDir, name)); err != nil {
			return err
		}
	}
	b.daemonSocket = filepath.Join(b.dir, "daemon", "manifold.sock")
	daemon, err := testenv.RunDaemon(b.manifold, b.daemonSocket, os.Stderr)
	if err != nil {
		return err
	}
	b.daemonPid = daemon.Pid()
	b.onCleanup(func() {
		if err := daemon.Terminate(); err != nil {
			logf("%v", err)
		}
	})
	b.thickRuntime = libcni.NewCNIConfigWithCacheDir([]string{b.thickDir}, b.runtimeCache, &benchExec{})
	return nil
}

// thickConfList is manifoldConfList for the thick arm: the same keys, with
// manifold-shim as the type and the daemon's socket.
func (b *bench) thickConfList(kind string) (*libcni.NetworkConfigList, error) {
	list, err := b.manifoldConfList(kind, b.thickDir)
	if err != nil {
		return nil, err
	}
	var raw map[string]any
	if err := json.Unmarshal(list.Bytes, &raw); err != nil {
		return nil, err
	}
	plugin := raw["plugins"].([]any)[0].(map[string]any)
	plugin["type"], plugin["daemonSocket"] = "manifold-shim", b.daemonSocket
	data, err := json.Marshal(raw)
	if err != nil {
		return nil, err
	}
	return libcni.NetworkConfFromBytes(data)
}

// processCPU is the CPU time (user and system) that process pid has used so
// far, all its threads together, including threads that have exited.
func processCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	return parseProcCPU(string(b))
}

// parseProcCPU reads utime and stime (in clock ticks of 1/100 s on Linux)
// from the text of /proc/<pid>/stat.
func parseProcCPU(stat string) (time.Duration, error) {
	fields := testenv.StatFields(stat)
	if len(fields) < 13 {
		return 0, fmt.Errorf("/proc stat %q: %d fields after the name, want at least 13", stat, len(fields))
	}
	var ticks int64
	for _, f := range fields[11:13] {
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc stat: CPU time %q: %w", f, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * (time.Second / 100), nil
}
