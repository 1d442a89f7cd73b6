package multus

import (
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"testing"
)

func names(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(dir, p)
			out = append(out, rel)
		}
		return nil
	})
	sort.Strings(out)
	return out
}

func TestRemove(t *testing.T) {
	dir := t.TempDir()
	copyFixture(t, "kubernetes-nads", nadsID, "gone", dir)
	copyFixture(t, "static-delegates", staticID, "kept", dir)
	// Named as if for "gone" but, by its content, another container's entry.
	writeCache(t, dir, "x-gone-y", "net", "eth0", flannelConf, nil, nil)
	// A torn entry for "gone": it goes too.
	os.WriteFile(filepath.Join(dir, "results", "torn-gone-net3"), []byte(`{"kind":"cniCa`), 0o600)

	if err := Remove(dir, "gone"); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"kept",
		"results/cluster-kept-eth0", "results/legacy-kept-net2", "results/net-x-gone-y-eth0", "results/storage-kept-net1",
	}
	if got := names(t, dir); !reflect.DeepEqual(got, want) {
		t.Errorf("left after Remove: %v\nwant %v", got, want)
	}
	if rec, err := Load(dir, "gone"); rec != nil || err != nil {
		t.Errorf("after Remove, Load = %v, %v", rec, err)
	}
	if err := Remove(dir, "gone"); err != nil {
		t.Errorf("second Remove: %v", err)
	}
	if err := Remove(filepath.Join(dir, "absent"), "gone"); err != nil {
		t.Errorf("Remove in a missing dir: %v", err)
	}
}

func TestList(t *testing.T) {
	dir := t.TempDir()
	copyFixture(t, "kubernetes-nads", nadsID, "pod-b", dir)
	copyFixture(t, "static-delegates", staticID, "pod-a", dir)
	// Cache entries left without a record: Multus removed it after a failed DEL.
	writeCache(t, dir, "pod-c", "my-net", "eth0", flannelConf, nil, nil)
	for _, junk := range []string{".tmp-pod-d", "pod-e.tmp", "pod-f.lock", ".hidden"} {
		os.WriteFile(filepath.Join(dir, junk), []byte("[]"), 0o600)
	}
	os.Mkdir(filepath.Join(dir, "locks"), 0o700)
	os.Mkdir(filepath.Join(dir, "a-dir"), 0o700)
	os.WriteFile(filepath.Join(dir, "results", "garbage"), []byte("not json"), 0o600)

	got, err := List(dir)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"pod-a", "pod-b", "pod-c"}; !reflect.DeepEqual(got, want) {
		t.Errorf("List = %v, want %v", got, want)
	}
	if got, err := List(filepath.Join(dir, "absent")); got != nil || err != nil {
		t.Errorf("List of a missing dir = %v, %v", got, err)
	}
	rec, err := Load(dir, "pod-c")
	if err != nil || rec == nil || len(rec.Attachments) != 1 || rec.Attachments[0].Network != "cbr0" {
		t.Errorf("a listed cache-only container must load: %+v, %v", rec, err)
	}
}
