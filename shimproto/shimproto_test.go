package shimproto

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"testing/iotest"
)

func TestRequestRoundTrip(t *testing.T) {
	cases := []*Request{
		{Env: []string{}, Stdin: []byte{}},
		{Env: []string{"CNI_COMMAND=ADD", "CNI_ARGS=IgnoreUnknown=1;K8S_POD_NAME=a=b"}, Stdin: []byte(`{"name":"x"}`)},
		{Env: []string{"CNI_PATH="}, Stdin: bytes.Repeat([]byte{0, 0xff}, 70000)},
	}
	for _, want := range cases {
		var buf bytes.Buffer
		if err := WriteRequest(&buf, want); err != nil {
			t.Fatal(err)
		}
		got, err := ReadRequest(&buf)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("round trip: got %+v, want %+v", got, want)
		}
	}
}

func TestGetenv(t *testing.T) {
	r := &Request{Env: []string{"CNI_COMMAND=DEL", "CNI_ARGS=K8S_POD_NAME=p;X=1", "BROKEN"}}
	for name, want := range map[string]string{"CNI_COMMAND": "DEL", "CNI_ARGS": "K8S_POD_NAME=p;X=1", "BROKEN": "", "CNI_PATH": ""} {
		if got := r.Getenv(name); got != want {
			t.Errorf("Getenv(%s) = %q, want %q", name, got, want)
		}
	}
}

func TestReplyRoundTrip(t *testing.T) {
	want := &Reply{ExitCode: 1, Stdout: []byte(`{"code":7}`), Stderr: []byte("log\n")}
	var buf bytes.Buffer
	if err := WriteReply(&buf, want); err != nil {
		t.Fatal(err)
	}
	got, err := ReadReply(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("round trip: got %+v, want %+v", got, want)
	}
	if err := WriteReply(io.Discard, &Reply{ExitCode: 256}); err == nil {
		t.Fatal("WriteReply accepted exit code 256")
	}
}

func frame(magic string, fields ...uint32) []byte {
	b := []byte(magic)
	for _, f := range fields {
		b = binary.BigEndian.AppendUint32(b, f)
	}
	return b
}

func TestReadRejects(t *testing.T) {
	var good bytes.Buffer
	WriteRequest(&good, &Request{Env: []string{"CNI_COMMAND=ADD"}, Stdin: []byte("{}")})
	cases := map[string]struct {
		in   []byte
		want string
	}{
		"empty":           {nil, "EOF"},
		"reply magic":     {frame("MFR1", 0), `not a manifold request`},
		"too many env":    {frame("MFQ1", MaxEnv+1), "65 environment entries"},
		"huge env entry":  {frame("MFQ1", 1, MaxEnvEntry+1), "environment entry of 65537 bytes"},
		"huge stdin":      {frame("MFQ1", 0, 1<<31), "stdin of 2147483648 bytes"},
		"cut in a field":  {good.Bytes()[:good.Len()-1], "unexpected EOF"},
		"cut after count": {frame("MFQ1", 1), "unexpected EOF"},
	}
	for name, tc := range cases {
		_, err := ReadRequest(bytes.NewReader(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error with %q", name, err, tc.want)
		}
	}
	if _, err := ReadReply(bytes.NewReader(frame("MFR1", 300))); err == nil || !strings.Contains(err.Error(), "exit code 300") {
		t.Errorf("reply with exit code 300: got %v", err)
	}
	if _, err := ReadReply(bytes.NewReader(frame("MFR1", 0, 5, 1))); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("reply cut in stdout: got %v, want unexpected EOF", err)
	}
}

// FuzzReadRequest: any byte string is either refused with an error or read into
// a request that writes back to the same bytes.
func FuzzReadRequest(f *testing.F) {
	var seed bytes.Buffer
	WriteRequest(&seed, &Request{Env: []string{"CNI_COMMAND=ADD", "CNI_IFNAME=eth0"}, Stdin: []byte(`{"name":"n"}`)})
	f.Add(seed.Bytes())
	f.Add(frame("MFQ1", 0, 0))
	f.Add([]byte("MFQ1"))
	f.Fuzz(func(t *testing.T, in []byte) {
		req, err := ReadRequest(bytes.NewReader(in))
		if err != nil {
			return
		}
		var out bytes.Buffer
		if err := WriteRequest(&out, req); err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(in, out.Bytes()) {
			t.Fatalf("read %q, wrote back %q", in, out.Bytes())
		}
	})
}

// TestShortFrameAllocatesWhatArrived: a frame that announces MaxStdin bytes
// of stdin and sends 10 must not make the reader allocate MaxStdin bytes; a
// whole field still reads back intact.
func TestShortFrameAllocatesWhatArrived(t *testing.T) {
	var frame bytes.Buffer
	frame.Write(requestMagic)
	binary.Write(&frame, binary.BigEndian, uint32(0))
	binary.Write(&frame, binary.BigEndian, uint32(MaxStdin))
	frame.WriteString("0123456789")
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err := ReadRequest(bytes.NewReader(frame.Bytes()))
	runtime.ReadMemStats(&after)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("ReadRequest of a cut frame = %v, want an unexpected EOF", err)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 256<<10 {
		t.Errorf("reading a frame that announced %d bytes and sent 10 allocated %d bytes", MaxStdin, got)
	}

	// A field that does arrive whole, in small reads, is read whole.
	want := &Request{Env: []string{"CNI_COMMAND=ADD"}, Stdin: bytes.Repeat([]byte("xyz"), 100000)}
	var buf bytes.Buffer
	if err := WriteRequest(&buf, want); err != nil {
		t.Fatal(err)
	}
	got, err := ReadRequest(iotest.OneByteReader(&buf))
	if err != nil {
		t.Fatalf("ReadRequest one byte at a time: %v", err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("ReadRequest one byte at a time: stdin of %d bytes, want %d", len(got.Stdin), len(want.Stdin))
	}
}
