package main

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/plugins/test/noop/debug"

	"github.com/manifold-cni/manifold/internal/testenv"
	"github.com/manifold-cni/manifold/k8sclient"
	"github.com/manifold-cni/manifold/netconf"
)

// TestAPICache: calls share one client until it is apiClientMaxAge old or its
// kubeconfig file changes; another kubeconfig or timeout gets its own.
func TestAPICache(t *testing.T) {
	dir := t.TempDir()
	kc := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kc, []byte("v1"), 0o600); err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1000, 0)
	builds := 0
	a := &apiCache{now: func() time.Time { return now }, build: func(*netconf.Config) (podAPI, error) {
		builds++
		return &fakeAPI{}, nil
	}}
	conf := &netconf.Config{Kubeconfig: kc, APITimeout: time.Second}
	get := func(c *netconf.Config) podAPI {
		t.Helper()
		api, err := a.get(c)
		if err != nil {
			t.Fatal(err)
		}
		return api
	}
	first := get(conf)
	if get(conf) != first || builds != 1 {
		t.Fatalf("second call: %d builds, want the first client reused", builds)
	}
	other := *conf
	other.APITimeout = 2 * time.Second
	if get(&other) == first || builds != 2 {
		t.Fatalf("another timeout: %d builds, want a client of its own", builds)
	}
	now = now.Add(apiClientMaxAge + time.Second)
	aged := get(conf)
	if aged == first || builds != 3 {
		t.Fatalf("after apiClientMaxAge: %d builds, want a new client", builds)
	}
	if err := os.Chtimes(kc, now, now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if get(conf) == aged || builds != 4 {
		t.Fatalf("after the kubeconfig changed: %d builds, want a new client", builds)
	}
	a.build = func(*netconf.Config) (podAPI, error) { return nil, errors.New("boom") }
	now = now.Add(2 * apiClientMaxAge)
	if _, err := a.get(conf); err == nil {
		t.Fatal("a failed build should be an error, not the stale client")
	}
}

// TestReportsOrder: writes for one container run one after another, a write
// starts only once its call's answer is delivered, and wait returns only when
// the container's writes are done (or at the bound).
func TestReportsOrder(t *testing.T) {
	r := &reports{}
	release := make(chan struct{})
	var mu sync.Mutex
	var order []string
	note := func(s string) { mu.Lock(); order = append(order, s); mu.Unlock() }
	answered := make(chan struct{})
	r.start("c1", nil, func() { <-release; note("first") })
	r.start("c1", nil, func() { note("second") })
	r.start("c2", answered, func() { note("other") })
	if r.wait("c2", 50*time.Millisecond) {
		t.Fatal("c2's write ran before its answer was delivered")
	}
	close(answered)
	if !r.wait("c2", 10*time.Second) {
		t.Fatal("c2's write should not wait for c1's")
	}
	if r.wait("c1", 50*time.Millisecond) {
		t.Fatal("wait returned while c1's first write was blocked")
	}
	close(release)
	if !r.wait("c1", 10*time.Second) {
		t.Fatal("wait did not return after c1's writes were done")
	}
	r.drain()
	if len(order) != 3 || order[1] != "first" || order[2] != "second" {
		t.Errorf("order = %v, want other, first, second", order)
	}
	if !r.wait("never", 0) || !(*reports)(nil).wait("c1", 0) {
		t.Error("wait on a container with no write should return at once")
	}
}

// blockingAPI is fakeAPI whose status patch waits for release.
type blockingAPI struct {
	*fakeAPI
	release chan struct{}
	patched chan struct{}
}

func (b *blockingAPI) PatchPodAnnotation(ctx context.Context, ns, name, uid, key, value string) error {
	select { // bounded, so that a synchronous patch fails the test rather than hangs it
	case <-b.release:
	case <-time.After(10 * time.Second):
	}
	err := b.fakeAPI.PatchPodAnnotation(ctx, ns, name, uid, key, value)
	close(b.patched)
	return err
}

// TestDaemonAnswersBeforeStatus: in the daemon, ADD answers while the status
// patch is still on its way, and a DEL of the same container waits for the
// patch, so the status never lands after the DEL.
func TestDaemonAnswersBeforeStatus(t *testing.T) {
	plugins := testenv.Plugins(t)
	api := &blockingAPI{
		fakeAPI: &fakeAPI{pod: &k8sclient.Pod{}},
		release: make(chan struct{}),
		patched: make(chan struct{}),
	}
	api.pod.Namespace, api.pod.Name, api.pod.UID = "default", "p1", "u1"
	p := newDaemon(nil).plugin
	p.newAPI = func(*netconf.Config) (podAPI, error) { return api, nil }
	dbg := filepath.Join(t.TempDir(), "noop.json")
	if err := (&debug.Debug{ReportResult: `{"cniVersion":"1.0.0","ips":[{"address":"10.9.0.9/24"}]}`}).WriteDebug(dbg); err != nil {
		t.Fatal(err)
	}
	conf := testConf(t, map[string]any{"delegates": []any{map[string]any{"cniVersion": "1.0.0", "name": "def", "type": "noop", "debugFile": dbg}}})
	args := &skel.CmdArgs{ContainerID: "c1", Netns: "/nonexistent/netns", IfName: "eth0", Path: plugins,
		Args: "K8S_POD_NAMESPACE=default;K8S_POD_NAME=p1;K8S_POD_UID=u1", StdinData: conf}

	var out strings.Builder
	p.stdout = &out
	if err := p.cmdAdd(args); err != nil {
		t.Fatalf("ADD: %v", err)
	}
	select {
	case <-api.patched:
		t.Fatal("the status was patched before ADD answered; the patch was blocked")
	default:
	}
	delDone := make(chan error, 1)
	go func() { delDone <- p.cmdDel(args) }()
	select {
	case err := <-delDone:
		t.Fatalf("DEL finished (%v) while the ADD's status patch was still blocked", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(api.release)
	if err := <-delDone; err != nil {
		t.Fatalf("DEL: %v", err)
	}
	select {
	case <-api.patched:
	default:
		t.Fatal("DEL finished before the status patch")
	}
	p.reports.drain()
	if len(api.events) != 1 {
		t.Errorf("events = %v, want one AddedInterface", api.events)
	}
}

// TestAPICacheCredentials: the daemon's client is rebuilt when its token file
// changes (the kubeconfig itself unchanged), and after the API server refused
// its credentials with 401; real k8sclient clients against a local server
// that accepts one token only.
func TestAPICacheCredentials(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer good" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		w.WriteHeader(http.StatusNotFound)
	}))
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	token := filepath.Join(dir, "token")
	writeToken := func(v string, mtime time.Time) {
		t.Helper()
		if err := os.WriteFile(token, []byte(v+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(token, mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
	writeToken("expired", time.Unix(1000, 0))
	kc := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kc, []byte(`current-context: c
contexts: [{name: c, context: {cluster: k, user: u}}]
clusters: [{name: k, cluster: {server: "`+srv.URL+`"}}]
users: [{name: u, user: {tokenFile: token}}]
`), 0o600); err != nil {
		t.Fatal(err)
	}
	a := &apiCache{now: time.Now, build: newAPIClient}
	conf := &netconf.Config{Kubeconfig: kc, APITimeout: 5 * time.Second}
	get := func() podAPI {
		t.Helper()
		api, err := a.get(conf)
		if err != nil {
			t.Fatal(err)
		}
		return api
	}
	first := get()
	if get() != first {
		t.Fatal("a second call did not reuse the client")
	}
	_, err := first.GetNAD(context.Background(), "ns", "n")
	if !errors.Is(err, k8sclient.ErrUnauthorized) {
		t.Fatalf("GetNAD with the expired token = %v, want a 401", err)
	}
	refused := get()
	if refused == first {
		t.Fatal("the client the API server refused with 401 was reused")
	}
	writeToken("good", time.Unix(2000, 0))
	rotated := get()
	if rotated == refused {
		t.Fatal("the token file changed, and the client built from the old token was reused")
	}
	if _, err := rotated.GetNAD(context.Background(), "ns", "n"); !errors.Is(err, k8sclient.ErrNotFound) {
		t.Fatalf("GetNAD with the rotated token = %v, want not found", err)
	}
	if get() != rotated {
		t.Error("nothing changed, and the client was rebuilt")
	}
}
