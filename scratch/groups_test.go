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
	for _, name := range []string{".new-a", ".new-c", ".tmp-d-123", "e", ".new-"} {
		if err := os.WriteFile(filepath.Join(s.Dir, name), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// Lock files: b's holds notes of a killed call, f's none.
	for id, notes := range map[string]string{"b": "+ 100 7 9\n", "f": ""} {
		l, err := s.Lock(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		l.Unlock(false)
		if err := os.WriteFile(s.LockPath(id), []byte(notes), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	ids, err := s.Leftovers()
	if err != nil || strings.Join(ids, ",") != "a,b,c" {
		t.Fatalf("Leftovers = %v, %v; want a,b,c", ids, err)
	}
	// The lock sweep leaves b's lock file: its notes are DEL's to act on.
	if n := s.SweepLocks(); n != 1 {
		t.Errorf("SweepLocks removed %d lock files, want 1 (f's)", n)
	}
	if _, err := os.Stat(s.LockPath("b")); err != nil {
		t.Errorf("SweepLocks removed a lock file that holds notes: %v", err)
	}
	if ids, err := (&Store{Dir: filepath.Join(s.Dir, "none")}).Leftovers(); len(ids) != 0 || err != nil {
		t.Errorf("Leftovers of a missing dir = %v, %v", ids, err)
	}
}

// The groups a call noted and did not see end are what Groups returns, after
// the call's lock is let go; a call whose groups all ended leaves no file.
func TestGroupLog(t *testing.T) {
	s := &Store{Dir: t.TempDir()}
	ctx := context.Background()
	l, err := s.Lock(ctx, "c")
	if err != nil {
		t.Fatal(err)
	}
	if g, err := l.Groups().Leftovers(); g != nil || err != nil {
		t.Fatalf("Leftovers of a new lock = %v, %v", g, err)
	}
	for _, g := range []Group{{Pgid: 100, Start: 7, PidNS: 9}, {Pgid: 200, Start: 8, PidNS: 9}, {Pgid: 300, Start: 9, PidNS: 9}} {
		if err := l.Groups().Started(g); err != nil {
			t.Fatal(err)
		}
	}
	l.Groups().Ended(100)
	l.Groups().Ended(400) // never started here: nothing written
	// A process killed while it wrote: a line cut short.
	f, err := os.OpenFile(s.LockPath("c"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("+ 500 1")
	f.Close()
	// Let go with groups not ended, even by a DEL: the notes stay, and so
	// does the lock file.
	l.Unlock(true)
	l, err = s.Lock(ctx, "c")
	if err != nil {
		t.Fatal(err)
	}
	got, err := l.Groups().Leftovers()
	if err != nil || len(got) != 2 || got[0] != (Group{Pgid: 200, Start: 8, PidNS: 9}) || got[1].Pgid != 300 {
		t.Fatalf("Leftovers after a call that left 200 and 300 = %v, %v", got, err)
	}
	// A call that keeps them (their kill did not take) appends its own.
	l.Groups().Keep()
	l.Groups().Started(Group{Pgid: 600, Start: 1, PidNS: 9})
	l.Groups().Ended(600)
	l.Unlock(true)
	l, err = s.Lock(ctx, "c")
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := l.Groups().Leftovers(); len(got) != 2 {
		t.Fatalf("Leftovers after a call that kept them = %v", got)
	}
	// A call that dealt with them, and whose delegates all ended, empties
	// the notes; a DEL then removes the lock file.
	l.Groups().Started(Group{Pgid: 700, Start: 1, PidNS: 9})
	l.Groups().Ended(700)
	l.Unlock(false)
	if fi, err := os.Stat(s.LockPath("c")); err != nil || fi.Size() != 0 {
		t.Fatalf("lock file after a call whose groups all ended: %v, %v", fi, err)
	}
	l, err = s.Lock(ctx, "c")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := l.Groups().Leftovers(); got != nil || err != nil {
		t.Fatalf("Leftovers after a clean call = %v, %v", got, err)
	}
	l.Unlock(true)
	if _, err := os.Stat(s.LockPath("c")); !os.IsNotExist(err) {
		t.Errorf("a DEL whose groups all ended left the lock file: %v", err)
	}
}
