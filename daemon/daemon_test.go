package daemon

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/manifold-cni/manifold/flow"
	"github.com/manifold-cni/manifold/k8sclient"
	"github.com/manifold-cni/manifold/netconf"
)

// stubAPI is an API client that is never called: TestAPICache counts builds.
type stubAPI struct{ flow.API }

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
	a := &apiCache{now: func() time.Time { return now }, build: func(*netconf.Config) (flow.API, error) {
		builds++
		return &stubAPI{}, nil
	}}
	conf := &netconf.Config{Kubeconfig: kc, APITimeout: time.Second}
	get := func(c *netconf.Config) flow.API {
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
	a.build = func(*netconf.Config) (flow.API, error) { return nil, errors.New("boom") }
	now = now.Add(2 * apiClientMaxAge)
	if _, err := a.get(conf); err == nil {
		t.Fatal("a failed build should be an error, not the stale client")
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
	a := &apiCache{now: time.Now, build: flow.NewAPIClient}
	conf := &netconf.Config{Kubeconfig: kc, APITimeout: 5 * time.Second}
	get := func() flow.API {
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

// idleCounter is an API client that counts CloseIdleConnections.
type idleCounter struct {
	flow.API
	closed int
}

func (c *idleCounter) CloseIdleConnections() { c.closed++ }

// TestAPICacheBounded: a caller that sends a new apiTimeout with every call
// does not grow the cache past maxAPIClients; the least recently used
// client goes, its idle connections closed.
func TestAPICacheBounded(t *testing.T) {
	now := time.Unix(1000, 0)
	var built []*idleCounter
	a := &apiCache{now: func() time.Time { return now }, build: func(*netconf.Config) (flow.API, error) {
		c := &idleCounter{}
		built = append(built, c)
		return c, nil
	}}
	kept := &netconf.Config{APITimeout: time.Hour}
	for i := 1; i <= 100; i++ {
		now = now.Add(time.Millisecond)
		if _, err := a.get(&netconf.Config{APITimeout: time.Duration(i) * time.Second}); err != nil {
			t.Fatal(err)
		}
		if _, err := a.get(kept); err != nil { // in use all along
			t.Fatal(err)
		}
	}
	if len(a.clients) > maxAPIClients {
		t.Errorf("%d clients cached after 100 timeouts, want at most %d", len(a.clients), maxAPIClients)
	}
	if _, ok := a.clients[apiKey{timeout: time.Hour}]; !ok {
		t.Error("the client used by every other call was evicted")
	}
	closed := 0
	for _, c := range built {
		closed += c.closed
	}
	if want := len(built) - len(a.clients); closed != want {
		t.Errorf("%d evicted clients had their idle connections closed, want %d", closed, want)
	}
}

// TestDaemonProcsRule: one P for every cpusPerP of Go's default, rounded up.
func TestDaemonProcsRule(t *testing.T) {
	for def, want := range map[int]int{1: 1, 2: 1, 8: 1, 9: 2, 16: 2, 17: 3, 64: 8, 96: 12} {
		if got := daemonProcs(def); got != want {
			t.Errorf("daemonProcs(%d) = %d, want %d", def, got, want)
		}
	}
}
