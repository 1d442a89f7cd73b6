package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// TestMetaPluginNADsRefused: anyone who may create NADs and pods in a
// namespace writes a NAD whose plugin, or whose IPAM, is manifold, with a
// binDir of their own (a volume of their pod, on the host). Run as that
// network's delegate, manifold would obey it and run their binary as root.
// The ADD is refused with code 7 before anything runs, the pod gets a Warning
// event, and the binary never runs. allowedPluginTypes narrows further what a
// NAD network may run.
func TestMetaPluginNADsRefused(t *testing.T) {
	e := newEnv(t)
	evil := t.TempDir()
	mark := filepath.Join(t.TempDir(), "x-ran")
	script := fmt.Sprintf("#!/bin/sh\ntouch %s\necho '{\"cniVersion\":\"1.0.0\"}'\n", mark)
	if err := os.WriteFile(filepath.Join(evil, "x"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	owned := fmt.Sprintf(`"binDir":%q,"cniDir":%q,"delegates":[{"cniVersion":"1.0.0","name":"x","type":"x"}]`, evil, t.TempDir())
	e.nad(e.ns, "as-plugin", `{"cniVersion":"1.0.0","type":"manifold",`+owned+`}`)
	e.nad(e.ns, "as-ipam", fmt.Sprintf(`{"cniVersion":"1.0.0","type":"bridge","bridge":%q,"ipam":{"type":"manifold"},%s}`, e.bridge, owned))
	e.nad(e.ns, "in-list", fmt.Sprintf(`{"cniVersion":"1.0.0","name":"l","plugins":[
		{"type":"macvlan","master":%q,"ipam":{"type":"host-local","subnet":%q,"dataDir":%q}},
		{"type":"multus-shim",%s}]}`, e.parent, nextSubnet(), e.leaseDir, owned))
	e.nad(e.sysNS, "override", `{"cniVersion":"1.0.0","type":"manifold",`+owned+`}`)
	sa := nextSubnet()
	e.nad(e.ns, "ok", e.macvlanConf("", sa))
	conf := e.manifoldConf(nil)

	for _, tc := range []struct {
		name        string
		annotations map[string]string
		names       []string // what the error and the Warning event name
	}{
		{"plugin", map[string]string{annotNetworks: "ok, as-plugin"}, []string{e.ns + "/as-plugin", `"manifold"`, "meta-plugin"}},
		{"ipam", map[string]string{annotNetworks: "as-ipam"}, []string{e.ns + "/as-ipam", `ipam type "manifold"`}},
		{"conflist", map[string]string{annotNetworks: "in-list"}, []string{e.ns + "/in-list", `"multus-shim"`}},
		{"default-network override", map[string]string{annotDefaultNetwork: "override"}, []string{e.sysNS + "/override", "meta-plugin"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := e.sub(t)
			pod := e.pod(e.ns, tc.annotations)
			box := e.sandboxFor(pod)
			_, err := e.add(conf, box)
			wantCode(t, err, 7, append([]string{e.ns + "/" + pod.Name}, tc.names...)...)
			e.checkRefused(box, tc.names...)
			if _, err := os.Stat(mark); err == nil {
				t.Fatal("the NAD author's binary ran as root")
			}
		})
	}

	t.Run("allowedPluginTypes", func(t *testing.T) {
		e := e.sub(t)
		strict := e.manifoldConf(map[string]any{"allowedPluginTypes": []string{"bridge", "host-local"}})
		pod := e.pod(e.ns, map[string]string{annotNetworks: "ok"})
		box := e.sandboxFor(pod)
		_, err := e.add(strict, box)
		wantCode(t, err, 7, e.ns+"/ok", `type "macvlan"`, "allowedPluginTypes")
		e.checkRefused(box, e.ns+"/ok", "allowedPluginTypes")

		allowing := e.manifoldConf(map[string]any{"allowedPluginTypes": []string{"macvlan", "host-local"}})
		pod = e.pod(e.ns, map[string]string{annotNetworks: "ok"})
		box = e.sandboxFor(pod)
		res := e.mustAdd(allowing, box)
		e.checkAttached(box, res, []want{e.clusterWant(), {name: e.ns + "/ok", ifname: "net1", subnet: sa}})
		e.mustDel(allowing, box)
		e.checkNothingLeft(box)
	})
}
