// Package podresourcestest is a fake kubelet for tests: it serves the real
// PodResources API v1 (k8s.io/kubelet/pkg/apis/podresources/v1) over gRPC on
// a unix socket in a temp dir, with the pods and devices a test gives it, and
// can behave like the kubelets found in the field: rate-limited, without Get,
// or with Get switched off. It also writes the kubelet's device checkpoint
// file in both of its historical shapes.
//
// Unit tests of package podresources use it, and so can privileged and e2e
// tests that need a pod to "have" an SR-IOV device on a machine without one.
package podresourcestest

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// Device is one device allocated to a container. NUMA is the node it is
// affine to; the kubelet reports one ContainerDevices per resource and NUMA
// node, so devices of one resource on two nodes arrive as two entries.
type Device struct {
	Resource string
	ID       string
	NUMA     int64
}

// Container is one container of a pod and its devices, served in the order
// given here: give them unsorted to check that a client sorts. Claims are the
// DRA claims it names in its resources.claims (DynamicResources).
type Container struct {
	Name    string
	Devices []Device
	Claims  []Claim
}

// Claim is a DRA claim as the kubelet prepared it.
type Claim struct {
	Namespace, Name string
	Devices         []ClaimDevice
}

// ClaimDevice is one prepared device of a Claim, with the CDI names its
// driver returned for it.
type ClaimDevice struct {
	Driver, Pool, Device, ShareID string
	CDI                           []string
}

// Pod is a pod the fake kubelet knows. UID is not served by the API (it has
// no such field) but is written to checkpoints.
type Pod struct {
	Namespace, Name, UID string
	Containers           []Container
}

// Method names, as counted by Calls.
const (
	MethodGet         = "Get"
	MethodList        = "List"
	MethodAllocatable = "GetAllocatableResources"
)

// Kubelet is the fake. Its setters may be called while it serves.
type Kubelet struct {
	podresourcesv1.UnimplementedPodResourcesListerServer

	// Socket is the unix socket it serves on, in a temp dir of its own.
	Socket string

	srv      *grpc.Server
	stopOnce sync.Once
	done     chan struct{}

	mu            sync.Mutex
	pods          []Pod
	exhaust       int
	getUnimpl     bool
	getDisabled   bool
	fixedCDI      bool
	calls         map[string]int
	rejectedCalls int
}

// Start serves a fake kubelet with the given pods until the test ends (or
// Stop). The socket lives in a fresh short temp dir, because a unix socket
// path must fit in 108 bytes and t.TempDir's paths grow with the test's name.
func Start(tb testing.TB, pods ...Pod) *Kubelet {
	tb.Helper()
	dir, err := os.MkdirTemp("", "kubelet")
	if err != nil {
		tb.Fatalf("fake kubelet: %v", err)
	}
	tb.Cleanup(func() { os.RemoveAll(dir) })
	k, err := Serve(filepath.Join(dir, "kubelet.sock"), pods...)
	if err != nil {
		tb.Fatalf("fake kubelet: %v", err)
	}
	tb.Cleanup(k.Stop)
	return k
}

// Serve is Start for programs (the benchmark), which have no testing.TB: it
// serves on socket until Stop, and the caller removes the socket's directory.
func Serve(socket string, pods ...Pod) (*Kubelet, error) {
	k := &Kubelet{
		Socket: socket,
		calls:  map[string]int{},
		done:   make(chan struct{}),
	}
	k.SetPods(pods...)
	lis, err := net.Listen("unix", k.Socket)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", k.Socket, err)
	}
	k.srv = grpc.NewServer(grpc.UnaryInterceptor(k.intercept))
	podresourcesv1.RegisterPodResourcesListerServer(k.srv, k)
	go func() {
		defer close(k.done)
		_ = k.srv.Serve(lis)
	}()
	return k, nil
}

// Stop stops serving and removes the socket, as a kubelet that went away
// does. It waits for the server to end, and is safe to call more than once.
func (k *Kubelet) Stop() {
	k.stopOnce.Do(func() {
		k.srv.Stop()
		<-k.done
		os.Remove(k.Socket)
	})
}

// SetPods replaces the pods the kubelet knows.
func (k *Kubelet) SetPods(pods ...Pod) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.pods = append([]Pod(nil), pods...)
}

// ExhaustFirst makes the next n calls (of any method) fail with
// ResourceExhausted, as the kubelet's rate limiter answers.
func (k *Kubelet) ExhaustFirst(n int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.exhaust = n
}

// SetGetUnimplemented makes Get answer Unimplemented, like a kubelet older
// than 1.27, which has no Get at all.
func (k *Kubelet) SetGetUnimplemented(on bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.getUnimpl = on
}

// SetGetDisabled makes Get fail the way a 1.27 to 1.33 kubelet does when its
// KubeletPodResourcesGet feature gate is off: a plain error, which reaches the
// client as codes.Unknown.
func (k *Kubelet) SetGetDisabled(on bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.getDisabled = on
}

// SetFixedCDI makes the kubelet report each DRA device's own CDI names.
// By default it reports them as the 1.36 kubelet does: each device of a
// driver also carries the names of the driver's devices before it in the
// claim (GetDynamicResources in pkg/kubelet/cm/container_manager_linux.go).
func (k *Kubelet) SetFixedCDI(on bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.fixedCDI = on
}

// Calls reports how many calls of method (MethodGet, …) arrived, including
// those refused.
func (k *Kubelet) Calls(method string) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.calls[method]
}

// Rejected reports how many calls were refused with ResourceExhausted.
func (k *Kubelet) Rejected() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.rejectedCalls
}

// intercept counts every call and plays the rate limiter, which in the
// kubelet also sits in front of every method.
func (k *Kubelet) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	k.mu.Lock()
	k.calls[filepath.Base(info.FullMethod)]++
	if k.exhaust > 0 {
		k.exhaust--
		k.rejectedCalls++
		k.mu.Unlock()
		return nil, status.Error(codes.ResourceExhausted, "rejected by rate limit")
	}
	k.mu.Unlock()
	return handler(ctx, req)
}

// Get answers for one pod, as a 1.34 kubelet does, including its plain error
// for a pod it does not know.
func (k *Kubelet) Get(_ context.Context, req *podresourcesv1.GetPodResourcesRequest) (*podresourcesv1.GetPodResourcesResponse, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	switch {
	case k.getUnimpl:
		return nil, status.Error(codes.Unimplemented, "method Get not implemented")
	case k.getDisabled:
		return nil, status.Error(codes.Unknown, "PodResources API Get method disabled")
	}
	for _, p := range k.pods {
		if p.Namespace == req.GetPodNamespace() && p.Name == req.GetPodName() {
			return &podresourcesv1.GetPodResourcesResponse{PodResources: k.toAPI(p)}, nil
		}
	}
	return nil, status.Errorf(codes.Unknown, "pod %s in namespace %s not found", req.GetPodName(), req.GetPodNamespace())
}

// List answers with every pod.
func (k *Kubelet) List(context.Context, *podresourcesv1.ListPodResourcesRequest) (*podresourcesv1.ListPodResourcesResponse, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	resp := &podresourcesv1.ListPodResourcesResponse{}
	for _, p := range k.pods {
		resp.PodResources = append(resp.PodResources, k.toAPI(p))
	}
	return resp, nil
}

// GetAllocatableResources answers with every device of every pod, which is
// what a node whose devices are all in use would report.
func (k *Kubelet) GetAllocatableResources(context.Context, *podresourcesv1.AllocatableResourcesRequest) (*podresourcesv1.AllocatableResourcesResponse, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	var all []Device
	for _, p := range k.pods {
		for _, c := range p.Containers {
			all = append(all, c.Devices...)
		}
	}
	return &podresourcesv1.AllocatableResourcesResponse{Devices: group(all)}, nil
}

func (k *Kubelet) toAPI(p Pod) *podresourcesv1.PodResources {
	pr := &podresourcesv1.PodResources{Name: p.Name, Namespace: p.Namespace}
	for _, c := range p.Containers {
		cr := &podresourcesv1.ContainerResources{Name: c.Name, Devices: group(c.Devices)}
		for _, cl := range c.Claims {
			cr.DynamicResources = append(cr.DynamicResources, k.dynamicResource(cl))
		}
		pr.Containers = append(pr.Containers, cr)
	}
	return pr
}

// dynamicResource is a claim as the kubelet reports it, with its CDI names
// cumulative per driver unless SetFixedCDI.
func (k *Kubelet) dynamicResource(cl Claim) *podresourcesv1.DynamicResource {
	dr := &podresourcesv1.DynamicResource{ClaimName: cl.Name, ClaimNamespace: cl.Namespace}
	sofar := map[string][]*podresourcesv1.CDIDevice{}
	for _, d := range cl.Devices {
		var cdi []*podresourcesv1.CDIDevice
		if !k.fixedCDI {
			cdi = sofar[d.Driver]
		}
		for _, n := range d.CDI {
			cdi = append(cdi, &podresourcesv1.CDIDevice{Name: n})
		}
		sofar[d.Driver] = cdi
		res := &podresourcesv1.ClaimResource{CdiDevices: cdi, DriverName: d.Driver, PoolName: d.Pool, DeviceName: d.Device}
		if d.ShareID != "" {
			id := d.ShareID
			res.ShareId = &id
		}
		dr.ClaimResources = append(dr.ClaimResources, res)
	}
	return dr
}

// group makes one ContainerDevices per resource and NUMA node, keeping the
// devices' order inside each; the groups come in the order of their first
// device.
func group(devs []Device) []*podresourcesv1.ContainerDevices {
	type key struct {
		resource string
		numa     int64
	}
	index := map[key]*podresourcesv1.ContainerDevices{}
	var out []*podresourcesv1.ContainerDevices
	for _, d := range devs {
		kk := key{d.Resource, d.NUMA}
		cd := index[kk]
		if cd == nil {
			cd = &podresourcesv1.ContainerDevices{
				ResourceName: d.Resource,
				Topology:     &podresourcesv1.TopologyInfo{Nodes: []*podresourcesv1.NUMANode{{ID: d.NUMA}}},
			}
			index[kk] = cd
			out = append(out, cd)
		}
		cd.DeviceIds = append(cd.DeviceIds, d.ID)
	}
	return out
}

// numaNodes returns the NUMA nodes of devs, sorted, for the checkpoint.
func numaNodes(devs []Device) []int64 {
	seen := map[int64]bool{}
	var out []int64
	for _, d := range devs {
		if !seen[d.NUMA] {
			seen[d.NUMA] = true
			out = append(out, d.NUMA)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}
