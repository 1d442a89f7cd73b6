package delegate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"

	"github.com/manifold-cni/manifold/netconf"
	"github.com/manifold-cni/manifold/scratch"
)

// fakeCNI records calls and fails the ones it is told to. Unit tests only: the
// privileged tests run the real plugins.
type fakeCNI struct {
	libcni.CNI // unused methods panic
	// mu guards calls: with concurrentAttachments, ADDs run at once.
	mu       sync.Mutex
	calls    []string
	failAdd  map[string]error
	failDel  map[string]error
	cached   []*libcni.NetworkAttachment
	cacheErr error
	// onAdd, when set, runs at the start of each ADD.
	onAdd func(l *libcni.NetworkConfigList, rt *libcni.RuntimeConf)
}

func (f *fakeCNI) AddNetworkList(_ context.Context, l *libcni.NetworkConfigList, rt *libcni.RuntimeConf) (types.Result, error) {
	if f.onAdd != nil {
		f.onAdd(l, rt)
	}
	f.mu.Lock()
	f.calls = append(f.calls, "ADD "+l.Name+" "+rt.IfName)
	f.mu.Unlock()
	if err := f.failAdd[l.Name]; err != nil {
		return nil, err
	}
	return &types100.Result{CNIVersion: "1.0.0"}, nil
}

func (f *fakeCNI) DelNetworkList(_ context.Context, l *libcni.NetworkConfigList, rt *libcni.RuntimeConf) error {
	f.calls = append(f.calls, "DEL "+l.Name+" "+rt.IfName)
	return f.failDel[l.Name]
}

func (f *fakeCNI) GetCachedAttachments(string) ([]*libcni.NetworkAttachment, error) {
	return f.cached, f.cacheErr
}

func att(name, ifname string) netconf.Attachment {
	return netconf.Attachment{Network: name, IfName: ifname,
		Config: []byte(fmt.Sprintf(`{"cniVersion":"1.0.0","name":%q,"plugins":[{"type":"x"}]}`, name))}
}

func newRunner(t *testing.T, f *fakeCNI) *Runner {
	return &Runner{CNI: f, Store: &scratch.Store{Dir: t.TempDir()}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
}

func record(id string) *scratch.Record {
	return &scratch.Record{ContainerID: id, Attachments: []netconf.Attachment{att("a", "eth0"), att("b", "net1"), att("c", "net2")}}
}

func TestAddRollsBackInReverse(t *testing.T) {
	f := &fakeCNI{failAdd: map[string]error{"c": types.NewError(42, "boom", "")}}
	r := newRunner(t, f)
	_, err := r.Add(context.Background(), record("c1"))
	var te *types.Error
	if !errors.As(err, &te) || te.Code != 42 || !strings.Contains(te.Msg, "network c") || !strings.Contains(te.Msg, "net2") || !strings.Contains(te.Msg, "boom") {
		t.Fatalf("Add error = %v, want code 42 naming network c, net2 and the cause", err)
	}
	want := "ADD a eth0,ADD b net1,ADD c net2,DEL c net2,DEL b net1,DEL a eth0"
	if got := strings.Join(f.calls, ","); got != want {
		t.Errorf("calls = %s\nwant    %s", got, want)
	}
	if rec, _ := r.Store.Load("c1"); rec != nil {
		t.Errorf("record survived a failed ADD")
	}
}

func TestAddKeepsRecordForDel(t *testing.T) {
	f := &fakeCNI{}
	r := newRunner(t, f)
	res, err := r.Add(context.Background(), record("c1"))
	if err != nil || len(res) != 3 {
		t.Fatalf("Add = %v, %v", res, err)
	}
	rec, err := r.Store.Load("c1")
	if err != nil || rec == nil || len(rec.Attachments) != 3 {
		t.Fatalf("record after ADD = %+v, %v", rec, err)
	}
	f.calls = nil
	if err := r.Del(context.Background(), DelRequest{ContainerID: "c1"}); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(f.calls, ","); got != "DEL c net2,DEL b net1,DEL a eth0" {
		t.Errorf("DEL calls = %s", got)
	}
	if rec, _ := r.Store.Load("c1"); rec != nil {
		t.Errorf("record survived DEL")
	}
	f.calls = nil
	if err := r.Del(context.Background(), DelRequest{ContainerID: "c1"}); err != nil || len(f.calls) != 0 {
		t.Errorf("second DEL = %v with calls %v, want success and no calls", err, f.calls)
	}
}

func TestDelContinuesPastFailures(t *testing.T) {
	for _, retry := range []bool{false, true} {
		t.Run(fmt.Sprintf("retryDeleteOnError=%v", retry), func(t *testing.T) {
			f := &fakeCNI{failDel: map[string]error{"b": types.NewError(5, "b broke", ""), "c": errors.New("c broke")}}
			r := newRunner(t, f)
			r.RetryDeleteOnError = retry
			if err := r.Store.Save(record("c1")); err != nil {
				t.Fatal(err)
			}
			err := r.Del(context.Background(), DelRequest{ContainerID: "c1"})
			if err == nil || !strings.Contains(err.Error(), "b broke") || !strings.Contains(err.Error(), "c broke") {
				t.Fatalf("Del error = %v, want both failures joined", err)
			}
			if got := strings.Join(f.calls, ","); got != "DEL c net2,DEL b net1,DEL a eth0" {
				t.Errorf("calls = %s, want every delegate deleted", got)
			}
			rec, _ := r.Store.Load("c1")
			if (rec != nil) != retry {
				t.Errorf("record kept = %v, want %v", rec != nil, retry)
			}
		})
	}
}

func TestDelFallsBackToCache(t *testing.T) {
	f := &fakeCNI{cached: []*libcni.NetworkAttachment{
		{ContainerID: "c1", Network: "a", IfName: "eth0", Config: att("a", "eth0").Config},
		{ContainerID: "c1", Network: "b", IfName: "net1", Config: att("b", "net1").Config},
	}}
	r := newRunner(t, f)
	// A torn record: DEL must not trust it, and must still delete what the cache knows.
	if err := r.Store.Save(record("c1")); err != nil {
		t.Fatal(err)
	}
	b := []byte(`{"version":1,"sha256":"0`)
	if err := os.WriteFile(r.Store.Path("c1"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := r.Del(context.Background(), DelRequest{ContainerID: "c1", IfName: "eth0"}); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(f.calls, ","); got != "DEL b net1,DEL a eth0" {
		t.Errorf("calls = %s, want the cached attachments, default network last", got)
	}
}

func TestDefaultRouteConflictsAreRefused(t *testing.T) {
	a, b := att("a", "eth0"), att("b", "net1")
	a.DefaultRoute = []string{"10.0.0.1"}
	b.DefaultRoute = []string{"10.1.0.1"}
	err := CheckDefaultRoutes([]netconf.Attachment{a, b})
	if netconf.Code(err) != types.ErrInvalidNetworkConfig || !strings.Contains(err.Error(), "10.1.0.1") {
		t.Errorf("two IPv4 gateways: %v, want code 7 naming the second", err)
	}
	b.DefaultRoute = []string{"fd00::1"}
	if err := CheckDefaultRoutes([]netconf.Attachment{a, b}); err != nil {
		t.Errorf("one gateway per family: %v", err)
	}
	b.DefaultRoute = []string{"not-an-ip"}
	if err := CheckDefaultRoutes([]netconf.Attachment{a, b}); netconf.Code(err) != types.ErrInvalidNetworkConfig {
		t.Errorf("bad gateway: %v, want code 7", err)
	}
}

// TestAddRefusesOversizedRecord: a pod whose networks' configs make a record
// larger than scratch.MaxRecordBytes is refused with code 7 before any delegate
// runs, instead of being attached under a record that could not be read back.
func TestAddRefusesOversizedRecord(t *testing.T) {
	f := &fakeCNI{}
	r := newRunner(t, f)
	rec := record("big")
	big := fmt.Sprintf(`{"cniVersion":"1.0.0","name":"b","plugins":[{"type":"x","pad":%q}]}`, strings.Repeat("p", scratch.MaxRecordBytes))
	rec.Attachments[1].Config = []byte(big)
	_, err := r.Add(context.Background(), rec)
	var te *types.Error
	if !errors.As(err, &te) || te.Code != 7 || !strings.Contains(te.Msg, "big") || !strings.Contains(te.Msg, "too large") {
		t.Fatalf("Add of an oversized record = %v, want code 7 naming the container and the size", err)
	}
	if len(f.calls) != 0 {
		t.Errorf("delegates ran for a record that was not saved: %v", f.calls)
	}
}

// TestDelFailsWhenTheCacheCannotBeRead: the libcni cache may hold attachments
// that the record does not; when it cannot be read, DEL deletes what the
// record knows and then fails, naming the cache, so that the runtime tries
// again, rather than answering success with attachments unaccounted for.
func TestDelFailsWhenTheCacheCannotBeRead(t *testing.T) {
	f := &fakeCNI{cacheErr: errors.New("read results: input/output error")}
	r := newRunner(t, f)
	if err := r.Store.Save(record("c1")); err != nil {
		t.Fatal(err)
	}
	err := r.Del(context.Background(), DelRequest{ContainerID: "c1"})
	if err == nil || !strings.Contains(err.Error(), "libcni cache") || !strings.Contains(err.Error(), "c1") {
		t.Fatalf("DEL = %v, want an error naming the cache and the container", err)
	}
	if got := strings.Join(f.calls, ","); got != "DEL c net2,DEL b net1,DEL a eth0" {
		t.Errorf("DEL calls = %s: what the record knows is still deleted", got)
	}
	f.cacheErr, f.calls = nil, nil
	if err := r.Del(context.Background(), DelRequest{ContainerID: "c1"}); err != nil {
		t.Errorf("the retry, with the cache readable again: %v", err)
	}
}

// TestDelReleasesWhatWasDeleted: Released hears, once per DEL, of the
// recorded attachments whose delegates' DEL succeeded, and of no other.
func TestDelReleasesWhatWasDeleted(t *testing.T) {
	f := &fakeCNI{failDel: map[string]error{"b": errors.New("busy")}}
	r := newRunner(t, f)
	if err := r.Store.Save(record("c1")); err != nil {
		t.Fatal(err)
	}
	var heard [][]string
	r.Released = func(_ context.Context, rec *scratch.Record, atts []netconf.Attachment) {
		var names []string
		for _, a := range atts {
			names = append(names, a.Network)
		}
		heard = append(heard, names)
		if rec.ContainerID != "c1" {
			t.Errorf("released for container %s", rec.ContainerID)
		}
	}
	if err := r.Del(context.Background(), DelRequest{ContainerID: "c1"}); err == nil {
		t.Fatal("DEL with a failing delegate succeeded")
	}
	if len(heard) != 1 || strings.Join(heard[0], ",") != "c,a" {
		t.Errorf("released %v, want once, c and a (b's DEL failed)", heard)
	}
}

// TestDelSweepsLocksLeftByKilledCalls: a call killed while it held a
// container's lock (its process gone: the flock dropped, the file left) leaves
// a lock file with no record; when the runtime forgets that container, no DEL
// names it again. The next DEL that succeeds, of any container, removes it,
// and leaves alone the lock of a container with a record and the one a call
// holds. Before, the file stayed for good (the cluster tier found one after a
// node reboot).
func TestDelSweepsLocksLeftByKilledCalls(t *testing.T) {
	r := newRunner(t, &fakeCNI{})
	ctx := context.Background()
	// "killed": taken, then the flock dropped and the file kept, as when
	// the process holding it dies.
	killed, err := r.Store.Lock(ctx, "killed")
	if err != nil {
		t.Fatal(err)
	}
	killed.Unlock(false)
	// "running": a pod with a record, not in a call.
	if _, err := r.Add(ctx, record("running")); err != nil {
		t.Fatal(err)
	}
	// "busy": a call in progress before its record is written.
	busy, err := r.Store.Lock(ctx, "busy")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Unlock(true)
	if err := r.Store.Save(record("gone")); err != nil {
		t.Fatal(err)
	}
	if err := r.Del(ctx, DelRequest{ContainerID: "gone"}); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(r.Store.Dir + "/locks")
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, e := range entries {
		left = append(left, e.Name())
	}
	if got := strings.Join(left, ","); got != "busy,running" {
		t.Errorf("lock files after DEL: %s, want busy,running", got)
	}
}
