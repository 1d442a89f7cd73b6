package flow

import (
	"context"
	"errors"
	"fmt"
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
	r.start("c1", nil, func(<-chan struct{}) { <-release; note("first") })
	r.start("c1", nil, func(<-chan struct{}) { note("second") })
	r.start("c2", answered, func(<-chan struct{}) { note("other") })
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
// patch is still on its way, and a DEL of the same container deletes its
// delegates meanwhile but answers only once the patch is done, so the status
// never lands after the DEL. (Before change 15, DEL waited for the patch
// before it ran any delegate.)
func TestDaemonAnswersBeforeStatus(t *testing.T) {
	plugins := testenv.Plugins(t)
	api := &blockingAPI{
		fakeAPI: &fakeAPI{pod: &k8sclient.Pod{}},
		release: make(chan struct{}),
		patched: make(chan struct{}),
	}
	api.pod.Namespace, api.pod.Name, api.pod.UID = "default", "p1", "u1"
	p := NewShared("", nil, nil)
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
	// noop notes the last command it ran in its debug file.
	ran := false
	for deadline := time.Now().Add(10 * time.Second); !ran && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		d, err := debug.ReadDebug(dbg)
		ran = err == nil && d.Command == "DEL"
	}
	if !ran {
		t.Error("DEL did not delete the delegate while the ADD's status patch was on its way")
	}
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

// TestStatusWriteRetries: in the daemon, a network-status patch that the API
// server could not take (k8sclient.ErrUnavailable: a timeout, 5xx, 429) is
// tried again, so a pod started in a storm on a busy control plane still gets
// its status; an error that says no is not retried; the plugin binary tries
// once; and a call of the same container that waits for the write ends the
// retries. Before, the first failure was logged and the pod never got its
// network-status (seen in the cluster tier's storm).
func TestStatusWriteRetries(t *testing.T) {
	defer func(old []time.Duration) { statusRetries = old }(statusRetries)
	statusRetries = []time.Duration{10 * time.Millisecond, 10 * time.Millisecond}
	unavailable := fmt.Errorf("PATCH pods/p1/status: %w: HTTP 504", k8sclient.ErrUnavailable)
	for _, tc := range []struct {
		name      string
		daemon    bool
		failures  []error
		wantTries int
		wantErr   bool
	}{
		{"daemon, unavailable once", true, []error{unavailable}, 2, false},
		{"daemon, unavailable every time", true, []error{unavailable, unavailable, unavailable}, 3, true},
		{"daemon, refused", true, []error{errors.New("HTTP 422: invalid")}, 1, true},
		{"binary, unavailable once", false, []error{unavailable}, 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tries := 0
			write := func() error {
				tries++
				if tries <= len(tc.failures) {
					return tc.failures[tries-1]
				}
				return nil
			}
			var stop chan struct{}
			if tc.daemon {
				stop = make(chan struct{})
			}
			err := withRetries(context.Background(), stop, write)
			if tries != tc.wantTries || (err != nil) != tc.wantErr {
				t.Errorf("tries = %d, error = %v; want %d tries and an error: %v", tries, err, tc.wantTries, tc.wantErr)
			}
		})
	}
	t.Run("a waiting call ends the retries", func(t *testing.T) {
		statusRetries = []time.Duration{time.Hour}
		var r reports
		tries := 0
		r.start("c1", nil, func(stop <-chan struct{}) {
			_ = withRetries(context.Background(), stop, func() error { tries++; return unavailable })
		})
		if !r.wait("c1", 10*time.Second) {
			t.Fatal("the write still ran 10s after a call of its container waited for it (its retry pause is an hour)")
		}
		if tries != 1 {
			t.Errorf("tries = %d, want 1", tries)
		}
	})
}
