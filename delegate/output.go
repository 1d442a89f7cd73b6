package delegate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"

	"github.com/containernetworking/cni/pkg/types"
)

// What manifold keeps of a delegate's output, and the errors it makes of it.

// Bounds on what is kept of a plugin's output. A CNI result is a few KiB;
// past MaxPluginStdout the call fails, since a cut result cannot be read.
// Past MaxPluginStderr the rest of stderr, which is only for the log, is
// dropped with a note.
const (
	MaxPluginStdout = 4 << 20
	MaxPluginStderr = 64 << 10
)

// cappedBuffer keeps the first max bytes written to it and counts the rest,
// so that a plugin that writes without end cannot grow the caller's memory.
type cappedBuffer struct {
	buf     bytes.Buffer
	max     int
	dropped int64
}

func (b *cappedBuffer) Write(p []byte) (int, error) {
	if room := b.max - b.buf.Len(); room < len(p) {
		b.dropped += int64(len(p) - max(room, 0))
		if room > 0 {
			b.buf.Write(p[:room])
		}
		return len(p), nil // the writer goes on, and its output is counted
	}
	return b.buf.Write(p)
}

// readChunk is how much ReadFrom asks of the plugin's pipe at a time: a CNI
// result fits in one or two.
const readChunk = 4 << 10

// ReadFrom reads r to its end into the buffer, up to max, and counts the
// rest, as Write would. os/exec copies a plugin's stdout and stderr from
// their pipes with io.Copy, which uses this when it is there; without it,
// io.Copy allocates a 32 KiB buffer per stream, two per delegate process,
// each zeroed and, once the GC has returned it, faulted in again
// (docs/performance-history.md, change 15). The bytes kept are read straight
// into the buffer; the ones past max go through a small scratch buffer.
func (b *cappedBuffer) ReadFrom(r io.Reader) (int64, error) {
	var total int64
	var scratch []byte
	for {
		var p []byte
		if room := b.max - b.buf.Len(); room > 0 {
			b.buf.Grow(min(room, readChunk))
			p = b.buf.AvailableBuffer()
			p = p[:min(cap(p), room, readChunk)]
		} else {
			if scratch == nil {
				scratch = make([]byte, readChunk)
			}
			p = scratch
		}
		n, err := r.Read(p)
		total += int64(n)
		b.Write(p[:n])
		if err == io.EOF {
			return total, nil
		}
		if err != nil {
			return total, err
		}
	}
}

func (b *cappedBuffer) Len() int      { return b.buf.Len() }
func (b *cappedBuffer) Bytes() []byte { return b.buf.Bytes() }

// text is what was kept, with a note of what was dropped.
func (b *cappedBuffer) text() []byte {
	if b.dropped == 0 {
		return b.Bytes()
	}
	return append(b.Bytes(), fmt.Sprintf("\n[manifold: %d more bytes of output dropped]\n", b.dropped)...)
}

// killedError says that the plugin was killed because its call ended: the
// call's deadline passed, or (in the daemon) the runtime hung up. Code 11: the
// runtime may try again; what was attached is undone first.
func (e *Exec) killedError(path string, cause error) error {
	where := path
	if e.Root != "" {
		where += " (under host root " + e.Root + ")"
	}
	return types.NewError(types.ErrTryAgainLater, fmt.Sprintf("plugin %s was killed before it answered: %v", where, cause), "")
}

// maxQuoted bounds the part of a plugin's output that an error message quotes.
const maxQuoted = 2 << 10

// clip is b, cut to maxQuoted bytes with a note of the rest.
func clip(b []byte) string {
	if len(b) <= maxQuoted {
		return string(b)
	}
	return fmt.Sprintf("%s… (%d more bytes)", b[:maxQuoted], len(b)-maxQuoted)
}

// pluginError is the plugin's own CNI error from its stdout, or else one that
// says what is known.
func (e *Exec) pluginError(path string, err error, stdout, stderr []byte) error {
	var cniErr types.Error
	where := path
	if e.Root != "" {
		where += " (under host root " + e.Root + ")"
	}
	switch {
	case len(stdout) > 0 && json.Unmarshal(stdout, &cniErr) == nil:
		return &cniErr
	case len(stdout) > 0:
		cniErr.Msg = fmt.Sprintf("plugin %s failed, and its output is not a CNI error: %q", where, clip(stdout))
	case len(stderr) > 0:
		cniErr.Msg = fmt.Sprintf("plugin %s failed: %q", where, clip(stderr))
	default:
		cniErr.Msg = fmt.Sprintf("plugin %s failed with no message: %v", where, err)
	}
	return &cniErr
}
