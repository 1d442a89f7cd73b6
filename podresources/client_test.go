package podresources_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/manifold-cni/manifold/dra"
	"github.com/manifold-cni/manifold/podresources"
	prt "github.com/manifold-cni/manifold/podresources/podresourcestest"
)

const (
	sriov = "intel.com/sriov_netdevice"
	rdma  = "nvidia.com/mlnx_rdma"
)

// podA has two resources over three containers (one a sidecar), devices on
// two NUMA nodes, IDs served unsorted, and one device listed by two
// containers.
var podA = prt.Pod{Namespace: "ns1", Name: "a", UID: "uid-a", Containers: []prt.Container{
	{Name: "main", Devices: []prt.Device{
		{Resource: sriov, ID: "0000:af:06.3", NUMA: 1},
		{Resource: sriov, ID: "0000:3b:02.1", NUMA: 0},
		{Resource: rdma, ID: "0000:d8:00.7", NUMA: 1},
		{Resource: sriov, ID: "0000:af:06.0", NUMA: 1},
	}},
	{Name: "sidecar", Devices: []prt.Device{
		{Resource: sriov, ID: "0000:3b:02.0", NUMA: 0},
		{Resource: rdma, ID: "0000:d8:00.2", NUMA: 1},
	}},
	{Name: "shared", Devices: []prt.Device{
		{Resource: rdma, ID: "0000:d8:00.7", NUMA: 1},
	}},
}}

var wantA = podresources.Devices{
	sriov: {"0000:3b:02.0", "0000:3b:02.1", "0000:af:06.0", "0000:af:06.3"},
	rdma:  {"0000:d8:00.2", "0000:d8:00.7"},
}

// Pods that must not leak into podA's answer: the same name in another
// namespace, and another pod in the same one.
var others = []prt.Pod{
	{Namespace: "ns2", Name: "a", UID: "uid-a2", Containers: []prt.Container{
		{Name: "c", Devices: []prt.Device{{Resource: sriov, ID: "0000:af:07.0"}}},
	}},
	{Namespace: "ns1", Name: "b", UID: "uid-b", Containers: []prt.Container{
		{Name: "c", Devices: []prt.Device{{Resource: sriov, ID: "0000:af:07.1"}, {Resource: "example.com/other", ID: "x"}}},
	}},
}

func pod(p prt.Pod) podresources.Pod {
	return podresources.Pod{Namespace: p.Namespace, Name: p.Name, UID: p.UID}
}

// fastRetry keeps retrying tests quick while still allowing many attempts.
var fastRetry = podresources.Backoff{Initial: time.Millisecond, Max: 5 * time.Millisecond, Total: 30 * time.Second}

func newClient(t *testing.T, socket string) *podresources.Client {
	c := &podresources.Client{Socket: socket, Checkpoint: filepath.Join(t.TempDir(), "absent"), Retry: fastRetry}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestDevicesFromGet(t *testing.T) {
	k := prt.Start(t, append([]prt.Pod{podA}, others...)...)
	c := newClient(t, k.Socket)
	devs, src, err := c.Devices(context.Background(), pod(podA))
	if err != nil {
		t.Fatal(err)
	}
	if src != podresources.SourceGet {
		t.Errorf("source %q, want %q", src, podresources.SourceGet)
	}
	if !reflect.DeepEqual(devs, wantA) {
		t.Errorf("devices\n got %v\nwant %v", devs, wantA)
	}
	if g, l := k.Calls(prt.MethodGet), k.Calls(prt.MethodList); g != 1 || l != 0 {
		t.Errorf("calls: Get %d, List %d; want 1 and 0", g, l)
	}
}

func TestGetUnimplementedFallsBackToList(t *testing.T) {
	k := prt.Start(t, append(others, podA)...)
	k.SetGetUnimplemented(true)
	c := newClient(t, k.Socket)
	for i := range 2 {
		devs, src, err := c.Devices(context.Background(), pod(podA))
		if err != nil {
			t.Fatal(err)
		}
		if src != podresources.SourceList {
			t.Errorf("call %d: source %q, want %q", i, src, podresources.SourceList)
		}
		if !reflect.DeepEqual(devs, wantA) {
			t.Errorf("call %d: devices\n got %v\nwant %v", i, devs, wantA)
		}
	}
	// The client remembers that there is no Get.
	if g, l := k.Calls(prt.MethodGet), k.Calls(prt.MethodList); g != 1 || l != 2 {
		t.Errorf("calls: Get %d, List %d; want 1 and 2", g, l)
	}
}

func TestGetDisabledFallsBackToList(t *testing.T) {
	k := prt.Start(t, podA)
	k.SetGetDisabled(true)
	c := newClient(t, k.Socket)
	devs, src, err := c.Devices(context.Background(), pod(podA))
	if err != nil {
		t.Fatal(err)
	}
	if src != podresources.SourceList || !reflect.DeepEqual(devs, wantA) {
		t.Errorf("got %v from %q, want %v from list", devs, src, wantA)
	}
}

// A pod the kubelet does not know has no devices, and that is not an error:
// the caller that needs a device names the missing resource.
func TestPodNotFoundIsEmpty(t *testing.T) {
	k := prt.Start(t, others...)
	c := newClient(t, k.Socket)
	devs, src, err := c.Devices(context.Background(), pod(podA))
	if err != nil {
		t.Fatal(err)
	}
	if devs == nil || len(devs) != 0 {
		t.Errorf("devices %#v, want empty and non-nil", devs)
	}
	// Get's plain "not found" error is checked with List.
	if src != podresources.SourceList || k.Calls(prt.MethodList) != 1 {
		t.Errorf("source %q after %d List calls; want list after 1", src, k.Calls(prt.MethodList))
	}
}

func TestRateLimitedIsRetried(t *testing.T) {
	k := prt.Start(t, podA)
	k.ExhaustFirst(4)
	c := newClient(t, k.Socket)
	devs, src, err := c.Devices(context.Background(), pod(podA))
	if err != nil {
		t.Fatal(err)
	}
	if src != podresources.SourceGet || !reflect.DeepEqual(devs, wantA) {
		t.Errorf("got %v from %q, want %v from get", devs, src, wantA)
	}
	if r, g := k.Rejected(), k.Calls(prt.MethodGet); r != 4 || g != 5 {
		t.Errorf("%d rejected of %d Get calls, want 4 of 5", r, g)
	}
}

func TestRateLimitedPastBound(t *testing.T) {
	k := prt.Start(t, podA)
	k.ExhaustFirst(1 << 30)
	c := newClient(t, k.Socket)
	c.Retry = podresources.Backoff{Initial: time.Millisecond, Max: 4 * time.Millisecond, Total: time.Second}
	_, _, err := c.Devices(context.Background(), pod(podA))
	if !errors.Is(err, podresources.ErrRateLimited) {
		t.Fatalf("error %v, want ErrRateLimited", err)
	}
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "rejected by rate limit") {
		t.Errorf("error %q does not carry the kubelet's answer", err)
	}
	for _, want := range []string{k.Socket, "ns1/a", "attempts"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	if k.Calls(prt.MethodGet) < 2 {
		t.Errorf("%d Get calls, want retries", k.Calls(prt.MethodGet))
	}
	if k.Calls(prt.MethodList) != 0 {
		t.Errorf("rate-limited Get fell back to List")
	}
}

func TestCancelledContextStopsRetrying(t *testing.T) {
	k := prt.Start(t, podA)
	k.ExhaustFirst(1 << 30)
	c := newClient(t, k.Socket)
	c.Retry = podresources.Backoff{Initial: time.Hour, Max: time.Hour, Total: 10 * time.Hour}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for k.Calls(prt.MethodGet) == 0 {
			time.Sleep(time.Millisecond)
		}
		cancel()
	}()
	_, _, err := c.Devices(ctx, pod(podA))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v, want context.Canceled", err)
	}
}

// A socket file with no kubelet behind it (a kubelet restarting) is retried
// within the bound, then fails naming the socket; the checkpoint is not used.
func TestStaleSocketIsRetriedThenFails(t *testing.T) {
	dir, err := os.MkdirTemp("", "kubelet")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "kubelet.sock")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	l.Close()
	c := newClient(t, sock)
	c.Retry = podresources.Backoff{Initial: time.Millisecond, Max: 4 * time.Millisecond, Total: 100 * time.Millisecond}
	_, src, err := c.Devices(context.Background(), pod(podA))
	if !errors.Is(err, podresources.ErrRateLimited) || !strings.Contains(err.Error(), sock) {
		t.Fatalf("error %v, want ErrRateLimited naming %s", err, sock)
	}
	if src == podresources.SourceCheckpoint {
		t.Errorf("source %q", src)
	}
}

// A kubelet that accepts the connection and never answers costs one call's
// timeout, not a hung ADD.
func TestSilentKubeletTimesOut(t *testing.T) {
	dir, err := os.MkdirTemp("", "kubelet")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "kubelet.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	held := make(chan net.Conn, 16)
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			held <- conn
		}
	}()
	t.Cleanup(func() {
		l.Close()
		for len(held) > 0 {
			(<-held).Close()
		}
	})
	c := newClient(t, sock)
	c.Timeout = 100 * time.Millisecond
	done := make(chan error, 1)
	go func() {
		_, _, err := c.Devices(context.Background(), pod(podA))
		done <- err
	}()
	select {
	case err := <-done:
		if status.Code(err) != codes.DeadlineExceeded || !strings.Contains(err.Error(), sock) {
			t.Errorf("error %v, want DeadlineExceeded naming %s", err, sock)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("Devices hung on a silent kubelet")
	}
}

func TestStoppedKubeletFallsBackToCheckpoint(t *testing.T) {
	k := prt.Start(t, podA)
	k.Stop()
	c := newClient(t, k.Socket)
	prt.WriteCheckpoint(t, c.Checkpoint, prt.CheckpointNUMA, podA)
	devs, src, err := c.Devices(context.Background(), pod(podA))
	if err != nil {
		t.Fatal(err)
	}
	if src != podresources.SourceCheckpoint || !reflect.DeepEqual(devs, wantA) {
		t.Errorf("got %v from %q, want %v from checkpoint", devs, src, wantA)
	}
}

// A Backoff with only Total set still waits between attempts (the unset
// fields come from DefaultBackoff) instead of hammering a rate-limited kubelet.
func TestPartialBackoffStillWaits(t *testing.T) {
	k := prt.Start(t, podA)
	k.ExhaustFirst(1 << 30)
	c := newClient(t, k.Socket)
	c.Retry = podresources.Backoff{Total: 200 * time.Millisecond}
	if _, _, err := c.Devices(context.Background(), pod(podA)); !errors.Is(err, podresources.ErrRateLimited) {
		t.Fatalf("error %v, want ErrRateLimited", err)
	}
	// Waits of at least 25 ms, doubling, fit at most 4 times into 200 ms.
	if n := k.Calls(prt.MethodGet); n > 9 {
		t.Errorf("%d Get calls in 200 ms of retrying, want at most 9", n)
	}
}

// TestResourcesClaims: the DRA claims of a pod's containers come back once
// each, however many containers name them, with each device's own CDI names
// whether the kubelet reports them cumulatively per driver (1.36) or not,
// from Get and from List alike; another pod's claims stay out.
func TestResourcesClaims(t *testing.T) {
	nics := prt.Claim{Namespace: "ns1", Name: "a-nics-5x2k", Devices: []prt.ClaimDevice{
		{Driver: "nic.example.com", Pool: "node1", Device: "nic-3", CDI: []string{"example.com/nic=3"}},
		{Driver: "gpu.example.com", Pool: "node1", Device: "gpu-0", CDI: []string{"example.com/gpu=0"}},
		{Driver: "nic.example.com", Pool: "node1", Device: "nic-1", CDI: []string{"example.com/nic=1", "example.com/nic-rdma=1"}},
		{Driver: "nic.example.com", Pool: "node1", Device: "nic-2"},
	}}
	mine := prt.Pod{Namespace: "ns1", Name: "a", Containers: []prt.Container{
		{Name: "main", Claims: []prt.Claim{nics}},
		{Name: "sidecar", Claims: []prt.Claim{nics}},
	}}
	other := prt.Pod{Namespace: "ns1", Name: "b", Containers: []prt.Container{
		{Name: "c", Claims: []prt.Claim{{Namespace: "ns1", Name: "b-nic", Devices: []prt.ClaimDevice{{Driver: "nic.example.com", Pool: "node1", Device: "nic-9"}}}}},
	}}
	want := []dra.KubeletClaim{{Namespace: "ns1", Name: "a-nics-5x2k", Devices: []dra.KubeletDevice{
		{Driver: "nic.example.com", Pool: "node1", Device: "nic-3", CDIDevices: []string{"example.com/nic=3"}},
		{Driver: "gpu.example.com", Pool: "node1", Device: "gpu-0", CDIDevices: []string{"example.com/gpu=0"}},
		{Driver: "nic.example.com", Pool: "node1", Device: "nic-1", CDIDevices: []string{"example.com/nic=1", "example.com/nic-rdma=1"}},
		{Driver: "nic.example.com", Pool: "node1", Device: "nic-2"},
	}}}
	for _, tc := range []struct {
		name       string
		fixedCDI   bool
		get        bool
		wantSource podresources.Source
	}{
		{name: "1.36 kubelet, Get", get: true, wantSource: podresources.SourceGet},
		{name: "fixed kubelet, Get", fixedCDI: true, get: true, wantSource: podresources.SourceGet},
		{name: "1.36 kubelet, List", wantSource: podresources.SourceList},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := prt.Start(t, mine, other)
			k.SetFixedCDI(tc.fixedCDI)
			k.SetGetUnimplemented(!tc.get)
			res, src, err := newClient(t, k.Socket).Resources(context.Background(), pod(mine))
			if err != nil {
				t.Fatal(err)
			}
			if src != tc.wantSource {
				t.Errorf("source %s, want %s", src, tc.wantSource)
			}
			if !reflect.DeepEqual(res.Claims, want) {
				t.Errorf("claims\n%+v\nwant\n%+v", res.Claims, want)
			}
			if len(res.Devices) != 0 {
				t.Errorf("device-plugin devices %v, want none", res.Devices)
			}
		})
	}
}
