// Package shimproto is the wire format between manifold-shim, the CNI binary the
// runtime calls in thick mode, and the manifold node daemon that does the work.
//
// One connection carries one call: the shim writes a Request (the CNI_*
// environment and stdin), the daemon writes a Reply (what the plugin would
// have printed and its exit code), and both close. A frame is a magic byte
// string, a count, and length-prefixed fields, so a reader can bound every
// allocation before it makes it. The package uses only the standard library:
// the shim links it, and the shim must stay small to start fast.
package shimproto

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"strconv"
	"strings"
)

// DefaultSocket is where the daemon listens when the config names no socket.
const DefaultSocket = "/run/manifold/manifold.sock"

// Limits on what a reader accepts. A CNI config is small; inline delegate lists
// are the largest, and stay far below MaxStdin.
const (
	MaxEnv      = 64
	MaxEnvEntry = 64 << 10
	MaxStdin    = 16 << 20
	MaxOutput   = 16 << 20
)

var (
	requestMagic = []byte("MFQ1")
	replyMagic   = []byte("MFR1")
)

// Request is one CNI call as the runtime made it to the shim.
type Request struct {
	// Env holds the CNI_* variables as "NAME=value".
	Env []string
	// Stdin is the network configuration.
	Stdin []byte
}

// Reply is what the daemon made of a Request.
type Reply struct {
	// ExitCode is the plugin's exit status: 0, or 1 with a CNI error on Stdout.
	ExitCode int
	// Stdout is the CNI result or error; Stderr is anything for the runtime's log.
	Stdout, Stderr []byte
}

// Getenv returns the value of name in r.Env, or "".
func (r *Request) Getenv(name string) string {
	for _, kv := range r.Env {
		if k, v, ok := strings.Cut(kv, "="); ok && k == name {
			return v
		}
	}
	return ""
}

// WriteRequest writes r as one frame.
func WriteRequest(w io.Writer, r *Request) error {
	bw := bufio.NewWriter(w)
	bw.Write(requestMagic)
	putUint(bw, uint32(len(r.Env)))
	for _, kv := range r.Env {
		putField(bw, []byte(kv))
	}
	putField(bw, r.Stdin)
	return bw.Flush()
}

// ReadRequest reads one frame written by WriteRequest.
func ReadRequest(r io.Reader) (*Request, error) {
	br := bufio.NewReader(r)
	if err := expectMagic(br, requestMagic); err != nil {
		return nil, err
	}
	n, err := getUint(br)
	if err != nil {
		return nil, err
	}
	if n > MaxEnv {
		return nil, errors.New("read request: " + itoa(n) + " environment entries, more than " + itoa(MaxEnv))
	}
	req := &Request{Env: make([]string, 0, n)}
	for range n {
		kv, err := getField(br, MaxEnvEntry, "environment entry")
		if err != nil {
			return nil, err
		}
		req.Env = append(req.Env, string(kv))
	}
	if req.Stdin, err = getField(br, MaxStdin, "stdin"); err != nil {
		return nil, err
	}
	return req, nil
}

// WriteReply writes r as one frame.
func WriteReply(w io.Writer, r *Reply) error {
	if r.ExitCode < 0 || r.ExitCode > 255 {
		return errors.New("write reply: exit code " + strconv.Itoa(r.ExitCode) + " is out of range 0-255")
	}
	bw := bufio.NewWriter(w)
	bw.Write(replyMagic)
	putUint(bw, uint32(r.ExitCode))
	putField(bw, r.Stdout)
	putField(bw, r.Stderr)
	return bw.Flush()
}

// ReadReply reads one frame written by WriteReply.
func ReadReply(r io.Reader) (*Reply, error) {
	br := bufio.NewReader(r)
	if err := expectMagic(br, replyMagic); err != nil {
		return nil, err
	}
	code, err := getUint(br)
	if err != nil {
		return nil, err
	}
	if code > 255 {
		return nil, errors.New("read reply: exit code " + itoa(code) + " is out of range 0-255")
	}
	rep := &Reply{ExitCode: int(code)}
	if rep.Stdout, err = getField(br, MaxOutput, "stdout"); err != nil {
		return nil, err
	}
	if rep.Stderr, err = getField(br, MaxOutput, "stderr"); err != nil {
		return nil, err
	}
	return rep, nil
}

func putUint(w *bufio.Writer, n uint32) {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], n)
	w.Write(b[:])
}

func putField(w *bufio.Writer, b []byte) {
	putUint(w, uint32(len(b)))
	w.Write(b)
}

func expectMagic(r io.Reader, magic []byte) error {
	got := make([]byte, len(magic))
	if _, err := io.ReadFull(r, got); err != nil {
		return wrap("read frame header: ", err)
	}
	if string(got) != string(magic) {
		return errors.New("read frame header: got " + strconv.Quote(string(got)) + ", want " + strconv.Quote(string(magic)) + ": not a manifold " + kind(magic))
	}
	return nil
}

func kind(magic []byte) string {
	if string(magic) == string(requestMagic) {
		return "request"
	}
	return "reply"
}

func getUint(r io.Reader) (uint32, error) {
	var b [4]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return 0, wrap("read frame: ", truncated(err))
	}
	return binary.BigEndian.Uint32(b[:]), nil
}

func getField(r io.Reader, limit int, what string) ([]byte, error) {
	n, err := getUint(r)
	if err != nil {
		return nil, err
	}
	if int64(n) > int64(limit) {
		return nil, errors.New("read frame: " + what + " of " + itoa(n) + " bytes, more than " + strconv.Itoa(limit))
	}
	b, err := readN(r, int(n))
	if err != nil {
		return nil, wrap("read frame: "+what+": ", truncated(err))
	}
	return b, nil
}

// firstChunk is what readN allocates before any byte of a field arrived.
const firstChunk = 4 << 10

// readN reads exactly n bytes. The buffer grows with what arrives (doubling,
// up to n), not with what the frame announced: a frame that claims 16 MiB and
// sends 10 bytes costs a few KiB, not 16 MiB, and a whole field at most 2n.
func readN(r io.Reader, n int) ([]byte, error) {
	b := make([]byte, 0, min(n, firstChunk))
	for len(b) < n {
		if len(b) == cap(b) {
			grown := make([]byte, len(b), min(2*cap(b), n))
			copy(grown, b)
			b = grown
		}
		m, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+m]
		if err != nil && len(b) < n {
			return nil, err
		}
	}
	return b, nil
}

// truncated reports a frame that ends early as such, rather than as a clean EOF.
func truncated(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

func itoa(n uint32) string { return strconv.FormatUint(uint64(n), 10) }

// wrap is fmt.Errorf("%s%w") without fmt, which the shim does not link.
func wrap(prefix string, err error) error { return &wrapped{prefix, err} }

type wrapped struct {
	prefix string
	err    error
}

func (w *wrapped) Error() string { return w.prefix + w.err.Error() }
func (w *wrapped) Unwrap() error { return w.err }
