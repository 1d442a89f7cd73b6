package k8sclient

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// draServer answers what the DRA reads and writes send, and records them.
type draServer struct {
	mu       sync.Mutex
	requests []*http.Request
	bodies   []string
	answer   func(w http.ResponseWriter, r *http.Request)
}

func (s *draServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	s.requests = append(s.requests, r)
	s.bodies = append(s.bodies, string(b))
	s.mu.Unlock()
	s.answer(w, r)
}

func newDRAClient(t *testing.T, answer func(w http.ResponseWriter, r *http.Request)) (*Client, *draServer) {
	t.Helper()
	s := &draServer{answer: answer}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	c, err := NewForConfig(&Config{Host: srv.URL}, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return c, s
}

// TestPodClaims: a pod's claims come with their ResourceClaims' names, from
// spec (resourceClaimName) or status (a claim made from a template).
func TestPodClaims(t *testing.T) {
	c, _ := newDRAClient(t, func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"metadata":{"namespace":"ns","name":"p","uid":"u"},
			"spec":{"nodeName":"node1","resourceClaims":[{"name":"nics","resourceClaimTemplateName":"t"},{"name":"gpu","resourceClaimName":"shared"},{"name":"later","resourceClaimTemplateName":"t"}]},
			"status":{"resourceClaimStatuses":[{"name":"nics","resourceClaimName":"p-nics-x1"}],
				"extendedResourceClaimStatus":{"resourceClaimName":"p-extended-resources-x2","requestMappings":[{"containerName":"app","resourceName":"example.com/nic","requestName":"container-0-request-0"}]}}}`)
	})
	p, err := c.GetPod(context.Background(), "ns", "p")
	if err != nil {
		t.Fatal(err)
	}
	want := []PodResourceClaim{{Name: "nics", ClaimName: "p-nics-x1"}, {Name: "gpu", ClaimName: "shared"}, {Name: "later"}}
	if p.NodeName != "node1" || len(p.ResourceClaims) != 3 {
		t.Fatalf("pod %+v", p)
	}
	for i, w := range want {
		if p.ResourceClaims[i] != w {
			t.Errorf("claim %d: %+v, want %+v", i, p.ResourceClaims[i], w)
		}
	}
	ext := p.ExtendedClaim
	if ext == nil || ext.ClaimName != "p-extended-resources-x2" || len(ext.Mappings) != 1 ||
		ext.Mappings[0] != (ExtendedResourceRequest{Container: "app", Resource: "example.com/nic", Request: "container-0-request-0"}) {
		t.Errorf("extended resource claim %+v, want p-extended-resources-x2 with its one mapping", ext)
	}
}

func TestGetResourceClaim(t *testing.T) {
	c, s := newDRAClient(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims/p-nics-x1" {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		io.WriteString(w, `{"metadata":{"name":"p-nics-x1","namespace":"ns","uid":"cu"},"status":{
			"allocation":{"devices":{"results":[{"request":"vf","driver":"d","pool":"node1","device":"nic-1","adminAccess":false}]},
			"nodeSelector":{"nodeSelectorTerms":[{"matchFields":[{"key":"metadata.name","operator":"In","values":["node1"]}]}]}},
			"reservedFor":[{"resource":"pods","name":"p","uid":"u"}]}}`)
	})
	rc, err := c.GetResourceClaim(context.Background(), "ns", "p-nics-x1")
	if err != nil {
		t.Fatal(err)
	}
	if rc.Metadata.UID != "cu" || rc.Status.Allocation.NodeName() != "node1" || len(rc.Status.Allocation.Devices.Results) != 1 ||
		rc.Status.Allocation.Devices.Results[0].Device != "nic-1" || *rc.Status.Allocation.Devices.Results[0].AdminAccess {
		t.Errorf("claim %+v", rc)
	}
	if !rc.ReservedForPod("p", "u") || !rc.ReservedForPod("p", "") || rc.ReservedForPod("p", "other") || rc.ReservedForPod("q", "u") {
		t.Error("ReservedForPod")
	}
	if s.requests[0].URL.Query().Get("resourceVersion") != "" {
		t.Errorf("claim read from the cache (%s); its reservation is recent", s.requests[0].URL)
	}
	if _, err := c.GetResourceClaim(context.Background(), "ns", "gone"); !errors.Is(err, ErrNotFound) {
		t.Errorf("missing claim: %v", err)
	}
}

func TestAllocationNodeName(t *testing.T) {
	for _, tc := range []struct{ selector, want string }{
		{`{"nodeSelectorTerms":[{"matchFields":[{"key":"metadata.name","operator":"In","values":["n1"]}]}]}`, "n1"},
		{`{"nodeSelectorTerms":[{"matchFields":[{"key":"metadata.name","operator":"In","values":["n1","n2"]}]}]}`, ""},
		{`{"nodeSelectorTerms":[{"matchExpressions":[{"key":"zone","operator":"In","values":["a"]}]}]}`, ""},
		{`{"nodeSelectorTerms":[{"matchFields":[{"key":"metadata.name","operator":"In","values":["n1"]}]},{"matchFields":[{"key":"metadata.name","operator":"In","values":["n2"]}]}]}`, ""},
	} {
		a := &ClaimAllocation{}
		if err := json.Unmarshal([]byte(`{"nodeSelector":`+tc.selector+`}`), a); err != nil {
			t.Fatal(err)
		}
		if got := a.NodeName(); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.selector, got, tc.want)
		}
	}
	if (&ClaimAllocation{}).NodeName() != "" || (*ClaimAllocation)(nil).NodeName() != "" {
		t.Error("no selector names no node")
	}
}

// TestListResourceSlices: by driver and node, from the cache, page after
// page; attributes keep their kinds.
func TestListResourceSlices(t *testing.T) {
	c, s := newDRAClient(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("continue") == "" {
			io.WriteString(w, `{"metadata":{"continue":"next"},"items":[{"spec":{"driver":"d","pool":{"name":"node1","generation":2},"nodeName":"node1",
				"devices":[{"name":"nic-0","attributes":{"resource.kubernetes.io/pciBusID":{"string":"0000:03:00.0"},"numa":{"int":1},"sriov":{"bool":true},"fw":{"version":"1.2.3"}}}]}}]}`)
			return
		}
		io.WriteString(w, `{"metadata":{},"items":[{"spec":{"driver":"d","pool":{"name":"node1","generation":2},"devices":[{"name":"nic-1"}]}}]}`)
	})
	got, err := c.ListResourceSlices(context.Background(), "d", "node1")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Spec.Devices[0].Name != "nic-0" || got[1].Spec.Devices[0].Name != "nic-1" || *got[0].Spec.NodeName != "node1" {
		t.Fatalf("slices %+v", got)
	}
	attrs := got[0].Spec.Devices[0].Attributes
	if attrs["resource.kubernetes.io/pciBusID"].Value() != "0000:03:00.0" || attrs["numa"].Value() != int64(1) || attrs["sriov"].Value() != true || attrs["fw"].Value() != "1.2.3" || (DeviceAttribute{}).Value() != nil {
		t.Errorf("attributes %+v", attrs)
	}
	q0, q1 := s.requests[0].URL.Query(), s.requests[1].URL.Query()
	if s.requests[0].URL.Path != "/apis/resource.k8s.io/v1/resourceslices" || q0.Get("fieldSelector") != "spec.driver=d,spec.nodeName=node1" || q0.Get("resourceVersion") != "0" {
		t.Errorf("first page asked %s", s.requests[0].URL)
	}
	if q1.Get("continue") != "next" || q1.Get("resourceVersion") != "" || q1.Get("fieldSelector") != q0.Get("fieldSelector") {
		t.Errorf("second page asked %s", s.requests[1].URL)
	}
	if _, err := c.ListResourceSlices(context.Background(), "d", ""); err != nil || s.requests[2].URL.Query().Get("fieldSelector") != "spec.driver=d" {
		t.Errorf("every node's: %v, %s", err, s.requests[2].URL)
	}
}

// TestApplyClaimDeviceStatus: a server-side apply of status.devices on the
// status subresource as the given manager, conditional on the claim's UID;
// a conflict comes back as an *ApplyConflict naming each field's manager.
func TestApplyClaimDeviceStatus(t *testing.T) {
	conflict := false
	c, s := newDRAClient(t, func(w http.ResponseWriter, r *http.Request) {
		if !conflict {
			io.WriteString(w, `{}`)
			return
		}
		w.WriteHeader(http.StatusConflict)
		io.WriteString(w, `{"kind":"Status","status":"Failure","reason":"Conflict","code":409,"message":"Apply failed with 2 conflicts",
			"details":{"causes":[
			{"reason":"FieldManagerConflict","message":"conflict with \"nic-driver\" using resource.k8s.io/v1 at 2026-05-01T10:00:00Z","field":".status.devices[device=\"nic-0\",driver=\"d\",pool=\"p\"].networkData"},
			{"reason":"FieldManagerConflict","message":"conflict with \"manifold/c0\" with subresource \"status\"","field":".status.devices[device=\"nic-1\",driver=\"d\",pool=\"p\"].networkData"}]}}`)
	})
	sid := "s1"
	devs := []DeviceStatus{{Driver: "d", Pool: "p", Device: "nic-0", ShareID: &sid, NetworkData: &NetworkDeviceData{InterfaceName: "net1", IPs: []string{"10.0.0.2/24"}}}}
	if err := c.ApplyClaimDeviceStatus(context.Background(), "ns", "claim", "cu", "manifold/c1", devs, false); err != nil {
		t.Fatal(err)
	}
	r := s.requests[0]
	if r.Method != "PATCH" || r.URL.Path != "/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims/claim/status" ||
		r.Header.Get("Content-Type") != "application/apply-patch+yaml" || r.URL.Query().Get("fieldManager") != "manifold/c1" || r.URL.Query().Has("force") {
		t.Errorf("request %s %s (%s)", r.Method, r.URL, r.Header.Get("Content-Type"))
	}
	var body struct {
		APIVersion, Kind string
		Metadata         map[string]string
		Status           struct{ Devices []map[string]any }
	}
	if err := json.Unmarshal([]byte(s.bodies[0]), &body); err != nil {
		t.Fatal(err)
	}
	if body.APIVersion != "resource.k8s.io/v1" || body.Kind != "ResourceClaim" || body.Metadata["uid"] != "cu" || body.Metadata["name"] != "claim" ||
		len(body.Status.Devices) != 1 || body.Status.Devices[0]["shareID"] != "s1" || body.Status.Devices[0]["conditions"] != nil {
		t.Errorf("body %s", s.bodies[0])
	}

	// Giving up every field: an empty list, not a null one.
	if err := c.ApplyClaimDeviceStatus(context.Background(), "ns", "claim", "", "manifold/c1", nil, true); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(s.bodies[1], `"devices":[]`) || strings.Contains(s.bodies[1], `"uid"`) || s.requests[1].URL.Query().Get("force") != "true" {
		t.Errorf("empty apply %s %s", s.requests[1].URL, s.bodies[1])
	}

	conflict = true
	err := c.ApplyClaimDeviceStatus(context.Background(), "ns", "claim", "", "manifold/c1", devs, false)
	var ac *ApplyConflict
	if !errors.As(err, &ac) || len(ac.Causes) != 2 {
		t.Fatalf("error %v, want an ApplyConflict of 2 causes", err)
	}
	if ac.Causes[0].Manager != "nic-driver" || ac.Causes[1].Manager != "manifold/c0" || !strings.Contains(ac.Causes[0].Field, `device="nic-0"`) {
		t.Errorf("causes %+v", ac.Causes)
	}
	if !strings.Contains(err.Error(), "ns/claim") || !strings.Contains(err.Error(), "409") {
		t.Errorf("error %q names neither the claim nor the status", err)
	}
}
