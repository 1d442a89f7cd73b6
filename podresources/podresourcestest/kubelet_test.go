package podresourcestest

import (
	"context"
	"net"
	"os"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

func dial(t *testing.T, sock string) podresourcesv1.PodResourcesListerClient {
	conn, err := grpc.NewClient("passthrough:///kubelet",
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return podresourcesv1.NewPodResourcesListerClient(conn)
}

// The fake groups devices per resource and NUMA node like the kubelet, keeps
// the given order, counts calls and plays the rate limiter.
func TestFakeKubelet(t *testing.T) {
	k := Start(t, Pod{Namespace: "ns", Name: "p", Containers: []Container{{Name: "c", Devices: []Device{
		{Resource: "r", ID: "b", NUMA: 1}, {Resource: "r", ID: "a", NUMA: 0}, {Resource: "r", ID: "c", NUMA: 1},
	}}}})
	cl := dial(t, k.Socket)
	ctx := context.Background()

	k.ExhaustFirst(1)
	if _, err := cl.List(ctx, &podresourcesv1.ListPodResourcesRequest{}); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("first List: %v, want ResourceExhausted", err)
	}
	resp, err := cl.Get(ctx, &podresourcesv1.GetPodResourcesRequest{PodNamespace: "ns", PodName: "p"})
	if err != nil {
		t.Fatal(err)
	}
	devs := resp.GetPodResources().GetContainers()[0].GetDevices()
	if len(devs) != 2 || len(devs[0].GetDeviceIds()) != 2 || devs[0].GetDeviceIds()[0] != "b" || devs[0].GetTopology().GetNodes()[0].GetID() != 1 {
		t.Errorf("devices %v, want [b c] on node 1 then [a] on node 0", devs)
	}
	if _, err := cl.Get(ctx, &podresourcesv1.GetPodResourcesRequest{PodNamespace: "ns", PodName: "x"}); status.Code(err) != codes.Unknown {
		t.Errorf("Get of an unknown pod: %v, want Unknown", err)
	}
	k.SetGetUnimplemented(true)
	if _, err := cl.Get(ctx, &podresourcesv1.GetPodResourcesRequest{PodNamespace: "ns", PodName: "p"}); status.Code(err) != codes.Unimplemented {
		t.Errorf("Get: %v, want Unimplemented", err)
	}
	alloc, err := cl.GetAllocatableResources(ctx, &podresourcesv1.AllocatableResourcesRequest{})
	if err != nil || len(alloc.GetDevices()) != 2 {
		t.Errorf("GetAllocatableResources: %v, %v", alloc, err)
	}
	if g, l, a, r := k.Calls(MethodGet), k.Calls(MethodList), k.Calls(MethodAllocatable), k.Rejected(); g != 3 || l != 1 || a != 1 || r != 1 {
		t.Errorf("calls: Get %d, List %d, Allocatable %d, rejected %d; want 3, 1, 1, 1", g, l, a, r)
	}

	k.Stop()
	k.Stop()
	if _, err := os.Stat(k.Socket); !os.IsNotExist(err) {
		t.Errorf("socket still there after Stop: %v", err)
	}
}

// DRA claims are served per container as DynamicResources, with the CDI
// names of a driver's devices cumulative as the 1.36 kubelet reports them,
// or each device's own after SetFixedCDI.
func TestFakeKubeletDynamicResources(t *testing.T) {
	claim := Claim{Namespace: "ns", Name: "p-nic-x7", Devices: []ClaimDevice{
		{Driver: "nic.example.com", Pool: "node1", Device: "nic-0", CDI: []string{"example.com/nic=0"}},
		{Driver: "nic.example.com", Pool: "node1", Device: "nic-1", CDI: []string{"example.com/nic=1"}, ShareID: "1b4e28ba-2fa1-11d2-883f-0016d3cca427"},
	}}
	k := Start(t, Pod{Namespace: "ns", Name: "p", Containers: []Container{{Name: "c", Claims: []Claim{claim}}}})
	cl := dial(t, k.Socket)
	cdiOf := func() [][]string {
		t.Helper()
		resp, err := cl.Get(context.Background(), &podresourcesv1.GetPodResourcesRequest{PodNamespace: "ns", PodName: "p"})
		if err != nil {
			t.Fatal(err)
		}
		drs := resp.GetPodResources().GetContainers()[0].GetDynamicResources()
		if len(drs) != 1 || drs[0].GetClaimName() != "p-nic-x7" || drs[0].GetClaimNamespace() != "ns" {
			t.Fatalf("dynamic resources %v, want claim ns/p-nic-x7", drs)
		}
		var out [][]string
		for _, cr := range drs[0].GetClaimResources() {
			if cr.GetDriverName() != "nic.example.com" || cr.GetPoolName() != "node1" {
				t.Errorf("claim resource %v", cr)
			}
			var names []string
			for _, c := range cr.GetCdiDevices() {
				names = append(names, c.GetName())
			}
			out = append(out, names)
		}
		if got := drs[0].GetClaimResources()[1]; got.GetDeviceName() != "nic-1" || got.GetShareId() != "1b4e28ba-2fa1-11d2-883f-0016d3cca427" {
			t.Errorf("second device %v", got)
		}
		return out
	}
	if got := cdiOf(); len(got) != 2 || len(got[0]) != 1 || len(got[1]) != 2 || got[1][0] != "example.com/nic=0" {
		t.Errorf("CDI names %v, want the second device's to hold the first's too", got)
	}
	k.SetFixedCDI(true)
	if got := cdiOf(); len(got) != 2 || len(got[1]) != 1 || got[1][0] != "example.com/nic=1" {
		t.Errorf("CDI names with SetFixedCDI %v, want each device's own", got)
	}
}
