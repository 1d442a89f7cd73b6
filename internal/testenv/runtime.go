package testenv

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"
)

// Runtime calls manifold the way containerd does: through libcni, with manifold's
// config as a conflist, CNI_PATH set to the node's bin dir, and the pod's
// identity in CNI_ARGS.
type Runtime struct {
	CNI    *libcni.CNIConfig
	BinDir string
}

// NewRuntime makes a runtime whose own libcni cache is a temp dir. Its exec is
// given, not left to libcni, which sets a missing one on first use and so
// races when a test runs ADD and DEL at once.
func NewRuntime(t testing.TB, binDir string) *Runtime {
	t.Helper()
	exec := &invoke.DefaultExec{RawExec: &invoke.RawExec{Stderr: os.Stderr}, PluginDecoder: version.PluginDecoder{}}
	return &Runtime{CNI: libcni.NewCNIConfigWithCacheDir([]string{binDir}, t.TempDir(), exec), BinDir: binDir}
}

// PodArgs are the CNI_ARGS containerd sends for a pod.
func PodArgs(namespace, name, uid, containerID string) [][2]string {
	return [][2]string{
		{"K8S_POD_NAMESPACE", namespace},
		{"K8S_POD_NAME", name},
		{"K8S_POD_INFRA_CONTAINER_ID", containerID},
		{"K8S_POD_UID", uid},
	}
}

// Conf parses a conflist for the runtime.
func Conf(t testing.TB, raw []byte) *libcni.NetworkConfigList {
	t.Helper()
	list, err := libcni.NetworkConfFromBytes(raw)
	if err == nil && len(list.Plugins) == 0 {
		err = errors.New("no plugins")
	}
	if err != nil {
		t.Fatalf("parse config: %v\n%s", err, raw)
	}
	return list
}

// Pod is one sandbox as the runtime sees it.
type Pod struct {
	ContainerID string
	NetNS       string
	IfName      string
	Args        [][2]string
	// CapabilityArgs are the runtime's capability args; libcni passes each to
	// a plugin only if its config declares the capability. containerd and
	// CRI-O pass the pod's annotations under netconf.CapPodAnnotations.
	CapabilityArgs map[string]any
}

func (p *Pod) rt() *libcni.RuntimeConf {
	ifName := p.IfName
	if ifName == "" {
		ifName = "eth0"
	}
	return &libcni.RuntimeConf{ContainerID: p.ContainerID, NetNS: p.NetNS, IfName: ifName, Args: p.Args, CapabilityArgs: p.CapabilityArgs}
}

// Add runs ADD.
func (r *Runtime) Add(ctx context.Context, list *libcni.NetworkConfigList, p *Pod) (types.Result, error) {
	return r.CNI.AddNetworkList(ctx, list, p.rt())
}

// Del runs DEL.
func (r *Runtime) Del(ctx context.Context, list *libcni.NetworkConfigList, p *Pod) error {
	return r.CNI.DelNetworkList(ctx, list, p.rt())
}

// Check runs CHECK.
func (r *Runtime) Check(ctx context.Context, list *libcni.NetworkConfigList, p *Pod) error {
	return r.CNI.CheckNetworkList(ctx, list, p.rt())
}

// KubeletAnnotations are the annotations the kubelet gives the runtime for a
// pod it got from the API server: the pod's own, plus the two it adds itself,
// kubernetes.io/config.source ("api") and kubernetes.io/config.seen. containerd
// and CRI-O pass them on to a plugin that declares netconf.CapPodAnnotations.
func KubeletAnnotations(pod map[string]string, seen time.Time) map[string]string {
	out := make(map[string]string, len(pod)+2)
	for k, v := range pod {
		out[k] = v
	}
	out["kubernetes.io/config.source"] = "api"
	out["kubernetes.io/config.seen"] = seen.Format(time.RFC3339Nano)
	return out
}
