// Package podresources finds the devices that the kubelet's device manager
// gave a pod (SR-IOV VFs, for instance), so that a network attachment can be
// handed the device the pod was actually allocated, and the DRA claims the
// kubelet prepared for its containers (DynamicResources).
//
// It asks the kubelet's PodResources API v1 over its unix socket: Get for the
// one pod where the kubelet has it, List otherwise. The kubelet rate-limits
// that API, so calls answered with ResourceExhausted are retried with backoff
// within a bound. When there is no socket at all (the kubelet does not serve
// the API, or runs with another root dir), the kubelet's device-manager
// checkpoint is read instead. Device IDs are returned sorted, so that every
// consumer picks the same device from a resource in the same order.
//
// The package holds no policy: whether a pod with no devices, or a device
// found only in the checkpoint, is good enough is the caller's decision, and
// the Source it is told lets it log which answer it acted on.
package podresources

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/manifold-cni/manifold/dra"
)

// DefaultSocket is where the kubelet serves the PodResources API with its
// default root dir (/var/lib/kubelet).
const DefaultSocket = "/var/lib/kubelet/pod-resources/kubelet.sock"

// DefaultTimeout bounds one gRPC call. The API answers from the kubelet's
// memory, so a call that takes longer than this is a kubelet in trouble, and a
// CNI ADD must not hang on it.
const DefaultTimeout = 2 * time.Second

// MaxMessageBytes is the largest response accepted. gRPC's default of 4 MiB is
// too small for List on a node with many pods and devices; the kubelet itself
// caps its responses at 16 MiB.
const MaxMessageBytes = 16 << 20

// Pod names the pod whose devices are wanted. Namespace and Name select it in
// the API; UID selects it in the checkpoint, which knows no names.
type Pod struct {
	Namespace, Name, UID string
}

func (p Pod) String() string {
	if p.UID == "" {
		return p.Namespace + "/" + p.Name
	}
	return p.Namespace + "/" + p.Name + " (uid " + p.UID + ")"
}

// Devices maps a resource name (e.g. "intel.com/sriov_netdevice") to the IDs
// of the devices of that resource allocated to the pod, across all of its
// containers. Each list is sorted and has no duplicates, so that two readers
// (manifold and, say, a delegate) agree on which device is the first.
type Devices map[string][]string

// Source says where an answer came from, for the caller's log line.
type Source string

const (
	// SourceGet is the API's Get, which asks about the one pod.
	SourceGet Source = "get"
	// SourceList is the API's List, used when the kubelet has no Get.
	SourceList Source = "list"
	// SourceCheckpoint is the kubelet's device-manager checkpoint file, read
	// when the API socket does not exist.
	SourceCheckpoint Source = "checkpoint"
)

// ErrRateLimited is wrapped by the error returned when the kubelet kept
// refusing calls (ResourceExhausted, or Unavailable while it restarts) for
// longer than the retry bound.
var ErrRateLimited = errors.New("kubelet pod-resources API kept refusing calls")

// Backoff is how calls refused by the kubelet are retried. The waits grow from
// Initial, doubling up to Max, each with random jitter so that the ADDs of many
// pods started together do not hit the kubelet's rate limit in step. Total
// bounds the whole retrying: no wait is started that would end past it.
type Backoff struct {
	Initial, Max, Total time.Duration
}

// DefaultBackoff fits the kubelet's default limit (100 calls a second with a
// burst of 10) with room to spare, and gives up within a few seconds so that a
// CNI ADD fails with a clear error instead of timing out in the runtime.
var DefaultBackoff = Backoff{Initial: 50 * time.Millisecond, Max: time.Second, Total: 5 * time.Second}

// Client asks the kubelet for a pod's devices. The zero value uses the
// defaults; a Client may be shared by goroutines and reused for many pods, and
// keeps its connection until Close.
type Client struct {
	// Socket is the PodResources API's unix socket; DefaultSocket if empty.
	Socket string
	// Checkpoint is the device manager's checkpoint file, read when Socket
	// does not exist; DefaultCheckpoint if empty.
	Checkpoint string
	// Timeout bounds each gRPC call; DefaultTimeout if zero.
	Timeout time.Duration
	// Retry bounds the retrying of refused calls; its unset fields are
	// DefaultBackoff's.
	Retry Backoff

	mu   sync.Mutex
	conn *grpc.ClientConn
	// noGet is set once the kubelet has said it has no Get (older than 1.27,
	// or its KubeletPodResourcesGet gate is off), so later calls go to List
	// straight away.
	noGet atomic.Bool
}

// Resources is what the kubelet allocated to a pod: its device-plugin
// devices, and the DRA claims it prepared for the pod's containers.
type Resources struct {
	Devices Devices
	// Claims are the claims that a container of the pod names in its
	// resources.claims (the API reports no others), in the kubelet's order,
	// each once; nil from the checkpoint, which holds no claims.
	Claims []dra.KubeletClaim
}

// Devices returns the device-plugin devices allocated to pod and where the
// answer came from (Resources, without the claims).
func (c *Client) Devices(ctx context.Context, pod Pod) (Devices, Source, error) {
	r, src, err := c.Resources(ctx, pod)
	return r.Devices, src, err
}

// Resources returns the devices and DRA claims allocated to pod and where
// the answer came from. A pod that the kubelet does not know, or that has no
// devices, gets an empty (non-nil) Devices and no error: most pods ask for no
// devices, and the caller that needs one names the missing resource better
// than this package can. Errors name the socket or file and the pod.
func (c *Client) Resources(ctx context.Context, pod Pod) (Resources, Source, error) {
	sock := c.socket()
	if _, err := os.Stat(sock); errors.Is(err, os.ErrNotExist) {
		devs, err := ReadCheckpoint(c.checkpoint(), pod.UID)
		if err != nil {
			return Resources{}, SourceCheckpoint, fmt.Errorf("get devices of pod %s: no kubelet socket %s, and: %w", pod, sock, err)
		}
		return Resources{Devices: devs}, SourceCheckpoint, nil
	}
	cl, err := c.client()
	if err != nil {
		return Resources{}, "", fmt.Errorf("get devices of pod %s: connect to %s: %w", pod, sock, err)
	}
	if !c.noGet.Load() {
		res, err := c.get(ctx, cl, pod)
		if err == nil {
			return res, SourceGet, nil
		}
		if ctx.Err() != nil || !getFallsBack(err) {
			return Resources{}, SourceGet, fmt.Errorf("get devices of pod %s from %s: %w", pod, sock, err)
		}
		// The kubelet either has no Get or answers it with a plain error
		// (codes.Unknown), which it does both when the feature gate is off and
		// when it does not know the pod. List tells the two apart.
		if status.Code(err) == codes.Unimplemented || strings.Contains(status.Convert(err).Message(), "disabled") {
			c.noGet.Store(true)
		}
	}
	res, err := c.list(ctx, cl, pod)
	if err != nil {
		return Resources{}, SourceList, fmt.Errorf("list devices for pod %s from %s: %w", pod, sock, err)
	}
	return res, SourceList, nil
}

// Close releases the connection to the kubelet, if one was made.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn == nil {
		return nil
	}
	err := c.conn.Close()
	c.conn = nil
	return err
}

func (c *Client) get(ctx context.Context, cl podresourcesv1.PodResourcesListerClient, pod Pod) (Resources, error) {
	req := &podresourcesv1.GetPodResourcesRequest{PodName: pod.Name, PodNamespace: pod.Namespace}
	var resp *podresourcesv1.GetPodResourcesResponse
	err := c.retry(ctx, "Get", func(ctx context.Context) error {
		var err error
		resp, err = cl.Get(ctx, req)
		return err
	})
	if err != nil {
		return Resources{}, err
	}
	res := Resources{Devices: Devices{}}
	if pr := resp.GetPodResources(); pr != nil {
		res.addContainers(pr.GetContainers())
	}
	res.Devices.normalise()
	return res, nil
}

func (c *Client) list(ctx context.Context, cl podresourcesv1.PodResourcesListerClient, pod Pod) (Resources, error) {
	var resp *podresourcesv1.ListPodResourcesResponse
	err := c.retry(ctx, "List", func(ctx context.Context) error {
		var err error
		resp, err = cl.List(ctx, &podresourcesv1.ListPodResourcesRequest{})
		return err
	})
	if err != nil {
		return Resources{}, err
	}
	res := Resources{Devices: Devices{}}
	for _, pr := range resp.GetPodResources() {
		// The API carries no UID, so a pod deleted and created again under
		// the same name cannot be told from its predecessor here; the kubelet
		// lists only the pods it currently has, which makes that a short race.
		if pr.GetNamespace() == pod.Namespace && pr.GetName() == pod.Name {
			res.addContainers(pr.GetContainers())
		}
	}
	res.Devices.normalise()
	return res, nil
}

// getFallsBack reports whether a failed Get should be followed by List: only
// when the kubelet itself answered so. NotFound is included for a kubelet that
// one day answers an unknown pod with the proper code. (status.Code alone would
// not do: it calls any error that is not the kubelet's, such as a cancelled
// context, Unknown.)
func getFallsBack(err error) bool {
	s, ok := status.FromError(err)
	if !ok {
		return false
	}
	switch s.Code() {
	case codes.Unimplemented, codes.Unknown, codes.NotFound:
		return true
	}
	return false
}

// addContainers merges the devices and claims of every container. The
// kubelet lists restartable init containers (sidecars) among the containers
// where it reports them at all; other init containers hold no devices once
// the pod's sandbox exists, so there is nothing more to ask for.
func (r *Resources) addContainers(containers []*podresourcesv1.ContainerResources) {
	for _, ctr := range containers {
		for _, cd := range ctr.GetDevices() {
			name := cd.GetResourceName()
			if name == "" {
				continue
			}
			r.Devices[name] = append(r.Devices[name], cd.GetDeviceIds()...)
		}
		for _, dr := range ctr.GetDynamicResources() {
			r.addClaim(dr)
		}
	}
}

// addClaim adds a claim that a container names, once however many name it.
//
// The kubelet of 1.36 reports the CDI devices of a driver's devices
// cumulatively: each device's list also holds those of the driver's
// devices before it (GetDynamicResources in
// pkg/kubelet/cm/container_manager_linux.go keeps one list per driver). A
// device is given only the names no earlier device of its driver had, so
// that the answer is right with that kubelet and with one that is fixed.
func (r *Resources) addClaim(dr *podresourcesv1.DynamicResource) {
	for _, c := range r.Claims {
		if c.Namespace == dr.GetClaimNamespace() && c.Name == dr.GetClaimName() {
			return
		}
	}
	claim := dra.KubeletClaim{Namespace: dr.GetClaimNamespace(), Name: dr.GetClaimName()}
	seen := map[string]map[string]bool{} // driver -> CDI names of its devices so far
	for _, cr := range dr.GetClaimResources() {
		drv := cr.GetDriverName()
		if seen[drv] == nil {
			seen[drv] = map[string]bool{}
		}
		d := dra.KubeletDevice{Driver: drv, Pool: cr.GetPoolName(), Device: cr.GetDeviceName(), ShareID: cr.GetShareId()}
		for _, cdi := range cr.GetCdiDevices() {
			if n := cdi.GetName(); n != "" && !seen[drv][n] {
				d.CDIDevices = append(d.CDIDevices, n)
			}
		}
		for _, n := range d.CDIDevices {
			seen[drv][n] = true
		}
		claim.Devices = append(claim.Devices, d)
	}
	r.Claims = append(r.Claims, claim)
}

// normalise sorts each resource's IDs and drops duplicates and empty IDs.
// The kubelet reports one entry per NUMA node, in map order, so its order
// means nothing; a device shared by two containers would appear twice.
func (d Devices) normalise() {
	for name, ids := range d {
		sort.Strings(ids)
		out := ids[:0]
		for i, id := range ids {
			if id == "" || (i > 0 && id == ids[i-1]) {
				continue
			}
			out = append(out, id)
		}
		if len(out) == 0 {
			delete(d, name)
			continue
		}
		d[name] = out
	}
}

func (c *Client) client() (podresourcesv1.PodResourcesListerClient, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn == nil {
		sock := c.socket()
		// The passthrough target and a dialer of our own keep gRPC's name
		// resolution out of it: the socket path is used exactly as given,
		// relative or not.
		conn, err := grpc.NewClient("passthrough:///kubelet",
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "unix", sock)
			}),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxMessageBytes)),
		)
		if err != nil {
			return nil, err
		}
		c.conn = conn
	}
	return podresourcesv1.NewPodResourcesListerClient(c.conn), nil
}

func (c *Client) socket() string {
	if c.Socket == "" {
		return DefaultSocket
	}
	return c.Socket
}

func (c *Client) checkpoint() string {
	if c.Checkpoint == "" {
		return DefaultCheckpoint
	}
	return c.Checkpoint
}

func (c *Client) timeout() time.Duration {
	if c.Timeout <= 0 {
		return DefaultTimeout
	}
	return c.Timeout
}

// backoff fills each unset field from DefaultBackoff on its own: a Backoff
// with only Total set must not retry with no wait at all.
func (c *Client) backoff() Backoff {
	b := c.Retry
	if b.Initial <= 0 {
		b.Initial = DefaultBackoff.Initial
	}
	if b.Max <= 0 {
		b.Max = max(DefaultBackoff.Max, b.Initial)
	}
	if b.Total <= 0 {
		b.Total = DefaultBackoff.Total
	}
	return b
}
