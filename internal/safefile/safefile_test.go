package safefile

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestRead: a regular file within the limit is read, through a symlink only
// by Read; a FIFO, a directory, a dangling link and a file over the limit
// are refused with the reason, and the FIFO without blocking.
func TestRead(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "conf")
	if err := os.WriteFile(file, []byte("12345"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(file, link); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name    string
		read    func(string, int64) ([]byte, error)
		path    string
		limit   int64
		want    string
		wantErr string
	}{
		{"a file", Read, file, 5, "12345", ""},
		{"a file through a link", Read, link, 5, "12345", ""},
		{"a file, no links", ReadNoFollow, file, 5, "12345", ""},
		{"a link, no links", ReadNoFollow, link, 5, "", "symlink"},
		{"over the limit", Read, file, 4, "", "larger than the limit of 4 bytes"},
		{"a FIFO", Read, fifo, 5, "", "not a regular file"},
		{"a directory", ReadNoFollow, dir, 5, "", "not a regular file"},
		{"missing", Read, filepath.Join(dir, "none"), 5, "", "no such file"},
	} {
		b, err := c.read(c.path, c.limit)
		switch {
		case c.wantErr == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.wantErr == "" && string(b) != c.want:
			t.Errorf("%s: read %q, want %q", c.name, b, c.want)
		case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
			t.Errorf("%s: error %v, want one saying %q", c.name, err, c.wantErr)
		}
	}
}
