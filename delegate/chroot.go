package delegate

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"
)

// ChrootExec runs delegate plugins with Root as their root directory. The node
// daemon runs in a container, and a delegate must see the host's files as it
// does when the runtime runs it (its IPAM leases, iptables, the files of
// calico or flannel), so the daemon mounts the host's / at Root and runs
// delegates there. Plugin paths, CNI_PATH and the netns path mean the same
// inside Root as on the host.
type ChrootExec struct {
	Root string
}

var _ invoke.Exec = (*ChrootExec)(nil)

// FindInPath finds plugin in paths as seen from Root, and returns its path
// inside Root.
func (e *ChrootExec) FindInPath(plugin string, paths []string) (string, error) {
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

// busyRetries is how often a plugin that is being replaced ("text file
// busy") is tried again, a second apart, as libcni's own exec does.
const busyRetries = 5

// ExecPlugin runs the plugin at pluginPath (a path inside Root). A failure is
// returned as the plugin's CNI error when it printed one, as libcni does.
func (e *ChrootExec) ExecPlugin(ctx context.Context, pluginPath string, stdinData []byte, environ []string) ([]byte, error) {
	for attempt := 0; ; attempt++ {
		var stdout, stderr bytes.Buffer
		cmd := exec.CommandContext(ctx, pluginPath)
		cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: e.Root}
		cmd.Dir = "/"
		cmd.Env = environ
		cmd.Stdin = bytes.NewReader(stdinData)
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		if err == nil {
			return stdout.Bytes(), nil
		}
		if errors.Is(err, syscall.ETXTBSY) && attempt < busyRetries {
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(time.Second):
			}
			continue
		}
		return nil, pluginError(pluginPath, e.Root, err, stdout.Bytes(), stderr.Bytes())
	}
}

// pluginError is the plugin's own CNI error from its stdout, or else one that
// says what is known.
func pluginError(path, root string, err error, stdout, stderr []byte) error {
	var cniErr types.Error
	switch {
	case len(stdout) > 0 && json.Unmarshal(stdout, &cniErr) == nil:
		return &cniErr
	case len(stdout) > 0:
		cniErr.Msg = fmt.Sprintf("plugin %s (under host root %s) failed, and its output is not a CNI error: %q", path, root, stdout)
	case len(stderr) > 0:
		cniErr.Msg = fmt.Sprintf("plugin %s (under host root %s) failed: %q", path, root, stderr)
	default:
		cniErr.Msg = fmt.Sprintf("plugin %s (under host root %s) failed with no message: %v", path, root, err)
	}
	return &cniErr
}

// Decode reads a plugin's VERSION answer.
func (e *ChrootExec) Decode(jsonBytes []byte) (version.PluginInfo, error) {
	return (&version.PluginDecoder{}).Decode(jsonBytes)
}
