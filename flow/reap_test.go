package flow

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/skel"
	"golang.org/x/sys/unix"
)

// The binary answers each delegate's call before it reaps the delegate
// (delegate.Exec.ReapLater), and reaps them all at the end of its call:
// when ADD and DEL return, none of their delegates is left a zombie of the
// process, for the node's init to reap after it exits.
func TestBinaryLeavesNoZombie(t *testing.T) {
	bin := t.TempDir()
	pids := filepath.Join(t.TempDir(), "pids")
	script := "#!/bin/sh\necho $$ >> " + pids + "\ncat > /dev/null\n" +
		`echo '{"cniVersion":"1.0.0","ips":[{"address":"10.1.1.1/24"}]}'` + "\n"
	if err := os.WriteFile(filepath.Join(bin, "pidplug"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	conf := testConf(t, map[string]any{"kubeconfig": "", "binDir": bin, "delegates": []any{map[string]any{"cniVersion": "1.0.0", "name": "def", "plugins": []any{
		map[string]any{"type": "pidplug"}, map[string]any{"type": "pidplug"}, map[string]any{"type": "pidplug"}}}}})
	p := New()
	var out strings.Builder
	p.stdout = &out
	args := &skel.CmdArgs{ContainerID: "c1", Netns: "/nonexistent/netns", IfName: "eth0", Path: bin,
		Args: "K8S_POD_NAMESPACE=default;K8S_POD_NAME=p;K8S_POD_UID=u", StdinData: conf}
	seen := 0
	check := func(verb string) {
		t.Helper()
		b, err := os.ReadFile(pids)
		if err != nil {
			t.Fatal(err)
		}
		fields := strings.Fields(string(b))
		if len(fields) <= seen {
			t.Fatalf("%s ran no delegate", verb)
		}
		for _, f := range fields[seen:] {
			pid, _ := strconv.Atoi(f)
			var info unix.Siginfo
			err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
			if !errors.Is(err, unix.ECHILD) {
				t.Errorf("%s returned with delegate %d not reaped: waitid = %v (signo %d), want ECHILD", verb, pid, err, info.Signo)
			}
		}
		seen = len(fields)
	}
	if err := p.cmdAdd(args); err != nil {
		t.Fatalf("ADD: %v", err)
	}
	check("ADD")
	if err := p.cmdDel(args); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	check("DEL")
}
