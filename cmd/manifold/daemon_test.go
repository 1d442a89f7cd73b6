package main

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/manifold-cni/manifold/flow"
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
