package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/plugins/test/noop/debug"

	"github.com/manifold-cni/manifold/internal/testenv"
)

// TestNodeVerbsClusterNetworkNAD: with clusterNetwork naming a NAD in
// multusNamespace, as Multus configs usually do, the verbs that have no pod
// read that NAD: STATUS forwards to its plugins (instead of failing with code
// 7), GC forwards to them with the runtime's valid set, and a DEL of a pod
// attached before manifold (no record, no cache entry of manifold's) deletes
// that pod's default network.
func TestNodeVerbsClusterNetworkNAD(t *testing.T) {
	e := newEnv(t)
	dir := t.TempDir()
	dbg, cmdLog := filepath.Join(dir, "noop-debug.json"), filepath.Join(dir, "noop-cmdlog.json")
	if err := (&debug.Debug{ReportResult: `{"cniVersion":"1.0.0"}`}).WriteDebug(dbg); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cmdLog, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// The NAD's network: noop (which logs each call) then the env's bridge.
	var cl map[string]any
	if err := json.Unmarshal([]byte(e.bridgeConflist("e2e-nad-cluster", e.bridge, e.cluster)), &cl); err != nil {
		t.Fatal(err)
	}
	cl["cniVersion"] = "1.1.0"
	cl["plugins"] = append([]any{map[string]any{"type": "noop", "debugFile": dbg, "commandLog": cmdLog}}, cl["plugins"].([]any)...)
	clBytes, _ := json.Marshal(cl)
	e.nad(e.sysNS, "cluster-nad", string(clBytes))

	conf := e.manifoldConf(map[string]any{"clusterNetwork": "cluster-nad"})
	conf.CNIVersion = "1.1.0" // STATUS and GC are CNI 1.1; libcni injects the list's version

	// A pod attached before manifold, straight from the NAD's config.
	old := e.sandboxNamed(e.ns, "old-pod", "old-uid", nil)
	before := testenv.NewRuntime(t, e.rt.BinDir)
	clList := testenv.Conf(t, clBytes)
	if _, err := before.Add(e.ctx(), clList, old.Pod); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = before.Del(context.Background(), clList, old.Pod) })

	if err := e.rt.CNI.GetStatusNetworkList(e.ctx(), conf); err != nil {
		t.Fatalf("STATUS with clusterNetwork naming a NAD: %v", err)
	}
	valid := types.GCAttachment{ContainerID: old.ContainerID, IfName: "eth0"}
	if err := e.rt.CNI.GCNetworkList(e.ctx(), conf, &libcni.GCArgs{ValidAttachments: []types.GCAttachment{valid}}); err != nil {
		t.Fatalf("GC: %v", err)
	}
	entries, err := debug.ReadCommandLog(cmdLog)
	if err != nil {
		t.Fatal(err)
	}
	var cmds []string
	var gcValid []types.GCAttachment
	for _, en := range entries {
		cmds = append(cmds, en.Command)
		if en.Command == "GC" {
			var in struct {
				Valid []types.GCAttachment `json:"cni.dev/valid-attachments"`
			}
			_ = json.Unmarshal(en.CmdArgs.StdinData, &in)
			gcValid = in.Valid
		}
	}
	if !slices.Equal(cmds, []string{"ADD", "STATUS", "GC"}) {
		t.Errorf("calls that reached the NAD's plugins = %v, want ADD (the direct one), STATUS, GC", cmds)
	}
	if !slices.Contains(gcValid, valid) {
		t.Errorf("GC valid set = %v, want it to hold the pre-manifold pod's %v", gcValid, valid)
	}
	if got := filesMentioning(t, e.leaseDir, old.ContainerID, true); len(got) != 1 {
		t.Errorf("pre-manifold pod's leases after GC = %v, want 1", got)
	}

	// The runtime's DEL, through manifold, which has nothing of that pod.
	if err := e.rt.Del(e.ctx(), conf, old.Pod); err != nil {
		t.Fatalf("DEL of the pre-manifold pod: %v", err)
	}
	e.checkNothingLeft(old)
}
