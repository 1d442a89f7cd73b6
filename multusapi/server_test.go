package multusapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	cni100 "github.com/containernetworking/cni/pkg/types/100"
	multus "gopkg.in/k8snetworkplumbingwg/multus-cni.v4/pkg/server/api"

	"github.com/manifold-cni/manifold/flow"
	"github.com/manifold-cni/manifold/shimproto"
)

// fakeBackend records what the handlers hand it and answers as told.
type fakeBackend struct {
	mu      sync.Mutex
	calls   []*shimproto.Request
	plugs   []*flow.PlugRequest
	unplugs []*flow.PlugRequest
	reply   *shimproto.Reply
	plugErr error
	ready   error
}

func (f *fakeBackend) Call(_ context.Context, req *shimproto.Request, answered <-chan struct{}) *shimproto.Reply {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, req)
	return f.reply
}

func (f *fakeBackend) Plug(_ context.Context, req *flow.PlugRequest) (types.Result, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.plugs = append(f.plugs, req)
	if f.plugErr != nil {
		return nil, f.plugErr
	}
	return testResult("0.4.0"), nil
}

func (f *fakeBackend) Unplug(_ context.Context, req *flow.PlugRequest) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.unplugs = append(f.unplugs, req)
	return f.plugErr
}

func (f *fakeBackend) Healthy() error { return nil }
func (f *fakeBackend) Ready() error   { return f.ready }

// testResult is a delegate's result in version v.
func testResult(v string) types.Result {
	r := &cni100.Result{CNIVersion: "1.0.0",
		Interfaces: []*cni100.Interface{{Name: "net1", Mac: "0a:58:0a:01:02:03", Sandbox: "/var/run/netns/p"}},
		IPs:        []*cni100.IPConfig{{Interface: cni100.Int(0), Address: mustCIDR("10.1.2.3/24")}}}
	out, err := r.GetAsVersion(v)
	if err != nil {
		panic(err)
	}
	return out
}

func mustCIDR(s string) net.IPNet {
	ip, n, err := net.ParseCIDR(s)
	if err != nil {
		panic(err)
	}
	n.IP = ip
	return *n
}

// serve runs Handler on a unix socket named as Multus names its own, and
// returns the socket's directory: Multus's clients take the directory.
func serve(t *testing.T, b Backend) string {
	t.Helper()
	dir := t.TempDir()
	ln, err := net.Listen("unix", filepath.Join(dir, SocketName))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: Handler(b, nil, nil, 0)}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return dir
}

// TestCNIAddThroughMultusShimClient posts /cni as multus-shim does (its own
// DoCNI), and reads the answer as the shim does.
func TestCNIAddThroughMultusShimClient(t *testing.T) {
	stdout, _ := json.Marshal(testResult("0.4.0"))
	fb := &fakeBackend{reply: &shimproto.Reply{Stdout: stdout}}
	dir := serve(t, fb)
	req := &multus.Request{Env: map[string]string{
		"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "c1", "CNI_NETNS": "/var/run/netns/p", "CNI_IFNAME": "eth0",
		"CNI_ARGS": "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p", "CNI_PATH": "/opt/cni/bin", "PATH": "/usr/bin", "HOME": "/root",
	}, Config: []byte(`{"cniVersion":"0.4.0","name":"n","type":"manifold-shim"}`)}
	body, err := multus.DoCNI("http://dummy/cni", req, multus.SocketPath(dir))
	if err != nil {
		t.Fatalf("/cni ADD: %v", err)
	}
	var resp multus.Response
	if err := json.Unmarshal(body, &resp); err != nil || resp.Result == nil {
		t.Fatalf("the shim cannot read the answer %s: %v", body, err)
	}
	if len(resp.Result.IPs) != 1 || resp.Result.IPs[0].Address.String() != "10.1.2.3/24" || resp.Result.Interfaces[0].Mac != "0a:58:0a:01:02:03" {
		t.Errorf("result %s, want the call's result", body)
	}
	if len(fb.calls) != 1 {
		t.Fatalf("backend got %d calls, want 1", len(fb.calls))
	}
	got := fb.calls[0]
	want := []string{"CNI_ARGS=K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p", "CNI_COMMAND=ADD", "CNI_CONTAINERID=c1", "CNI_IFNAME=eth0", "CNI_NETNS=/var/run/netns/p", "CNI_PATH=/opt/cni/bin"}
	if !reflect.DeepEqual(got.Env, want) {
		t.Errorf("env passed on %q, want only the CNI_* variables %q", got.Env, want)
	}
	if string(got.Stdin) != string(req.Config) {
		t.Errorf("stdin %s, want the shim's config %s", got.Stdin, req.Config)
	}
}

// TestCNIErrorKeepsCode: a failed call answers 400 with its CNI error, which
// Multus's client returns as a *types.Error with the code.
func TestCNIErrorKeepsCode(t *testing.T) {
	stdout, _ := json.Marshal(types.NewError(7, "network ns/a: NetworkAttachmentDefinition not found", ""))
	dir := serve(t, &fakeBackend{reply: &shimproto.Reply{ExitCode: 1, Stdout: stdout}})
	for _, cmd := range []string{"ADD", "DEL"} {
		req := &multus.Request{Env: map[string]string{"CNI_COMMAND": cmd, "CNI_CONTAINERID": "c1", "CNI_NETNS": "/n", "CNI_IFNAME": "eth0", "CNI_ARGS": ""}, Config: []byte(`{}`)}
		_, err := multus.DoCNI("http://dummy/cni", req, multus.SocketPath(dir))
		var ce *types.Error
		if !errors.As(err, &ce) || ce.Code != 7 || !strings.Contains(ce.Msg, "ns/a") {
			t.Errorf("%s: error %v (%T), want the CNI error with code 7", cmd, err, err)
		}
	}
}

// TestCNIOtherVerbsEmptyBody: DEL, CHECK, GC and STATUS answer 200 with no
// body, as Multus's server does; an unknown verb is refused with code 4.
func TestCNIOtherVerbsEmptyBody(t *testing.T) {
	dir := serve(t, &fakeBackend{reply: &shimproto.Reply{}})
	for _, cmd := range []string{"DEL", "CHECK", "GC", "STATUS"} {
		body, err := multus.DoCNI("http://dummy/cni", &multus.Request{Env: map[string]string{"CNI_COMMAND": cmd}}, multus.SocketPath(dir))
		if err != nil || len(body) != 0 {
			t.Errorf("%s: body %q, error %v; want 200 and no body", cmd, body, err)
		}
	}
	_, err := multus.DoCNI("http://dummy/cni", &multus.Request{Env: map[string]string{"CNI_COMMAND": "VERSION"}}, multus.SocketPath(dir))
	var ce *types.Error
	if !errors.As(err, &ce) || ce.Code != types.ErrInvalidEnvironmentVariables {
		t.Errorf("VERSION: %v, want code 4", err)
	}
}

// TestDelegateRequestAsControllerSends: the request the controller builds
// with Multus's CreateDelegateRequest reaches Plug and Unplug whole, and
// the ADD's answer is a Response whose Result the controller dereferences.
func TestDelegateRequestAsControllerSends(t *testing.T) {
	fb := &fakeBackend{}
	dir := serve(t, fb)
	cniArgs := map[string]any{"foo": "bar", "n": 12345678901234567}
	attrs := &multus.DelegateInterfaceAttributes{IPRequest: []string{"10.1.2.3/24"}, MacRequest: "0a:58:0a:01:02:03", CNIArgs: &cniArgs}
	conf := []byte(`{"cniVersion":"0.4.0","name":"macvlan-a","type":"macvlan"}`)
	add := multus.CreateDelegateRequest("add", "sandbox1", "/var/run/netns/p", "net1", "ns", "pod", "uid-1", conf, attrs)
	body, err := multus.DoCNI(multus.GetAPIEndpoint(multus.MultusDelegateAPIEndpoint), add, multus.SocketPath(dir))
	if err != nil {
		t.Fatalf("/delegate ADD: %v", err)
	}
	var resp multus.Response
	if err := json.Unmarshal(body, &resp); err != nil || resp.Result == nil || len(resp.Result.IPs) != 1 {
		t.Fatalf("answer %s (%v): want a Response with the result", body, err)
	}
	if len(fb.plugs) != 1 {
		t.Fatalf("Plug called %d times", len(fb.plugs))
	}
	p := fb.plugs[0]
	if p.ContainerID != "sandbox1" || p.NetNS != "/var/run/netns/p" || p.IfName != "net1" || p.Pod.Namespace != "ns" || p.Pod.Name != "pod" || p.Pod.UID != "uid-1" ||
		string(p.Config) != string(conf) || !reflect.DeepEqual(p.IPs, attrs.IPRequest) || p.MAC != attrs.MacRequest {
		t.Errorf("plug request %+v does not carry the controller's request", p)
	}
	if n, ok := p.CNIArgs["n"].(json.Number); !ok || n.String() != "12345678901234567" || p.CNIArgs["foo"] != "bar" {
		t.Errorf("cni-args %#v: want the values, numbers kept exact", p.CNIArgs)
	}

	del := multus.CreateDelegateRequest("del", "sandbox1", "/var/run/netns/p", "net1", "ns", "pod", "uid-1", conf, nil)
	body, err = multus.DoCNI(multus.GetAPIEndpoint(multus.MultusDelegateAPIEndpoint), del, multus.SocketPath(dir))
	if err != nil || len(body) != 0 {
		t.Fatalf("/delegate DEL: body %q, %v; want 200 and no body", body, err)
	}
	if len(fb.unplugs) != 1 || fb.unplugs[0].IfName != "net1" || fb.unplugs[0].CNIArgs != nil {
		t.Errorf("unplug requests %+v", fb.unplugs)
	}
}

// TestDelegateErrors: a refusal answers 400 with the CNI error; a request
// that names no pod, or a verb other than ADD and DEL, never reaches the
// backend.
func TestDelegateErrors(t *testing.T) {
	fb := &fakeBackend{plugErr: fmt.Errorf("plug: %w", types.NewError(7, "refused", ""))}
	dir := serve(t, fb)
	conf := []byte(`{"cniVersion":"0.4.0","name":"a","type":"macvlan"}`)
	_, err := multus.DoCNI(multus.GetAPIEndpoint("/delegate"), multus.CreateDelegateRequest("ADD", "s", "/n", "net1", "ns", "p", "", conf, nil), multus.SocketPath(dir))
	var ce *types.Error
	if !errors.As(err, &ce) || ce.Code != 7 || ce.Msg != "plug: refused" {
		t.Errorf("refused ADD: %v, want code 7 with the whole message", err)
	}
	for name, req := range map[string]*multus.Request{
		"no pod":   {Env: map[string]string{"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "s", "CNI_ARGS": "K8S_POD_UID=u"}},
		"no args":  {Env: map[string]string{"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "s"}},
		"no id":    {Env: map[string]string{"CNI_COMMAND": "DEL", "CNI_ARGS": "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p"}},
		"bad args": {Env: map[string]string{"CNI_COMMAND": "DEL", "CNI_CONTAINERID": "s", "CNI_ARGS": "K8S_POD_NAMESPACE"}},
		"CHECK":    {Env: map[string]string{"CNI_COMMAND": "CHECK", "CNI_CONTAINERID": "s", "CNI_ARGS": "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p"}},
	} {
		_, err := multus.DoCNI(multus.GetAPIEndpoint("/delegate"), req, multus.SocketPath(dir))
		if !errors.As(err, &ce) || ce.Code != types.ErrInvalidEnvironmentVariables {
			t.Errorf("%s: %v, want code 4", name, err)
		}
	}
	if len(fb.plugs)+len(fb.unplugs) != 1 {
		t.Errorf("backend reached %d times, want once (the refused ADD)", len(fb.plugs)+len(fb.unplugs))
	}
}

// TestProbesAndRoutes: /healthz as Multus's clients call it (POST of
// "null"), /readyz by GET, a GET of /cni, and an unknown path.
func TestProbesAndRoutes(t *testing.T) {
	fb := &fakeBackend{}
	dir := serve(t, fb)
	if err := multus.CheckAPIReadyNow(dir); err != nil {
		t.Errorf("/healthz through Multus's client: %v", err)
	}
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", filepath.Join(dir, SocketName))
	}}}
	status := func(method, path string) int {
		req, _ := http.NewRequest(method, "http://dummy"+path, nil)
		res, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	for _, tc := range []struct {
		method, path string
		want         int
	}{
		{"GET", PathReady, 200}, {"POST", PathReady, 200}, {"GET", PathHealth, 200}, {"PUT", PathHealth, 405},
		{"GET", PathCNI, 405}, {"GET", PathDelegate, 405}, {"GET", "/other", 404},
	} {
		if got := status(tc.method, tc.path); got != tc.want {
			t.Errorf("%s %s: %d, want %d", tc.method, tc.path, got, tc.want)
		}
	}
	fb.ready = errors.New("the node daemon is stopping")
	if got := status("GET", PathReady); got != 503 {
		t.Errorf("/readyz while stopping: %d, want 503", got)
	}
}

// TestBadBody: a body that is not one Request is refused with code 6
// (decoding failure) before the backend is reached.
func TestBadBody(t *testing.T) {
	fb := &fakeBackend{}
	dir := serve(t, fb)
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", filepath.Join(dir, SocketName))
	}}}
	for _, body := range []string{`{`, `{"env":{}} {}`, `[]`} {
		res, err := c.Post("http://dummy/cni", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		var ce types.Error
		json.NewDecoder(res.Body).Decode(&ce)
		res.Body.Close()
		if res.StatusCode != 400 || ce.Code != types.ErrDecodingFailure {
			t.Errorf("body %q: %d %+v, want 400 with code 6", body, res.StatusCode, ce)
		}
	}
	if len(fb.calls) != 0 {
		t.Errorf("backend reached with a bad body")
	}
}
