package install

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/manifold-cni/manifold/internal/safefile"
)

// WriteFileAtomic replaces path with data. A reader (the container runtime
// scanning the CNI conf dir, or manifold reading its kubeconfig) sees either the
// old file or the new one, never a truncated or half-written one.
func WriteFileAtomic(path string, data []byte, perm os.FileMode) error {
	return writeAtomic(path, perm, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// CopyFileAtomic copies src to dst with the same guarantee as WriteFileAtomic.
// For a binary this also means that a runtime executing the old dst keeps
// running it: rename swaps the directory entry and leaves the old inode alone,
// whereas writing into the running file in place fails with "text file busy".
func CopyFileAtomic(src, dst string, perm os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("copy %s to %s: %w", src, dst, err)
	}
	defer in.Close()
	if err := writeAtomic(dst, perm, func(w io.Writer) error {
		_, err := io.Copy(w, in)
		return err
	}); err != nil {
		return fmt.Errorf("copy %s: %w", src, err)
	}
	return nil
}

// writeAtomic writes through a temp file in the same directory (rename is only
// atomic within one filesystem), fsyncs it so a crash after the rename cannot
// leave an empty file under the final name, renames it over path, and fsyncs
// the directory so the rename itself survives a crash.
func writeAtomic(path string, perm os.FileMode, fill func(io.Writer) error) error {
	dir, base := filepath.Dir(path), filepath.Base(path)
	// The dot prefix and the ".tmp-" suffix keep the temp file out of what
	// runtimes load from a CNI conf dir (they match .conf/.conflist/.json only).
	tmp, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	renamed := false
	defer func() {
		if !renamed {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err := fill(tmp); err != nil {
		return fmt.Errorf("write %s: %w", tmp.Name(), err)
	}
	// CreateTemp makes the file 0600; set the final mode before it is visible.
	if err := tmp.Chmod(perm); err != nil {
		return fmt.Errorf("chmod %s: %w", tmp.Name(), err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("close %s: %w", tmp.Name(), err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("rename %s to %s: %w", tmp.Name(), path, err)
	}
	renamed = true
	return syncDir(dir)
}

// syncDir makes a rename or removal in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open dir %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fsync dir %s: %w", dir, err)
	}
	return nil
}

// maxFileBytes caps what the installer reads from a config, token or CA file,
// so that a wrong path (a device, a huge file) cannot exhaust memory.
const maxFileBytes = 4 << 20

// readCapped reads a small regular file whole.
func readCapped(path string) ([]byte, error) { return safefile.Read(path, maxFileBytes) }

// sameContent reports whether path exists and holds exactly data. Comparing
// before writing keeps a reconcile that changes nothing from touching the
// host's files (and from waking our own watcher).
func sameContent(path string, data []byte) bool {
	cur, err := readCapped(path)
	return err == nil && bytes.Equal(cur, data)
}

// sameFile reports whether a and b have the same content, streaming both, for
// binaries that may be larger than maxFileBytes.
func sameFile(a, b string) (bool, error) {
	fa, err := os.Open(a)
	if err != nil {
		return false, err
	}
	defer fa.Close()
	fb, err := os.Open(b)
	if os.IsNotExist(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer fb.Close()
	sa, err := fa.Stat()
	if err != nil {
		return false, err
	}
	sb, err := fb.Stat()
	if err != nil {
		return false, err
	}
	if sa.Size() != sb.Size() {
		return false, nil
	}
	bufA, bufB := make([]byte, 64<<10), make([]byte, 64<<10)
	for {
		na, errA := io.ReadFull(fa, bufA)
		nb, errB := io.ReadFull(fb, bufB)
		if na != nb || !bytes.Equal(bufA[:na], bufB[:nb]) {
			return false, nil
		}
		if errA == io.EOF || errA == io.ErrUnexpectedEOF {
			return errB == io.EOF || errB == io.ErrUnexpectedEOF, nil
		}
		if errA != nil {
			return false, errA
		}
		if errB != nil {
			return false, errB
		}
	}
}
