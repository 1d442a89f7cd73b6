package cluster

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"
)

// LogKeeper copies the logs of manifold's DaemonSet pods as they are written,
// so that a failure report can show what an installer or a daemon said even
// after its pod was deleted and the kubelet removed its log files (an upgrade
// or a switch of modes deletes the pods whose words matter most).
type LogKeeper struct {
	dir  string
	stop chan struct{}
	done chan struct{}
	mu   sync.Mutex
	logs map[string][]byte // by pod dir/container/file
}

// KeepLogs starts copying every kube-system pod log whose pod name starts
// with "manifold", until Stop.
func (c *Cluster) KeepLogs() *LogKeeper {
	k := &LogKeeper{dir: c.Kubelet.PodLogsDir(), stop: make(chan struct{}), done: make(chan struct{}), logs: map[string][]byte{}}
	go func() {
		defer close(k.done)
		for {
			k.copy()
			select {
			case <-k.stop:
				k.copy()
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	return k
}

func (k *LogKeeper) copy() {
	files, _ := filepath.Glob(filepath.Join(k.dir, "kube-system_manifold*", "*", "*.log"))
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		rel, _ := filepath.Rel(k.dir, f)
		k.mu.Lock()
		if len(data) >= len(k.logs[rel]) {
			k.logs[rel] = data
		}
		k.mu.Unlock()
	}
}

// Stop ends the copying; the logs kept stay readable.
func (k *LogKeeper) Stop() {
	select {
	case <-k.stop:
	default:
		close(k.stop)
	}
	<-k.done
}

// Logs are the logs kept of the pods of DaemonSet daemonSet (all of them,
// deleted ones included), the last max bytes of each, in the order of their
// paths.
func (k *LogKeeper) Logs(daemonSet string, max int) string {
	return k.logsOf(func(n string) bool { return podOf(n) == daemonSet }, max)
}

// logsOf are the kept logs whose paths match, the last max bytes of each,
// in the order of their paths.
func (k *LogKeeper) logsOf(match func(path string) bool, max int) string {
	k.copy()
	k.mu.Lock()
	defer k.mu.Unlock()
	var names []string
	for n := range k.logs {
		if match(n) {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	var b strings.Builder
	for _, n := range names {
		log := k.logs[n]
		if len(log) > max {
			log = append([]byte("…"), log[len(log)-max:]...)
		}
		fmt.Fprintf(&b, "=== %s:\n%s\n", n, log)
	}
	return b.String()
}

// podOf is the DaemonSet of a kept log's path
// (kube-system_<daemonset>-<suffix>_<uid>/<container>/<n>.log).
func podOf(path string) string {
	dir := strings.SplitN(path, "/", 2)[0]
	dir = strings.TrimPrefix(dir, "kube-system_")
	if i := strings.LastIndex(dir, "_"); i >= 0 {
		dir = dir[:i]
	}
	if i := strings.LastIndex(dir, "-"); i >= 0 {
		return dir[:i]
	}
	return dir
}
