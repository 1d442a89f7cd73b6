package delegate

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/manifold-cni/manifold/netconf"
	"github.com/manifold-cni/manifold/scratch"
)

// attWith is an attachment whose one plugin has the given extra keys.
func attWith(name, ifname, keys string) netconf.Attachment {
	return netconf.Attachment{Network: name, IfName: ifname,
		Config: []byte(fmt.Sprintf(`{"cniVersion":"1.0.0","name":%q,"plugins":[{"type":"x"%s}]}`, name, keys))}
}

func TestWaves(t *testing.T) {
	routed := attWith("d", "net3", `,"ipam":{"type":"host-local","routes":[{"dst":"10.9.0.0/16"},{"dst":"0.0.0.0/0"}]}`)
	v6routed := attWith("d", "net3", `,"ipam":{"routes":[{"dst":"::/0"}]}`)
	annotated := att("c", "net2")
	annotated.DefaultRoute = []string{"10.1.1.1"}
	viaRuntime := att("c", "net2")
	viaRuntime.RuntimeConfig = map[string]any{"deviceID": "net1"}
	cases := []struct {
		name       string
		atts       []netconf.Attachment
		concurrent bool
		want       [][]int
	}{
		{"in order", []netconf.Attachment{att("a", "eth0"), att("b", "net1"), att("c", "net2")}, false, [][]int{{0}, {1}, {2}}},
		{"independent", []netconf.Attachment{att("a", "eth0"), att("b", "net1"), att("c", "net2"), att("d", "net3")}, true, [][]int{{0}, {1, 2, 3}}},
		{"default network only", []netconf.Attachment{att("a", "eth0")}, true, [][]int{{0}}},
		{"one extra", []netconf.Attachment{att("a", "eth0"), att("b", "net1")}, true, [][]int{{0}, {1}}},
		{"names another's interface", []netconf.Attachment{att("a", "eth0"), att("b", "net1"), attWith("c", "net2", `,"master":"net1"`), att("d", "net3"), att("e", "net4")}, true, [][]int{{0}, {1}, {2}, {3, 4}}},
		{"names a later one's interface", []netconf.Attachment{att("a", "eth0"), att("b", "net1"), attWith("c", "net2", `,"link":{"net4":true}`), att("d", "net3"), att("e", "net4")}, true, [][]int{{0}, {1}, {2}, {3, 4}}},
		{"names the default network's interface", []netconf.Attachment{att("a", "eth0"), attWith("b", "net1", `,"master":"eth0"`), att("c", "net2")}, true, [][]int{{0}, {1, 2}}},
		{"names its own interface", []netconf.Attachment{att("a", "eth0"), attWith("b", "net1", `,"tune":"net1"`), att("c", "net2")}, true, [][]int{{0}, {1, 2}}},
		{"default-route requested", []netconf.Attachment{att("a", "eth0"), att("b", "net1"), annotated, att("d", "net3")}, true, [][]int{{0}, {1}, {2}, {3}}},
		{"IPv4 default route in the config", []netconf.Attachment{att("a", "eth0"), att("b", "net1"), att("c", "net2"), routed, att("e", "net4"), att("f", "net5")}, true, [][]int{{0}, {1, 2}, {3}, {4, 5}}},
		{"IPv6 default route in the config", []netconf.Attachment{att("a", "eth0"), att("b", "net1"), att("c", "net2"), v6routed}, true, [][]int{{0}, {1, 2}, {3}}},
		{"names one in its runtime settings", []netconf.Attachment{att("a", "eth0"), att("b", "net1"), viaRuntime}, true, [][]int{{0}, {1}, {2}}},
		{"config that does not parse", []netconf.Attachment{att("a", "eth0"), att("b", "net1"), {Network: "c", IfName: "net2", Config: []byte("{")}, att("d", "net3")}, true, [][]int{{0}, {1}, {2}, {3}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := waves(c.atts, c.concurrent); !reflect.DeepEqual(got, c.want) {
				t.Errorf("waves = %v, want %v", got, c.want)
			}
		})
	}
}

// meetAll makes each ADD of the named networks wait until all of them have
// started, so that a test passes only when they run at the same time. In
// order, the first would wait for the others forever: it gives up after a
// bound and says so.
func meetAll(t *testing.T, f *fakeCNI, names ...string) {
	var wg sync.WaitGroup
	wg.Add(len(names))
	met := make(chan struct{})
	go func() { wg.Wait(); close(met) }()
	f.onAdd = func(l *libcni.NetworkConfigList, _ *libcni.RuntimeConf) {
		if !slices.Contains(names, l.Name) {
			return
		}
		wg.Done()
		select {
		case <-met:
		case <-time.After(10 * time.Second):
			t.Errorf("ADD of %s: the other networks of its wave never started alongside it", l.Name)
		}
	}
}

func fourAttachments(id string) *scratch.Record {
	return &scratch.Record{ContainerID: id, Attachments: []netconf.Attachment{att("a", "eth0"), att("b", "net1"), att("c", "net2"), att("d", "net3")}}
}

// The extra networks of a wave run at once, after the default network; the
// results, the record and what DEL does are those of an ADD in order.
func TestAddConcurrentWave(t *testing.T) {
	inOrder := &fakeCNI{}
	seq := newRunner(t, inOrder)
	seqRes, err := seq.Add(context.Background(), fourAttachments("c1"))
	if err != nil {
		t.Fatal(err)
	}
	seqRec, _ := seq.Store.Load("c1")

	f := &fakeCNI{}
	meetAll(t, f, "b", "c", "d")
	r := newRunner(t, f)
	r.Concurrent = true
	res, err := r.Add(context.Background(), fourAttachments("c1"))
	if err != nil {
		t.Fatal(err)
	}
	if f.calls[0] != "ADD a eth0" {
		t.Errorf("first call %s, want the default network alone first", f.calls[0])
	}
	if got := slices.Sorted(slices.Values(f.calls[1:])); !reflect.DeepEqual(got, []string{"ADD b net1", "ADD c net2", "ADD d net3"}) {
		t.Errorf("wave calls %v", got)
	}
	if len(res) != len(seqRes) || slices.Contains(res, nil) {
		t.Errorf("results %v, want one per attachment as in order (%d)", res, len(seqRes))
	}
	rec, _ := r.Store.Load("c1")
	if !reflect.DeepEqual(rec, seqRec) {
		t.Errorf("record %+v\nin order %+v", rec, seqRec)
	}
	f.calls = nil
	if err := r.Del(context.Background(), DelRequest{ContainerID: "c1"}); err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(f.calls, ","), "DEL d net3,DEL c net2,DEL b net1,DEL a eth0"; got != want {
		t.Errorf("DEL calls %s, want %s", got, want)
	}
}

// A failed delegate in a wave: the others of the wave are waited for, and
// everything attempted, the wave's successes included, is deleted in reverse
// order; the error is that of the first failed network in attachment order,
// its code kept, and the record is gone.
func TestAddConcurrentRollsBackEverythingAttempted(t *testing.T) {
	for _, c := range []struct {
		name    string
		fail    map[string]error
		wantErr string
	}{
		{"one fails", map[string]error{"c": types.NewError(42, "c broke", "")}, "c broke"},
		{"two fail", map[string]error{"d": types.NewError(43, "d broke", ""), "b": types.NewError(42, "b broke", "")}, "b broke"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := &fakeCNI{failAdd: c.fail}
			meetAll(t, f, "b", "c", "d")
			r := newRunner(t, f)
			r.Concurrent = true
			_, err := r.Add(context.Background(), fourAttachments("c1"))
			var te *types.Error
			if !errors.As(err, &te) || te.Code != 42 || !strings.Contains(te.Msg, c.wantErr) {
				t.Fatalf("Add error = %v, want code 42 with %q", err, c.wantErr)
			}
			if got, want := strings.Join(f.calls[4:], ","), "DEL d net3,DEL c net2,DEL b net1,DEL a eth0"; got != want {
				t.Errorf("rollback %s, want %s", got, want)
			}
			if rec, _ := r.Store.Load("c1"); rec != nil {
				t.Error("record survived a failed ADD")
			}
		})
	}
}

// A wave whose confirmation is refused attempts none of it: only what ran
// before is undone.
func TestAddConcurrentConfirmRefused(t *testing.T) {
	f := &fakeCNI{}
	r := newRunner(t, f)
	r.Concurrent = true
	r.Confirm = func(_ context.Context, i int, _ *netconf.Attachment) (*netconf.Attachment, error) {
		if i == 2 {
			return nil, netconf.Invalid("NAD c is gone")
		}
		return nil, nil
	}
	_, err := r.Add(context.Background(), fourAttachments("c1"))
	if err == nil || !strings.Contains(err.Error(), "NAD c is gone") {
		t.Fatalf("Add error = %v", err)
	}
	if got, want := strings.Join(f.calls, ","), "ADD a eth0,DEL a eth0"; got != want {
		t.Errorf("calls %s, want %s", got, want)
	}
}

// gateAfterStdin is a script plugin's "after" part that holds an ADD of the
// named interfaces, once it has read its config (so an early start does not
// count), until each of them has read its own: a wave run in order never gets
// there, and after a did-not-hang bound its first ADD fails saying so.
func gateAfterStdin(dir string, ifnames ...string) string {
	files := ""
	for _, n := range ifnames {
		files += " " + filepath.Join(dir, "inside-"+n)
	}
	return `case " ` + strings.Join(ifnames, " ") + ` " in *" $CNI_IFNAME "*)
  if [ "$CNI_COMMAND" = ADD ]; then
    : > "` + dir + `/inside-$CNI_IFNAME"
    n=0
    for f in` + files + `; do
      while [ ! -e "$f" ]; do
        n=$((n+1))
        if [ $n -gt 1500 ]; then echo '{"code":11,"msg":"'"$CNI_IFNAME"' ran alone: '"$f"' never appeared"}'; exit 1; fi
        sleep 0.01
      done
    done
  fi ;;
esac`
}

// With early starts, the process started for the wave's first network while
// the default network ran serves it, the others start at their call, and
// nothing is left waiting or killed unused. The wave's networks run at once:
// each one's first plugin holds its ADD until all three have read their
// configs.
func TestRunnerWaveUsesEarlyStart(t *testing.T) {
	dir := t.TempDir()
	gate := gateAfterStdin(dir, "net1", "net2", "net3")
	scriptPlugin(t, dir, "p", "", gate)
	scriptPlugin(t, dir, "q", "", gate)
	r, e := scriptRunner(t, dir)
	r.Concurrent = true
	rec := &scratch.Record{ContainerID: "c1", NetNS: "/var/run/netns/none",
		Attachments: []netconf.Attachment{scriptAtt("a", "eth0", "p"), scriptAtt("b", "net1", "q", "p"), scriptAtt("c", "net2", "p"), scriptAtt("d", "net3", "q")}}
	if _, err := r.Add(context.Background(), rec); err != nil {
		t.Fatal(err)
	}
	for _, ifname := range []string{"eth0", "net1", "net2", "net3"} {
		if got, ok := stdinOf(t, dir, "ADD", ifname); !ok || got == "" {
			t.Errorf("%s's plugin read %q (started: %v), want its config", ifname, got, ok)
		}
	}
	if s := e.Stats(); s != (PrestartStats{Started: 2, Used: 2}) {
		t.Errorf("stats %+v, want eth0's and net1's first plugin started early and used, nothing discarded", s)
	}
	if kids := children(t); kids != "" {
		t.Errorf("processes left after ADD: %s", kids)
	}
}

// With real processes and early starts: a delegate of a wave that fails
// after the others succeeded fails the ADD, everything is undone, and no
// process is left.
func TestRunnerWaveFailureUndoes(t *testing.T) {
	dir := t.TempDir()
	scriptPlugin(t, dir, "p", "", "")
	// It fails its ADD once net1's plugin has read its config.
	script := "#!/bin/sh\ncat >/dev/null\nif [ \"$CNI_COMMAND\" = ADD ]; then while [ ! -s " + filepath.Join(dir, "stdin-ADD-net1") +
		" ]; do sleep 0.01; done; echo '{\"code\":42,\"msg\":\"late\"}'; exit 1; fi\n"
	if err := os.WriteFile(filepath.Join(dir, "late"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	r, _ := scriptRunner(t, dir)
	r.Concurrent = true
	rec := &scratch.Record{ContainerID: "c1", NetNS: "/var/run/netns/none",
		Attachments: []netconf.Attachment{scriptAtt("a", "eth0", "p"), scriptAtt("b", "net1", "p"), scriptAtt("c", "net2", "late")}}
	_, err := r.Add(context.Background(), rec)
	var te *types.Error
	if !errors.As(err, &te) || te.Code != 42 || !strings.Contains(te.Msg, "net2") {
		t.Fatalf("Add = %v, want net2's failure, code 42", err)
	}
	for _, ifname := range []string{"eth0", "net1"} {
		if got, ok := stdinOf(t, dir, "DEL", ifname); !ok || got == "" {
			t.Errorf("%s was not rolled back", ifname)
		}
	}
	if rec, _ := r.Store.Load("c1"); rec != nil {
		t.Error("record survived a failed ADD")
	}
	if kids := children(t); kids != "" {
		t.Errorf("processes left after the failed ADD: %s", kids)
	}
}

// TestWavesAuxiliaryLast: with concurrentAttachments, the auxiliary chain
// still runs alone, after every other attachment, as Multus runs it.
func TestWavesAuxiliaryLast(t *testing.T) {
	aux := attWith("aux", "net3", "")
	aux.Auxiliary = true
	got := waves([]netconf.Attachment{att("a", "eth0"), att("b", "net1"), att("c", "net2"), aux}, true)
	if want := [][]int{{0}, {1, 2}, {3}}; !reflect.DeepEqual(got, want) {
		t.Errorf("waves %v, want %v", got, want)
	}
}
