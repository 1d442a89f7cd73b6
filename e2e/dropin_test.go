package e2e

// The configs that a Multus v4.3.0 user writes on day one and that Multus
// runs (issue 51): each attaches here too, in thin and in thick mode.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	corev1 "k8s.io/api/core/v1"

	"github.com/manifold-cni/manifold/internal/testenv"
	"github.com/manifold-cni/manifold/podresources/podresourcestest"
)

// dropinMode runs manifold in thin or thick mode over one env: conf is the
// runtime's config with extra keys, and add and del call it.
type dropinMode struct {
	conf  func(extra map[string]any) *libcni.NetworkConfigList
	add   func(conf *libcni.NetworkConfigList, sb *sandbox) (types.Result, error)
	del   func(conf *libcni.NetworkConfigList, sb *sandbox) error
	thick bool
}

// dropinModes are thin (the manifold binary) and thick (manifold-shim and
// a daemon whose flags fix the node paths the config names: the fake
// kubelet's socket and Multus's conf dir).
func dropinModes(t *testing.T, e *env, keys map[string]any, daemonFlags ...string) map[string]func() dropinMode {
	ctx := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.Background(), 2*time.Minute)
	}
	return map[string]func() dropinMode{
		"thin": func() dropinMode {
			return dropinMode{
				conf: func(extra map[string]any) *libcni.NetworkConfigList { return e.manifoldConf(merged(keys, extra)) },
				add: func(conf *libcni.NetworkConfigList, sb *sandbox) (types.Result, error) {
					c, cancel := ctx()
					defer cancel()
					return e.rt.Add(c, conf, sb.Pod)
				},
				del: func(conf *libcni.NetworkConfigList, sb *sandbox) error {
					c, cancel := ctx()
					defer cancel()
					return e.rt.Del(c, conf, sb.Pod)
				},
			}
		},
		"thick": func() dropinMode {
			th := &thickEnv{env: e, thick: testenv.NewRuntime(t, testenv.ThickBinDir(t, false))}
			flags := append([]string{"--bin-dir", th.thick.BinDir, "--cni-dir", e.cniDir, "--conf-dir", e.confDir,
				"--kubeconfig", e.cp.KubeconfigPath, "--log-file", e.logFile}, daemonFlags...)
			th.daemon = testenv.StartDaemon(t, testenv.Manifold(t), flags...)
			th.socket = th.daemon.Socket
			return dropinMode{
				conf: func(extra map[string]any) *libcni.NetworkConfigList { return th.thickConf(merged(keys, extra)) },
				add:  th.add,
				del: func(conf *libcni.NetworkConfigList, sb *sandbox) error {
					c, cancel := ctx()
					defer cancel()
					return th.thick.Del(c, conf, sb.Pod)
				},
				thick: true,
			}
		},
	}
}

func merged(a, b map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}

// TestDropinConfigs: the configs that run under Multus v4.3.0 and that
// manifold refused with code 7 before (issue 51), in thin and thick mode,
// with logLevel "trace" (unknown: a warning in the log, not a failure):
//   - NADs whose resourceName is KubeVirt's bridge-marker resource and
//     ovs-cni's, which the kubelet lists no device of: attached with no
//     device, a Normal AttachedWithoutDevice event each;
//   - "default-route": [] on a network whose plugin sets a default route:
//     its default route is the pod's only one, eth0's is gone;
//   - a NAD with an empty spec.config whose file is in Multus's confDir;
//   - a NAD with no cniVersion, and a conflist with only cniVersions;
//   - a pod in the system namespace gets its network-status;
//   - a missing NAD's Warning has reason NoNetworkFound;
//   - DEL with a config that has lost its default network and has a bad
//     apiTimeout still deletes everything.
func TestDropinConfigs(t *testing.T) {
	e := newEnv(t)
	kubelet := podresourcestest.Start(t) // knows no pod: lists no device
	multusDir := t.TempDir()
	keys := map[string]any{"podResourcesSocket": kubelet.Socket, "deviceCheckpoint": filepath.Join(t.TempDir(), "checkpoint"),
		"multusConfDir": multusDir, "logLevel": "trace",
		// Decoded and unused, by Multus and by manifold.
		"ipam": map[string]any{}, "dns": map[string]any{"nameservers": []string{"10.96.0.10"}}}
	sBr, sOvs, sMultus, sGw, sOld, sNew := nextSubnet(), nextSubnet(), nextSubnet(), nextSubnet(), nextSubnet(), nextSubnet()

	br1, gwBr := testenv.UniqueName("mfkv"), testenv.UniqueName("mfgw")
	t.Cleanup(func() { testenv.DeleteLink(br1); testenv.DeleteLink(gwBr) })
	e.annotatedNAD(e.ns, "br1", fmt.Sprintf(`{"cniVersion":"0.4.0","name":"br1","type":"bridge","bridge":%q,
		"ipam":{"type":"host-local","subnet":%q,"dataDir":%q}}`, br1, sBr, e.leaseDir),
		map[string]string{"k8s.v1.cni.cncf.io/resourceName": "bridge.network.kubevirt.io/" + br1})
	e.annotatedNAD(e.ns, "ovs", e.macvlanConf("", sOvs), map[string]string{"k8s.v1.cni.cncf.io/resourceName": "ovs-cni.network.kubevirt.io/br1"})
	e.nad(e.ns, "frommultus", "")
	e.writeFile(filepath.Join(multusDir, "50-frommultus.conf"), e.macvlanConf("frommultus", sMultus))
	e.nad(e.ns, "gw", e.bridgeConflist("gw-net", gwBr, sGw))
	e.nad(e.ns, "noversion", fmt.Sprintf(`{"type":"macvlan","master":%q,"mode":"bridge","ipam":{"type":"host-local","subnet":%q,"dataDir":%q}}`, e.parent, sOld, e.leaseDir))
	e.nad(e.ns, "versions", fmt.Sprintf(`{"name":"versions","cniVersions":["0.4.0","1.0.0","1.1.0"],"plugins":[{"type":"macvlan","master":%q,"mode":"bridge",
		"ipam":{"type":"host-local","subnet":%q,"dataDir":%q}}]}`, e.parent, sNew, e.leaseDir))

	modes := dropinModes(t, e, keys, "--pod-resources-socket", kubelet.Socket, "--device-checkpoint", keys["deviceCheckpoint"].(string),
		"--multus-conf-dir", multusDir)
	for _, name := range []string{"thin", "thick"} {
		t.Run(name, func(t *testing.T) {
			e := e.sub(t)
			m := modes[name]()
			conf := m.conf(nil)
			// DEL's config has lost its default network and has a bad
			// apiTimeout: DEL works around both.
			broken := m.conf(map[string]any{"clusterNetwork": "", "apiTimeout": "soon"})
			logStart := logSize(t, e.logFile)

			t.Run("kubevirt, default-route [], Multus's confDir", func(t *testing.T) {
				e := e.sub(t)
				pod := e.pod(e.ns, map[string]string{annotNetworks: `[{"name":"br1"},{"name":"ovs"},{"name":"frommultus"},{"name":"gw","default-route":[]}]`})
				box := e.sandboxFor(pod)
				res, err := m.add(conf, box)
				if err != nil {
					t.Fatalf("ADD: %v", err)
				}
				cur, err := types100.NewResultFromResult(res)
				if err != nil {
					t.Fatal(err)
				}
				if m.thick {
					(&thickEnv{env: e}).waitReported(pod, 5)
				}
				e.checkAttached(box, cur, []want{
					// gw's default route is the pod's: eth0's went.
					{name: clusterName, ifname: "eth0", subnet: e.cluster, dns: []string{e.cluster.IP(53)}},
					{name: e.ns + "/br1", ifname: "net1", subnet: sBr},
					{name: e.ns + "/ovs", ifname: "net2", subnet: sOvs},
					{name: e.ns + "/frommultus", ifname: "net3", subnet: sMultus},
					{name: e.ns + "/gw", ifname: "net4", subnet: sGw, gateway: []string{sGw.IP(1)}, dns: []string{sGw.IP(53)}},
				})
				if got, want := defaultRoutes(routes(t, box.netns)), []string{"default via " + sGw.IP(1) + " dev net4"}; !slices.Equal(got, want) {
					t.Errorf("default routes %v, want %v", got, want)
				}
				noDev := eventsOf(e.events(pod), corev1.EventTypeNormal, "AttachedWithoutDevice")
				if msgs := strings.Join(eventMessages(noDev), "\n"); len(noDev) != 2 || !strings.Contains(msgs, "bridge.network.kubevirt.io/"+br1) || !strings.Contains(msgs, "ovs-cni.network.kubevirt.io/br1") {
					t.Errorf("AttachedWithoutDevice events:\n%s\nwant one for each KubeVirt network", msgs)
				}
				if err := m.del(broken, box); err != nil {
					t.Fatalf("DEL with a config that lost its default network: %v", err)
				}
				e.checkNothingLeft(box)
			})

			t.Run("no cniVersion, cniVersions", func(t *testing.T) {
				e := e.sub(t)
				pod := e.pod(e.ns, map[string]string{annotNetworks: "noversion, versions"})
				box := e.sandboxFor(pod)
				if _, err := m.add(conf, box); err != nil {
					t.Fatalf("ADD: %v", err)
				}
				l := links(t, box.netns)
				if len(l["net1"].addrs) != 1 || !sOld.Contains(l["net1"].addrs[0].IP) || len(l["net2"].addrs) != 1 || !sNew.Contains(l["net2"].addrs[0].IP) {
					t.Errorf("net1 %s, net2 %s; want addresses in %s and %s", l["net1"].addrString(), l["net2"].addrString(), sOld, sNew)
				}
				st := e.waitForStatus(pod)
				if len(st) != 3 || !slices.Equal(st[1].IPs, []string{l["net1"].addrs[0].IP.String()}) || st[2].Name != e.ns+"/versions" {
					t.Errorf("network-status %+v", st)
				}
				if err := m.del(conf, box); err != nil {
					t.Fatalf("DEL: %v", err)
				}
				e.checkNothingLeft(box)
			})

			t.Run("a pod in the system namespace gets its status", func(t *testing.T) {
				e := e.sub(t)
				pod := e.pod(e.sysNS, nil)
				box := e.sandboxFor(pod)
				if _, err := m.add(conf, box); err != nil {
					t.Fatalf("ADD: %v", err)
				}
				if st := e.waitForStatus(pod); len(st) != 1 || st[0].Interface != "eth0" || string(st[0].DNS) == "" {
					t.Errorf("network-status %+v, want eth0's", st)
				}
				if err := m.del(conf, box); err != nil {
					t.Fatalf("DEL: %v", err)
				}
				e.checkNothingLeft(box)
			})

			t.Run("a missing NAD: NoNetworkFound", func(t *testing.T) {
				e := e.sub(t)
				pod := e.pod(e.ns, map[string]string{annotNetworks: "br1, missing"})
				box := e.sandboxFor(pod)
				_, err := m.add(conf, box)
				wantCode(t, err, 7, e.ns+"/missing")
				e.checkNothingLeft(box)
				if w := eventsOf(e.events(pod), corev1.EventTypeWarning, "NoNetworkFound"); len(w) != 1 || !strings.Contains(w[0].Message, e.ns+"/missing") {
					t.Errorf("NoNetworkFound events %v, want one naming %s/missing", eventMessages(w), e.ns)
				}
				if err := m.del(conf, box); err != nil {
					t.Fatalf("DEL: %v", err)
				}
			})

			// The unknown logLevel was a warning, logged at the default level.
			if log := logSince(t, e.logFile, logStart); !strings.Contains(log, `config problem worked around`) || !strings.Contains(log, `trace`) {
				t.Errorf("the log has no warning about logLevel trace")
			}
		})
	}
}

func logSize(t *testing.T, path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

func logSince(t *testing.T, path string, from int64) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil || int64(len(b)) < from {
		return ""
	}
	return string(b[from:])
}
