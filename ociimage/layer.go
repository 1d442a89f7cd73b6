package ociimage

import (
	"archive/tar"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strings"
)

// writeLayerTar writes the layer's uncompressed tar to w: each file's parent
// directories (0755) and the files, sorted by name, owned by root, dated the
// epoch. Only the contents and the modes of the files can change the bytes.
func writeLayerTar(w io.Writer, files []File) error {
	dirs := map[string]bool{}
	for _, f := range files {
		for d := path.Dir(f.Path); d != "/"; d = path.Dir(d) {
			dirs[d] = true
		}
	}
	type entry struct {
		name string
		file *File
	}
	var entries []entry
	for d := range dirs {
		entries = append(entries, entry{name: strings.TrimPrefix(d, "/") + "/"})
	}
	for i := range files {
		entries = append(entries, entry{name: strings.TrimPrefix(files[i].Path, "/"), file: &files[i]})
	}
	slices.SortFunc(entries, func(a, b entry) int { return strings.Compare(a.name, b.name) })

	tw := tar.NewWriter(w)
	for _, e := range entries {
		hdr := &tar.Header{Name: e.name, ModTime: epoch, Format: tar.FormatPAX}
		if e.file == nil {
			hdr.Typeflag, hdr.Mode = tar.TypeDir, 0o755
			if err := tw.WriteHeader(hdr); err != nil {
				return err
			}
			continue
		}
		if err := addFile(tw, hdr, *e.file); err != nil {
			return err
		}
	}
	return tw.Close()
}

// addFile writes one regular file: its header and content.
func addFile(tw *tar.Writer, hdr *tar.Header, f File) error {
	src, err := os.Open(f.Source)
	if err != nil {
		return fmt.Errorf("file %s: %w", f.Path, err)
	}
	defer src.Close()
	st, err := src.Stat()
	if err != nil {
		return fmt.Errorf("file %s: %w", f.Path, err)
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("file %s: source %s is not a regular file (%v)", f.Path, f.Source, st.Mode().Type())
	}
	hdr.Typeflag, hdr.Mode, hdr.Size = tar.TypeReg, int64(f.Mode.Perm()), st.Size()
	if err := tw.WriteHeader(hdr); err != nil {
		return fmt.Errorf("file %s: %w", f.Path, err)
	}
	// A source that grows or shrinks while it is read would make a tar that
	// lies about its size; tar.Writer refuses both.
	if _, err := io.Copy(tw, src); err != nil {
		return fmt.Errorf("file %s: copy %s: %w", f.Path, f.Source, err)
	}
	return nil
}
