package main

// The bench's networks, pods and sandboxes: what each call is made for.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/containernetworking/cni/libcni"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/manifold-cni/manifold/e2e/controlplane"
	"github.com/manifold-cni/manifold/internal/testenv"
	"github.com/manifold-cni/manifold/k8sclient/nadv1"
	"github.com/manifold-cni/manifold/netconf"
)

// network is one delegate network, by position in a pod's list.
type network struct {
	Name string
	Conf string // conflist JSON, byte for byte what the delegates get from both arms
}

func netName(kind string, i int) string { return fmt.Sprintf("bench-%s-%d", kind, i) }

// networkDef is network i of a delegate set. Position 0 is the default
// network (clusterNetwork, a conflist file); the others are NADs. The real set
// cycles bridge, macvlan, ptp, each on its own /24, so an 8-network pod has
// three bridges, three macvlans and two ptps.
func (b *bench) networkDef(kind string, i int) network {
	name := netName(kind, i)
	var plugin string
	if kind == kindNoop {
		plugin = fmt.Sprintf(`{"type":"noop","debugFile":%q}`, b.noopDebugPath(i))
	} else {
		ipam := fmt.Sprintf(`{"type":"host-local","subnet":"10.250.%d.0/24","dataDir":%q}`, i, b.leaseDir)
		switch i % 3 {
		case 0:
			if i == 0 {
				ipam = fmt.Sprintf(`{"type":"host-local","subnet":"10.250.0.0/24","dataDir":%q,"routes":[{"dst":"0.0.0.0/0"}]}`, b.leaseDir)
			}
			plugin = fmt.Sprintf(`{"type":"bridge","bridge":%q,"isGateway":%t,"ipam":%s}`, b.bridges[i/3], i == 0, ipam)
		case 1:
			plugin = fmt.Sprintf(`{"type":"macvlan","master":%q,"mode":"bridge","ipam":%s}`, b.parent, ipam)
		case 2:
			plugin = fmt.Sprintf(`{"type":"ptp","ipam":%s}`, ipam)
		}
	}
	return network{Name: name, Conf: fmt.Sprintf(`{"cniVersion":"1.0.0","name":%q,"plugins":[%s]}`, name, plugin)}
}

const maxNetworks = 8

// noopDebugPath is the debug file of noop network i. noop needs one (it
// panics at start-up without it once CNI_ARGS is set) and answers ADD with the
// result stored in it.
func (b *bench) noopDebugPath(i int) string {
	return filepath.Join(b.dir, "noop", fmt.Sprintf("debug-%d.json", i))
}

// writeNoopDebug gives noop network i a one-interface, one-address result, so
// manifold has a realistic result to turn into network-status.
func (b *bench) writeNoopDebug(i int) error {
	result := fmt.Sprintf(`{"cniVersion":"1.0.0","interfaces":[{"name":%q,"mac":"02:00:00:00:00:%02x","sandbox":"/var/run/netns/bench"}],`+
		`"ips":[{"address":"10.251.%d.2/24","gateway":"10.251.%d.1","interface":0}]}`, ifName(i), i, i, i)
	debug, err := json.Marshal(map[string]any{"reportResult": result})
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(b.noopDebugPath(i)), 0o755); err != nil {
		return err
	}
	return os.WriteFile(b.noopDebugPath(i), debug, 0o644)
}

// networks writes both default networks and creates the NADs of positions
// 1..7 of both sets.
func (b *bench) networks() error {
	for i := 0; i < maxNetworks; i++ {
		if err := b.writeNoopDebug(i); err != nil {
			return err
		}
	}
	for _, kind := range []string{kindReal, kindNoop} {
		def := b.networkDef(kind, 0)
		if err := os.WriteFile(b.defaultNetPath(kind), []byte(def.Conf), 0o644); err != nil {
			return err
		}
		for i := 1; i < maxNetworks; i++ {
			n := b.networkDef(kind, i)
			if err := b.createNAD(namespace, n.Name, n.Conf, nil, false); err != nil {
				return err
			}
		}
	}
	return nil
}

// createNAD creates a NAD (a dry run with dryRun) with annotations.
func (b *bench) createNAD(ns, name, config string, annotations map[string]string, dryRun bool) error {
	obj, err := nadv1.New(ns, name, config).ToUnstructured()
	if err != nil {
		return err
	}
	obj.SetAnnotations(annotations)
	opts := metav1.CreateOptions{}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	if _, err = b.cp.Dynamic().Resource(controlplane.NADResource).Namespace(ns).Create(ctx, obj, opts); err != nil {
		return fmt.Errorf("create NAD %s: %w", name, err)
	}
	return nil
}

func (b *bench) defaultNetPath(kind string) string {
	return filepath.Join(b.netDir, netName(kind, 0)+".conflist")
}

// manifoldConfList is manifold's config as a runtime holds it: manifold as
// the only plugin of a conflist, with the kind's default network as
// clusterNetwork and binDir as given. Logging stays at its default (errors
// only, to stderr), as on a node that configures none.
func (b *bench) manifoldConfList(kind, binDir string) (*libcni.NetworkConfigList, error) {
	plugin := map[string]any{
		"type":           "manifold",
		"kubeconfig":     b.cp.KubeconfigPath,
		"clusterNetwork": b.defaultNetPath(kind),
		"cniDir":         b.cniDir,
		"confDir":        b.netDir,
		"binDir":         binDir,
		// As manifold-install writes it: the runtime passes the pod's annotations.
		"capabilities": map[string]bool{netconf.CapPodAnnotations: true},
	}
	raw, err := json.Marshal(map[string]any{"cniVersion": "1.0.0", "name": "manifold-bench", "plugins": []any{plugin}})
	if err != nil {
		return nil, err
	}
	return libcni.NetworkConfFromBytes(raw)
}

// podSpec is one pod: its object, and its delegate set and network count.
type podSpec struct {
	Kind     string
	Networks int
	Obj      *corev1.Pod
}

// createPod creates a pod that asks for networks 1..n-1 of a set.
func (b *bench) createPod(name, kind string, n int) (*podSpec, error) {
	var refs []string
	for i := 1; i < n; i++ {
		refs = append(refs, netName(kind, i))
	}
	var annotations map[string]string
	if len(refs) > 0 {
		annotations = map[string]string{"k8s.v1.cni.cncf.io/networks": strings.Join(refs, ",")}
	}
	p, err := b.createPodWith(name, kind, annotations)
	if err != nil {
		return nil, err
	}
	p.Networks = n
	return p, nil
}

// createPodWith creates a pod on the benchmark's node with annotations and
// resource claims.
func (b *bench) createPodWith(name, kind string, annotations map[string]string, claims ...corev1.PodResourceClaim) (*podSpec, error) {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Annotations: annotations},
		Spec: corev1.PodSpec{
			NodeName:       benchNode,
			ResourceClaims: claims,
			Containers:     []corev1.Container{{Name: "pause", Image: "registry.k8s.io/pause:3.10"}},
		},
	}
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	created, err := b.k8s.CoreV1().Pods(namespace).Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("create pod %s: %w", name, err)
	}
	return &podSpec{Kind: kind, Obj: created}, nil
}

// sandbox is one ADD/DEL target: a pod in a netns under a fresh container ID.
type sandbox struct {
	Pod         *podSpec
	NetNS       string
	ContainerID string
	// OlderRuntime: the runtime does not pass the pod's annotations, so
	// manifold reads the pod.
	OlderRuntime bool
}

// capabilityArgs are the capability args containerd and CRI-O pass for a pod:
// its annotations, as the kubelet gives them (none for an older runtime).
// libcni passes them only to a plugin that declares the capability.
func (s *sandbox) capabilityArgs() map[string]any {
	if s.OlderRuntime {
		return nil
	}
	return map[string]any{netconf.CapPodAnnotations: testenv.KubeletAnnotations(s.Pod.Obj.Annotations, s.Pod.Obj.CreationTimestamp.Time)}
}

func (b *bench) newSandbox(p *podSpec, netns string) *sandbox {
	id := fmt.Sprintf("bench%s%08d", b.runID, b.seq.Add(1))
	return &sandbox{Pod: p, NetNS: netns, ContainerID: id}
}

// args are the CNI_ARGS containerd sends for a pod.
func (s *sandbox) args() [][2]string {
	return [][2]string{
		{"IgnoreUnknown", "1"},
		{"K8S_POD_NAMESPACE", s.Pod.Obj.Namespace},
		{"K8S_POD_NAME", s.Pod.Obj.Name},
		{"K8S_POD_INFRA_CONTAINER_ID", s.ContainerID},
		{"K8S_POD_UID", string(s.Pod.Obj.UID)},
	}
}

func ifName(i int) string {
	if i == 0 {
		return "eth0"
	}
	return fmt.Sprintf("net%d", i)
}

// listFiles returns the regular files under dir (for the leftovers check).
func listFiles(dir string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil
			}
			return err
		}
		if !d.IsDir() {
			out = append(out, path)
		}
		return nil
	})
	return out, err
}
