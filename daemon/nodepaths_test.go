package daemon

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/manifold-cni/manifold/netconf"
	"github.com/manifold-cni/manifold/shimproto"
)

// TestDaemonNodePaths: the daemon runs delegates only from its --bin-dir, and
// keeps every call on its own node paths. A request that names the attacker's
// binDir, or puts the attacker's dir in CNI_PATH, does not get the attacker's
// plugin run as root; one that sets any node key to another value is refused
// with code 7 naming the key, the value and the flag; a key left out, or set
// to the daemon's own value, takes the daemon's.
func TestDaemonNodePaths(t *testing.T) {
	evilDir, marker := t.TempDir(), filepath.Join(t.TempDir(), "ran")
	if err := os.WriteFile(filepath.Join(evilDir, "evil"), []byte("#!/bin/sh\ntouch "+marker+"\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	binDir, cniDir, logDir := t.TempDir(), t.TempDir(), t.TempDir()
	node := &netconf.NodePaths{BinDir: binDir, CNIDir: cniDir, ConfDir: filepath.Join(cniDir, "net.d"),
		Kubeconfig: "/etc/node/kubeconfig", LogFile: filepath.Join(logDir, "manifold.log")}
	d := newDaemon(nil, "", node)
	call := func(env []string, conf map[string]any) *shimproto.Reply {
		t.Helper()
		m := map[string]any{"cniVersion": "1.0.0", "name": "m", "type": "manifold", "logLevel": "debug",
			"delegates": []any{map[string]any{"cniVersion": "1.0.0", "name": "d", "type": "evil"}}}
		for k, v := range conf {
			m[k] = v
		}
		stdin, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return d.plugin.ServeCall(context.Background(), &shimproto.Request{Env: env, Stdin: stdin}, nil, nil)
	}
	add := func(cniPath string) []string {
		return []string{"CNI_COMMAND=ADD", "CNI_CONTAINERID=c1", "CNI_NETNS=/nonexistent/netns", "CNI_IFNAME=eth0", "CNI_PATH=" + cniPath}
	}

	for _, tc := range []struct {
		name    string
		cniPath string
		conf    map[string]any
		// refused is the key named in a code 7 refusal; "" for a call that
		// runs, and fails to find "evil" in the daemon's bin dir.
		refused, flag string
	}{
		{"binDir", "/nonexistent", map[string]any{"binDir": evilDir}, "binDir", "--bin-dir"},
		{"CNI_PATH", evilDir, nil, "", ""},
		{"cniDir", "/nonexistent", map[string]any{"cniDir": evilDir}, "cniDir", "--cni-dir"},
		{"confDir", "/nonexistent", map[string]any{"confDir": evilDir}, "confDir", "--conf-dir"},
		{"kubeconfig", "/nonexistent", map[string]any{"kubeconfig": filepath.Join(evilDir, "kubeconfig")}, "kubeconfig", "--kubeconfig"},
		{"logFile", "/nonexistent", map[string]any{"logFile": filepath.Join(evilDir, "log")}, "logFile", "--log-file"},
		{"the daemon's own values", evilDir, map[string]any{"binDir": binDir + "/", "cniDir": cniDir, "kubeconfig": node.Kubeconfig, "logFile": node.LogFile}, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			os.Remove(marker)
			rep := call(add(tc.cniPath), tc.conf)
			if exists(marker) {
				t.Fatal("the request's plugin ran in the daemon")
			}
			e := cniError(t, rep)
			if tc.refused == "" {
				if e.Code == types.ErrInvalidNetworkConfig && strings.Contains(e.Msg, "this node's daemon serves") {
					t.Fatalf("refused: %s", e.Msg)
				}
				if !strings.Contains(e.Msg, "evil") || !strings.Contains(e.Msg, binDir) {
					t.Errorf("error %q should say that evil is not in the daemon's bin dir %s", e.Msg, binDir)
				}
				return
			}
			want := tc.conf[tc.refused].(string)
			daemonVal := map[string]string{"binDir": node.BinDir, "cniDir": node.CNIDir, "confDir": node.ConfDir, "kubeconfig": node.Kubeconfig, "logFile": node.LogFile}[tc.refused]
			if e.Code != types.ErrInvalidNetworkConfig || !strings.Contains(e.Msg, `"`+tc.refused+`"`) || !strings.Contains(e.Msg, want) ||
				!strings.Contains(e.Msg, daemonVal) || !strings.Contains(e.Msg, tc.flag) {
				t.Errorf("refusal %+v: want code 7 naming key %s, its value %s, the daemon's %s and %s", e, tc.refused, want, daemonVal, tc.flag)
			}
		})
	}
	// The calls that ran kept to the daemon's cniDir and logFile.
	if b, err := os.ReadFile(node.LogFile); err != nil || !strings.Contains(string(b), "c1") {
		t.Errorf("the daemon's log file: %v, %q; want the calls' lines", err, b)
	}
	if entries, _ := os.ReadDir(evilDir); len(entries) != 1 {
		t.Errorf("the request's dir holds %d entries, want only its plugin", len(entries))
	}
}
