package delegate

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"

	"github.com/manifold-cni/manifold/netconf"
	"github.com/manifold-cni/manifold/scratch"
)

// Confirm is asked about every attachment but the first, with the attachment
// as recorded. A replacement is in the record on disk before its delegate
// runs, and it is what runs.
func TestAddRecordsConfirmedReplacement(t *testing.T) {
	f := &fakeCNI{}
	r := newRunner(t, f)
	var asked []string
	r.Confirm = func(_ context.Context, i int, recorded *netconf.Attachment) (*netconf.Attachment, error) {
		asked = append(asked, recorded.Network+"@"+recorded.IfName)
		if i == 1 {
			repl := att("b2", recorded.IfName)
			return &repl, nil
		}
		return nil, nil
	}
	f.onAdd = func(l *libcni.NetworkConfigList, _ *libcni.RuntimeConf) {
		if l.Name != "b2" {
			return
		}
		rec, err := r.Store.Load("c1")
		if err != nil || rec == nil || rec.Attachments[1].Network != "b2" {
			t.Errorf("when b2's delegate runs, the record holds %+v (%v), want b2 at position 1", rec, err)
		}
	}
	if _, err := r.Add(context.Background(), record("c1")); err != nil {
		t.Fatal(err)
	}
	if want := []string{"b@net1", "c@net2"}; !slices.Equal(asked, want) {
		t.Errorf("Confirm asked about %v, want %v", asked, want)
	}
	if want := "ADD a eth0,ADD b2 net1,ADD c net2"; strings.Join(f.calls, ",") != want {
		t.Errorf("calls %s, want %s", strings.Join(f.calls, ","), want)
	}
	rec, err := r.Store.Load("c1")
	if err != nil || rec == nil || rec.Attachments[1].Network != "b2" {
		t.Errorf("record after ADD: %+v (%v), want b2 at position 1", rec, err)
	}
}

// An error from Confirm fails the ADD with that error: the attachments before
// the refused one are undone in reverse order, the refused one is not
// attempted, and no record or lock file is left.
func TestAddConfirmErrorUndoes(t *testing.T) {
	f := &fakeCNI{}
	r := newRunner(t, f)
	refused := errors.New("the NAD is gone")
	r.Confirm = func(_ context.Context, i int, _ *netconf.Attachment) (*netconf.Attachment, error) {
		if i == 2 {
			return nil, refused
		}
		return nil, nil
	}
	_, err := r.Add(context.Background(), record("c1"))
	if !errors.Is(err, refused) {
		t.Fatalf("Add: %v, want Confirm's error", err)
	}
	if want := "ADD a eth0,ADD b net1,DEL b net1,DEL a eth0"; strings.Join(f.calls, ",") != want {
		t.Errorf("calls %s, want %s", strings.Join(f.calls, ","), want)
	}
	if rec, _ := r.Store.Load("c1"); rec != nil {
		t.Errorf("record survived a refused ADD: %+v", rec)
	}
	if _, err := os.Stat(filepath.Join(r.Store.Dir, "locks", "c1")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("lock file after a refused ADD: %v", err)
	}
}

// A replacement with another plugin is planned again for the early starts: the
// process started for the recorded plugin is killed unused, and the new
// plugin, not the old one, gets the attachment's config.
func TestConfirmReplansEarlyStarts(t *testing.T) {
	dir := t.TempDir()
	scriptPlugin(t, dir, "p", "", "")
	scriptPlugin(t, dir, "q", "", "")
	r, e := scriptRunner(t, dir)
	r.Confirm = func(_ context.Context, i int, recorded *netconf.Attachment) (*netconf.Attachment, error) {
		if i != 1 {
			return nil, nil
		}
		repl := scriptAtt("b", recorded.IfName, "q")
		return &repl, nil
	}
	rec := &scratch.Record{ContainerID: "c1", NetNS: "/var/run/netns/none",
		Attachments: []netconf.Attachment{scriptAtt("a", "eth0", "p"), scriptAtt("b", "net1", "p"), scriptAtt("c", "net2", "p")}}
	if _, err := r.Add(context.Background(), rec); err != nil {
		t.Fatal(err)
	}
	got, ok := stdinOf(t, dir, "ADD", "net1")
	if !ok || !strings.Contains(got, `"type":"q"`) {
		t.Errorf("net1's plugin read %q, want the replacement's config", got)
	}
	if s := e.Stats(); s.Used != 3 || s.Started != s.Used+s.Discarded {
		t.Errorf("stats %+v, want 3 used and every other start discarded", s)
	}
	if kids := children(t); kids != "" {
		t.Errorf("processes left after ADD: %s", kids)
	}
}
