package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/version"

	"github.com/manifold-cni/manifold/netconf"
	"github.com/manifold-cni/manifold/shimproto"
)

// fakeDaemon answers each connection with answer(request); a nil reply closes
// the connection without an answer, as a daemon that dies would.
func fakeDaemon(t *testing.T, answer func(*shimproto.Request) *shimproto.Reply) (string, chan *shimproto.Request) {
	t.Helper()
	socket := filepath.Join(t.TempDir(), "d.sock")
	ln, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	got := make(chan *shimproto.Request, 10)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			req, err := shimproto.ReadRequest(c)
			if err == nil {
				got <- req
				if rep := answer(req); rep != nil {
					shimproto.WriteReply(c, rep)
				}
			}
			c.Close()
		}
	}()
	return socket, got
}

type cniErr struct {
	CNIVersion string `json:"cniVersion"`
	Code       int    `json:"code"`
	Msg        string `json:"msg"`
}

func TestRunPassesTheCallAndTheAnswer(t *testing.T) {
	socket, got := fakeDaemon(t, func(*shimproto.Request) *shimproto.Reply {
		return &shimproto.Reply{ExitCode: 1, Stdout: []byte(`{"code":7,"msg":"bad"}`), Stderr: []byte("log line\n")}
	})
	conf := `{"cniVersion":"1.1.0","name":"m","type":"manifold-shim","daemonSocket":"` + socket + `"}`
	var stdout, stderr bytes.Buffer
	env := []string{"CNI_COMMAND=ADD", "CNI_CONTAINERID=c1", "HOME=/root", "CNI_ARGS=K8S_POD_NAME=p"}
	code := run(strings.NewReader(conf), &stdout, &stderr, env)
	if code != 1 || stdout.String() != `{"code":7,"msg":"bad"}` || stderr.String() != "log line\n" {
		t.Fatalf("run = %d, stdout %q, stderr %q; want the daemon's answer", code, stdout.String(), stderr.String())
	}
	req := <-got
	if string(req.Stdin) != conf {
		t.Errorf("daemon got stdin %q, want %q", req.Stdin, conf)
	}
	want := []string{"CNI_COMMAND=ADD", "CNI_CONTAINERID=c1", "CNI_ARGS=K8S_POD_NAME=p"}
	if strings.Join(req.Env, "\n") != strings.Join(want, "\n") {
		t.Errorf("daemon got env %q, want only the CNI_ variables %q", req.Env, want)
	}
}

func TestRunConnectionLost(t *testing.T) {
	socket, _ := fakeDaemon(t, func(*shimproto.Request) *shimproto.Reply { return nil })
	conf := `{"cniVersion":"1.0.0","name":"m","daemonSocket":"` + socket + `"}`
	for _, cmd := range []string{"ADD", "CHECK"} {
		var stdout, stderr bytes.Buffer
		code := run(strings.NewReader(conf), &stdout, &stderr, []string{"CNI_COMMAND=" + cmd})
		var e cniErr
		if code != 1 || json.Unmarshal(stdout.Bytes(), &e) != nil || e.Code != codeTryAgainLater || e.CNIVersion != "1.0.0" ||
			!strings.Contains(e.Msg, "connection lost") || !strings.Contains(e.Msg, socket) {
			t.Errorf("%s: run = %d, stdout %q; want code 11 naming the socket and the lost connection", cmd, code, stdout.String())
		}
	}
}

// TestConnectIsPollable checks that the daemon's answer is awaited in the
// netpoller: only a file the runtime polls takes a deadline.
func TestConnectIsPollable(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "d.sock")
	ln, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	conn, err := connect(socket)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.SetReadDeadline(time.Now().Add(10 * time.Millisecond)); err != nil {
		t.Fatalf("SetReadDeadline: %v; want a connection the runtime polls", err)
	}
	if _, err := conn.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Read with nothing sent = %v, want the deadline to end it", err)
	}
}

func TestRunRefusesRelativeSocket(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := run(strings.NewReader(`{"cniVersion":"1.0.0","name":"m","daemonSocket":"run/x.sock"}`), &stdout, &stderr, []string{"CNI_COMMAND=ADD"})
	var e cniErr
	if code != 1 || json.Unmarshal(stdout.Bytes(), &e) != nil || e.Code != codeInvalidConfig || !strings.Contains(e.Msg, `daemonSocket "run/x.sock"`) {
		t.Fatalf("run = %d, stdout %q; want code 7 naming daemonSocket and its value", code, stdout.String())
	}
}

func TestCNIErrorIsJSON(t *testing.T) {
	msg := "quote \" backslash \\ newline \n nul \x00 sep \u2028 é"
	var stdout bytes.Buffer
	if code := cniError(&stdout, "1.1.0", 11, msg); code != 1 {
		t.Fatalf("exit code %d, want 1", code)
	}
	var e cniErr
	if err := json.Unmarshal(stdout.Bytes(), &e); err != nil {
		t.Fatalf("%q is not JSON: %v", stdout.String(), err)
	}
	if e.Msg != msg || e.Code != 11 || e.CNIVersion != "1.1.0" {
		t.Errorf("decoded %+v, want the message back", e)
	}
}

// A shim run as a delegate of manifold (a NAD whose plugin or IPAM type is
// manifold-shim) refuses before it reaches the daemon.
func TestRunRefusesToBeADelegate(t *testing.T) {
	if nestedEnv != netconf.NestedEnv {
		t.Fatalf("nestedEnv %q differs from netconf.NestedEnv %q", nestedEnv, netconf.NestedEnv)
	}
	socket, got := fakeDaemon(t, func(*shimproto.Request) *shimproto.Reply { return &shimproto.Reply{} })
	conf := `{"cniVersion":"1.1.0","name":"m","type":"manifold-shim","daemonSocket":"` + socket + `"}`
	var stdout, stderr bytes.Buffer
	env := []string{"CNI_COMMAND=ADD", "CNI_CONTAINERID=c1", nestedEnv + "=manifold"}
	if code := run(strings.NewReader(conf), &stdout, &stderr, env); code != 1 {
		t.Errorf("exit code %d, want 1", code)
	}
	var e cniErr
	if err := json.Unmarshal(stdout.Bytes(), &e); err != nil || e.Code != 7 || !strings.Contains(e.Msg, nestedEnv) {
		t.Errorf("stdout %q, want a code 7 error that names %s (%v)", stdout.String(), nestedEnv, err)
	}
	select {
	case req := <-got:
		t.Errorf("the daemon got a call from a nested shim: %v", req.Env)
	case <-time.After(100 * time.Millisecond):
	}
}

// TestVersionAnsweredByTheShim: VERSION is answered with manifold's own
// answer even with no daemon and no fallback binary, as CRI-O asks it (with
// no daemonSocket on stdin) on every change in its dirs. Before, the shim
// asked the default socket and then ran a fallback that was not there, and
// CRI-O dropped the network.
func TestVersionAnsweredByTheShim(t *testing.T) {
	var want bytes.Buffer
	if err := version.All.Encode(&want); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	env := []string{"CNI_COMMAND=VERSION", "CNI_PATH=" + t.TempDir()}
	code := run(strings.NewReader(`{"cniVersion":"1.1.0"}`), &stdout, &stderr, env)
	if code != 0 {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout.String(), stderr.String())
	}
	var got, exp map[string]any
	if err := json.Unmarshal(stdout.Bytes(), &got); err != nil {
		t.Fatalf("stdout %q: %v", stdout.String(), err)
	}
	json.Unmarshal(want.Bytes(), &exp)
	if !reflect.DeepEqual(got, exp) {
		t.Errorf("VERSION answer %s, want manifold's %s", stdout.String(), want.String())
	}
}
