package scratch

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A Save killed mid-write leaves its temp file under the one name of its
// container; RemoveTemp removes that one only, never that of a container
// whose ID the first one's is a prefix of.
func TestRemoveTempIsTheContainersOwn(t *testing.T) {
	s := &Store{Dir: t.TempDir()}
	if err := s.Save(sampleRecord("abc")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(s.TempPath("abc")); !os.IsNotExist(err) {
		t.Fatalf("a Save that returned left its temp file: %v", err)
	}
	// As a writer killed between its write and its rename leaves them.
	for _, name := range []string{".new-abc", ".new-abc-1", ".new-ab"} {
		if err := os.WriteFile(filepath.Join(s.Dir, name), []byte(`{"version":1,"sum`), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// The next Save writes over a leftover of its own container.
	if err := s.Save(sampleRecord("abc")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(s.TempPath("abc"), []byte("torn"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.RemoveTemp("abc"); err != nil {
		t.Fatal(err)
	}
	if err := s.RemoveTemp("abc"); err != nil {
		t.Fatalf("a second RemoveTemp: %v", err)
	}
	left, _ := filepath.Glob(filepath.Join(s.Dir, ".new-*"))
	for i := range left {
		left[i] = filepath.Base(left[i])
	}
	if got := strings.Join(left, ","); got != ".new-ab,.new-abc-1" {
		t.Errorf("temp files after RemoveTemp(abc): %s, want .new-ab,.new-abc-1", got)
	}
	if err := s.RemoveTemp("../x"); err == nil {
		t.Error("RemoveTemp took an invalid container ID")
	}
}

func TestLeftovers(t *testing.T) {
	s := &Store{Dir: t.TempDir()}
	for _, name := range []string{".new-a", ".groups-a", ".groups-b", ".new-c", ".tmp-d-123", "e", ".groups-..", ".new-"} {
		if err := os.WriteFile(filepath.Join(s.Dir, name), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	ids, err := s.Leftovers()
	if err != nil || strings.Join(ids, ",") != "a,b,c" {
		t.Fatalf("Leftovers = %v, %v; want a,b,c", ids, err)
	}
	if ids, err := (&Store{Dir: filepath.Join(s.Dir, "none")}).Leftovers(); ids != nil || err != nil {
		t.Errorf("Leftovers of a missing dir = %v, %v", ids, err)
	}
}

// The groups a call noted and did not see end are what Groups returns, after
// the call's lock is let go; a call whose groups all ended leaves no file.
func TestGroupLog(t *testing.T) {
	s := &Store{Dir: t.TempDir()}
	ctx := context.Background()
	if g, ok, err := s.Groups("c"); g != nil || ok || err != nil {
		t.Fatalf("Groups with no file = %v, %v, %v", g, ok, err)
	}
	l, err := s.Lock(ctx, "c")
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range []Group{{Pgid: 100, Start: 7, PidNS: 9}, {Pgid: 200, Start: 8, PidNS: 9}, {Pgid: 300, Start: 9, PidNS: 9}} {
		if err := l.Groups().Started(g); err != nil {
			t.Fatal(err)
		}
	}
	l.Groups().Ended(100)
	l.Groups().Ended(400) // never started here: nothing written
	// A process killed while it wrote: a line cut short.
	f, err := os.OpenFile(s.GroupsPath("c"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("+ 500 1")
	f.Close()
	l.Unlock(false)
	got, ok, err := s.Groups("c")
	if err != nil || !ok || len(got) != 2 || got[0] != (Group{Pgid: 200, Start: 8, PidNS: 9}) || got[1].Pgid != 300 {
		t.Fatalf("Groups after a call that left 200 and 300 = %v, %v, %v", got, ok, err)
	}

	// A call whose delegates all ended removes the file, and the notes of
	// the call before it go with it only once they were dealt with
	// (RemoveGroups): here, kept.
	l, err = s.Lock(ctx, "c")
	if err != nil {
		t.Fatal(err)
	}
	l.Groups().Keep()
	l.Groups().Started(Group{Pgid: 600, Start: 1, PidNS: 9})
	l.Groups().Ended(600)
	l.Unlock(false)
	if got, _, _ := s.Groups("c"); len(got) != 2 {
		t.Fatalf("Groups after a call that kept the file = %v", got)
	}
	if err := s.RemoveGroups("c"); err != nil {
		t.Fatal(err)
	}
	l, err = s.Lock(ctx, "c")
	if err != nil {
		t.Fatal(err)
	}
	l.Groups().Started(Group{Pgid: 700, Start: 1, PidNS: 9})
	l.Groups().Ended(700)
	l.Unlock(true)
	if _, err := os.Stat(s.GroupsPath("c")); !os.IsNotExist(err) {
		t.Errorf("a call whose delegates all ended left its notes: %v", err)
	}
	// A call that ran no delegate writes nothing.
	l, err = s.Lock(ctx, "d")
	if err != nil {
		t.Fatal(err)
	}
	l.Unlock(true)
	if _, err := os.Stat(s.GroupsPath("d")); !os.IsNotExist(err) {
		t.Errorf("a call with no delegate made a notes file: %v", err)
	}
}
