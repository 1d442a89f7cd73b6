package flow

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/manifold-cni/manifold/internal/testenv"
	"github.com/manifold-cni/manifold/k8sclient"
	"github.com/manifold-cni/manifold/netconf"
)

// fakeAPI serves one pod and a set of NADs from memory, and records what it is
// asked. It is safe for concurrent use, as podAPI must be. Unit tests only; e2e
// runs against a real kube-apiserver.
type fakeAPI struct {
	pod  *k8sclient.Pod
	nads map[string]string
	// nadAnnotations are the annotations of these NADs.
	nadAnnotations map[string]map[string]string
	// nadErrs are errors GetNAD returns for these NADs ("namespace/name").
	nadErrs map[string]error
	// podHook, when set, runs inside WaitForPod before it answers.
	podHook func()
	// nadGates hold the reads of these NADs ("namespace/name") until closed.
	nadGates map[string]chan struct{}

	// claims and slices are the DRA objects it serves; claimErr, when
	// set, answers every claim read.
	claims   map[string]*k8sclient.ResourceClaim // namespace/name
	slices   []k8sclient.ResourceSlice
	claimErr error
	// applyErrs answer the next status applies, in order.
	applyErrs []error

	mu      sync.Mutex
	events  []string
	patches int
	// applies are the claim status applies, in order.
	applies    []claimApply
	claimReads []string
	sliceLists []string
	// patchUIDs are the UIDs the status patches were conditional on.
	patchUIDs []string
	// statuses are the network-status values patched, in order.
	statuses []string
	nadReads []string
	podReads int
}

func (f *fakeAPI) WaitForPod(_ context.Context, ns, name, _ string, _ time.Duration) (*k8sclient.Pod, error) {
	f.mu.Lock()
	f.podReads++
	f.mu.Unlock()
	if f.podHook != nil {
		f.podHook()
	}
	if f.pod == nil || f.pod.Namespace != ns || f.pod.Name != name {
		return nil, k8sclient.ErrNotFound
	}
	return f.pod, nil
}

func (f *fakeAPI) GetNAD(_ context.Context, ns, name string) (*k8sclient.NetworkAttachmentDefinition, error) {
	f.mu.Lock()
	f.nadReads = append(f.nadReads, ns+"/"+name)
	f.mu.Unlock()
	if gate := f.nadGates[ns+"/"+name]; gate != nil {
		<-gate
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.nadErrs[ns+"/"+name]; err != nil {
		return nil, err
	}
	cfg, ok := f.nads[ns+"/"+name]
	if !ok {
		return nil, k8sclient.ErrNotFound
	}
	nad := &k8sclient.NetworkAttachmentDefinition{}
	nad.Spec.Config = cfg
	nad.Metadata.Annotations = f.nadAnnotations[ns+"/"+name]
	return nad, nil
}

func (f *fakeAPI) PatchPodAnnotation(_ context.Context, _, _, uid, _, value string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.patches++
	f.patchUIDs = append(f.patchUIDs, uid)
	f.statuses = append(f.statuses, value)
	return nil
}

func (f *fakeAPI) Event(_ context.Context, _ *k8sclient.Pod, typ, reason, msg, _ string, _ time.Time) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events = append(f.events, typ+" "+reason+" "+msg)
	return nil
}

// claimApply is one ApplyClaimDeviceStatus.
type claimApply struct {
	claim, uid, manager string
	devices             []k8sclient.DeviceStatus
	force               bool
}

func (f *fakeAPI) GetResourceClaim(_ context.Context, ns, name string) (*k8sclient.ResourceClaim, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.claimReads = append(f.claimReads, ns+"/"+name)
	if f.claimErr != nil {
		return nil, f.claimErr
	}
	rc, ok := f.claims[ns+"/"+name]
	if !ok {
		return nil, k8sclient.ErrNotFound
	}
	return rc, nil
}

func (f *fakeAPI) ListResourceSlices(_ context.Context, driver, node string) ([]k8sclient.ResourceSlice, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sliceLists = append(f.sliceLists, driver+"@"+node)
	var out []k8sclient.ResourceSlice
	for _, s := range f.slices {
		if s.Spec.Driver == driver && (node == "" || (s.Spec.NodeName != nil && *s.Spec.NodeName == node)) {
			out = append(out, s)
		}
	}
	return out, nil
}

func (f *fakeAPI) ApplyClaimDeviceStatus(_ context.Context, ns, name, uid, manager string, devices []k8sclient.DeviceStatus, force bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.applies = append(f.applies, claimApply{claim: ns + "/" + name, uid: uid, manager: manager, devices: devices, force: force})
	if len(f.applyErrs) > 0 {
		err := f.applyErrs[0]
		f.applyErrs = f.applyErrs[1:]
		return err
	}
	return nil
}

func (f *fakeAPI) reads() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.nadReads...)
}

// testConf is a config whose delegates would fail if they ever ran: bad input must
// be refused before any delegate is called.
func testConf(t *testing.T, extra map[string]any) []byte {
	t.Helper()
	m := map[string]any{
		"cniVersion": "1.0.0", "name": "manifold", "type": "manifold",
		"kubeconfig": "/nonexistent/kubeconfig", "cniDir": t.TempDir(), "binDir": t.TempDir(),
		"delegates": []any{map[string]any{"cniVersion": "1.0.0", "name": "def", "type": "must-not-run"}},
	}
	for k, v := range extra {
		m[k] = v
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestBadInputInProcess(t *testing.T) {
	nadConf := `{"cniVersion":"1.0.0","type":"must-not-run"}`
	huge := strings.Repeat("a,", 40000) + "a"
	cases := []struct {
		name        string
		containerID string
		ifName      string
		annotation  string
		conf        map[string]any
		stdin       []byte
		code        uint
		mention     []string
	}{
		{name: "path traversal container ID", containerID: "../../etc/passwd", code: 4, mention: []string{"CNI_CONTAINERID", "../../etc/passwd"}},
		{name: "slash in container ID", containerID: "a/b", code: 4, mention: []string{"CNI_CONTAINERID"}},
		{name: "16-character CNI_IFNAME", ifName: "abcdefghijklmnop", code: 4, mention: []string{"CNI_IFNAME", "abcdefghijklmnop"}},
		{name: "16-character interface in annotation", annotation: "net-a@abcdefghijklmnop", code: 7, mention: []string{"abcdefghijklmnop"}},
		{name: "5-byte MAC", annotation: `[{"name":"net-a","mac":"aa:bb:cc:dd:ee"}]`, code: 7, mention: []string{"mac", "aa:bb:cc:dd:ee"}},
		{name: "duplicate interface", annotation: "net-a@data, net-a@data", code: 7, mention: []string{"data", "already taken"}},
		{name: "interface clashes with eth0", annotation: "net-a@eth0", code: 7, mention: []string{"eth0"}},
		{name: "huge annotation", annotation: huge, code: 7, mention: []string{"annotation"}},
		{name: "bad IP", annotation: `[{"name":"net-a","ips":["10.1.1.300/24"]}]`, code: 7, mention: []string{"ips", "10.1.1.300/24"}},
		{name: "port 0", annotation: `[{"name":"net-a","portMappings":[{"hostPort":0,"containerPort":80}]}]`, code: 7, mention: []string{"hostPort"}},
		{name: "missing NAD", annotation: "nope", code: 7, mention: []string{"default/nope"}},
		{name: "bad JSON annotation", annotation: `[{"name":`, code: 7, mention: []string{"annotation"}},
		{name: "two IPv4 default routes", annotation: `[{"name":"net-a","default-route":["10.0.0.1"]},{"name":"net-a","default-route":["10.0.1.1"]}]`, code: 7, mention: []string{"10.0.1.1"}},
		{name: "isolation", annotation: "other/net-b", conf: map[string]any{"namespaceIsolation": true}, code: 7, mention: []string{"other/net-b", "namespaceIsolation"}},
		{name: "delegates not a list", conf: map[string]any{"delegates": "x"}, code: 7, mention: []string{"delegates"}},
		{name: "relative cniDir", conf: map[string]any{"cniDir": "var/lib"}, code: 7, mention: []string{"cniDir", "var/lib"}},
		{name: "bad duration", conf: map[string]any{"apiTimeout": "soon"}, code: 7, mention: []string{"apiTimeout", "soon"}},
		{name: "no default network", conf: map[string]any{"delegates": nil}, code: 7, mention: []string{"clusterNetwork", "delegates"}},
		{name: "huge config", stdin: append([]byte(`{"cniVersion":"1.0.0","name":"m","x":"`), append(bytes.Repeat([]byte("x"), 2<<20), '"', '}')...), code: 7, mention: []string{"limit"}},
		{name: "not JSON", stdin: []byte("{{{"), code: 7, mention: []string{"invalid"}},
		{name: "pod annotations from the runtime not an object", conf: map[string]any{"runtimeConfig": map[string]any{netconf.CapPodAnnotations: "x"}},
			code: 7, mention: []string{"runtimeConfig." + netconf.CapPodAnnotations, "a string"}},
		{name: "pod annotation from the runtime not a string", conf: map[string]any{"runtimeConfig": map[string]any{netconf.CapPodAnnotations: map[string]any{annotNetworks: 3}}},
			code: 7, mention: []string{"runtimeConfig." + netconf.CapPodAnnotations, annotNetworks, "a number"}},
		{name: "bad annotation from the runtime", conf: map[string]any{"runtimeConfig": map[string]any{netconf.CapPodAnnotations: map[string]any{annotNetworks: "net-a@eth0"}}},
			code: 7, mention: []string{"eth0"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			api := &fakeAPI{
				pod:  &k8sclient.Pod{Namespace: "default", Name: "p", UID: "u", Annotations: map[string]string{annotNetworks: tc.annotation}},
				nads: map[string]string{"default/net-a": nadConf, "other/net-b": nadConf},
			}
			var stdout bytes.Buffer
			p := &Plugin{stdout: &stdout, stderr: io.Discard, now: time.Now,
				newAPI: func(*netconf.Config) (podAPI, error) { return api, nil }}
			args := &skel.CmdArgs{ContainerID: "c1", Netns: "/proc/self/ns/net", IfName: "eth0",
				Args: "K8S_POD_NAMESPACE=default;K8S_POD_NAME=p;K8S_POD_UID=u", StdinData: tc.stdin}
			if args.StdinData == nil {
				args.StdinData = testConf(t, tc.conf)
			}
			if tc.containerID != "" {
				args.ContainerID = tc.containerID
			}
			if tc.ifName != "" {
				args.IfName = tc.ifName
			}
			err := p.cmdAdd(args)
			var te *types.Error
			if !errors.As(err, &te) {
				t.Fatalf("ADD = %v, want a CNI error", err)
			}
			if te.Code != tc.code {
				t.Errorf("code = %d, want %d (%s)", te.Code, tc.code, te.Msg)
			}
			for _, m := range tc.mention {
				if !strings.Contains(te.Msg, m) {
					t.Errorf("message %q does not mention %q", te.Msg, m)
				}
			}
			if stdout.Len() != 0 {
				t.Errorf("stdout = %q, want nothing on failure", stdout.String())
			}
			if api.patches != 0 {
				t.Errorf("a failed ADD wrote network-status")
			}
		})
	}
}

// TestBadEnvironment runs the real binary with broken CNI environments; skel and
// manifold must answer with a CNI error on stdout, never a panic.
func TestBadEnvironment(t *testing.T) {
	bin := testenv.Manifold(t)
	conf := testConf(t, nil)
	base := []string{"CNI_COMMAND=ADD", "CNI_CONTAINERID=c1", "CNI_NETNS=/proc/self/ns/net", "CNI_IFNAME=eth0", "CNI_PATH=/nonexistent"}
	cases := map[string]struct {
		drop, set string
		code      uint
	}{
		"no CNI_NETNS":           {drop: "CNI_NETNS", code: 4},
		"no CNI_CONTAINERID":     {drop: "CNI_CONTAINERID", code: 4},
		"no CNI_IFNAME":          {drop: "CNI_IFNAME", code: 4},
		"traversal container ID": {set: "CNI_CONTAINERID=../x", code: 4},
		"reserved container ID":  {set: "CNI_CONTAINERID=results", code: 4},
		"garbage CNI_ARGS":       {set: "CNI_ARGS=novalue", code: 4},
		"unknown command":        {set: "CNI_COMMAND=EXPLODE", code: 4},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var env []string
			for _, kv := range base {
				if tc.drop == "" || !strings.HasPrefix(kv, tc.drop+"=") {
					env = append(env, kv)
				}
			}
			if tc.set != "" {
				env = append(env, tc.set)
			}
			cmd := exec.Command(bin)
			cmd.Env = env
			cmd.Stdin = bytes.NewReader(conf)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err == nil {
				t.Fatalf("exit 0, want failure; stdout %s", out)
			}
			if strings.Contains(stderr.String(), "panic") {
				t.Fatalf("panic: %s", stderr.String())
			}
			var te types.Error
			if jerr := json.Unmarshal(out, &te); jerr != nil || te.Code != tc.code {
				t.Errorf("stdout = %s, want a CNI error with code %d", out, tc.code)
			}
		})
	}
}

// TestDelToleratesBadEnvironment: DEL must not fail forever on input that ADD
// would have refused, or the pod's removal would be wedged. (skel itself refuses
// some inputs, such as "/" in a container ID or a 16-character CNI_IFNAME, before
// manifold runs; these are the ones that reach manifold.)
func TestDelToleratesBadEnvironment(t *testing.T) {
	bin := testenv.Manifold(t)
	conf := testConf(t, nil)
	// DEL does not need the pod's annotations, so a bad value from the runtime
	// must not stop it.
	// With nothing recorded, DEL falls back to the default network as the
	// config names it; here clusterNetwork names a NAD that cannot be read (the
	// kubeconfig is absent), so that DEL is skipped with a warning, and the
	// delegate that must not run does not.
	badAnnotations := testConf(t, map[string]any{"runtimeConfig": map[string]any{netconf.CapPodAnnotations: []any{1}}, "clusterNetwork": "unreadable-nad"})
	for name, env := range map[string][]string{
		"reserved container ID":                {"CNI_CONTAINERID=results", "CNI_IFNAME=eth0"},
		"dotted container ID":                  {"CNI_CONTAINERID=a..b", "CNI_IFNAME=eth0"},
		"garbage CNI_ARGS":                     {"CNI_CONTAINERID=c1", "CNI_IFNAME=eth0", "CNI_ARGS=novalue"},
		"pod annotations from the runtime bad": {"CNI_CONTAINERID=c1", "CNI_IFNAME=eth0"},
	} {
		t.Run(name, func(t *testing.T) {
			cmd := exec.Command(bin)
			cmd.Env = append([]string{"CNI_COMMAND=DEL", "CNI_PATH=/nonexistent"}, env...)
			cmd.Stdin = bytes.NewReader(conf)
			if strings.HasPrefix(name, "pod annotations") {
				cmd.Stdin = bytes.NewReader(badAnnotations)
			}
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("DEL = %v: %s, want success", err, out)
			}
		})
	}
}
