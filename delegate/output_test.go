package delegate

import (
	"bytes"
	"io"
	"os"
	"strings"
	"testing"
)

// chunkReader serves data in reads of at most chunk bytes and notes the
// largest buffer a reader offered it.
type chunkReader struct {
	data    []byte
	chunk   int
	largest int
}

func (r *chunkReader) Read(p []byte) (int, error) {
	r.largest = max(r.largest, len(p))
	if len(r.data) == 0 {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), r.chunk)], r.data)
	r.data = r.data[n:]
	return n, nil
}

// A plugin's output is copied from its pipe straight into the capped buffer,
// through buffers of at most readChunk: no 32 KiB buffer of io.Copy's own
// per stream. What is past the cap is counted, as with Write.
func TestCappedBufferReadFrom(t *testing.T) {
	for _, c := range []struct {
		name          string
		size, max     int
		kept, dropped int
	}{
		{"a result", 3000, MaxPluginStdout, 3000, 0},
		{"past the cap", 100000, 10000, 10000, 90000},
		{"exactly the cap", 8192, 8192, 8192, 0},
		{"nothing", 0, 100, 0, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			data := bytes.Repeat([]byte("x"), c.size)
			r := &chunkReader{data: data, chunk: 1500}
			b := &cappedBuffer{max: c.max}
			n, err := io.Copy(b, r)
			if err != nil || n != int64(c.size) {
				t.Fatalf("io.Copy = %d, %v; want %d", n, err, c.size)
			}
			if b.Len() != c.kept || b.dropped != int64(c.dropped) || !bytes.Equal(b.Bytes(), data[:c.kept]) {
				t.Errorf("kept %d, dropped %d; want %d and %d", b.Len(), b.dropped, c.kept, c.dropped)
			}
			if r.largest > readChunk {
				t.Errorf("io.Copy read through a buffer of %d bytes, want at most %d (cappedBuffer.ReadFrom)", r.largest, readChunk)
			}
		})
	}
}

// The same, from a pipe, as os/exec copies a plugin's stdout: io.Copy takes
// the pipe's WriteTo, which hands over to the buffer's ReadFrom.
func TestCappedBufferFromPipe(t *testing.T) {
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		pw.Write([]byte(strings.Repeat("y", 20000)))
		pw.Close()
	}()
	b := &cappedBuffer{max: 5000}
	if n, err := io.Copy(b, pr); err != nil || n != 20000 {
		t.Fatalf("io.Copy = %d, %v", n, err)
	}
	pr.Close()
	if b.Len() != 5000 || b.dropped != 15000 {
		t.Errorf("kept %d, dropped %d; want 5000 and 15000", b.Len(), b.dropped)
	}
}
