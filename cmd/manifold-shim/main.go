// Command manifold-shim is the CNI binary of thick mode. The runtime calls it
// exactly as it would call manifold; it passes the call over a unix socket to
// the manifold node daemon, which runs it with a warm API connection, and prints
// the daemon's answer.
//
// When the daemon cannot be reached, the shim runs the manifold binary next to
// it with the same environment and stdin, so a node whose daemon is down or
// restarting still attaches and detaches pods (docs/thick-mode.md).
//
// It links only the standard library and shimproto, so that it starts in a few
// milliseconds: start-up is what thick mode exists to save.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/manifold-cni/manifold/shimproto"
)

// dialTimeout bounds the connect to the daemon. A live daemon accepts at once;
// a socket whose daemon is gone is refused at once. The timeout is for a daemon
// that is alive but stuck.
const dialTimeout = 2 * time.Second

// CNI error codes the shim itself can return.
const (
	codeInvalidConfig = 7
	codeTryAgainLater = 11
)

func main() {
	os.Exit(run(os.Stdin, os.Stdout, os.Stderr, os.Environ()))
}

// run makes one CNI call and returns the exit code.
func run(stdin io.Reader, stdout, stderr io.Writer, environ []string) int {
	data, err := io.ReadAll(io.LimitReader(stdin, shimproto.MaxStdin+1))
	if err != nil || len(data) > shimproto.MaxStdin {
		return cniError(stdout, "", codeInvalidConfig, fmt.Sprintf("manifold-shim: read stdin: at most %d bytes can be read (%v)", shimproto.MaxStdin, err))
	}
	req := &shimproto.Request{Stdin: data}
	for _, kv := range environ {
		if strings.HasPrefix(kv, "CNI_") {
			req.Env = append(req.Env, kv)
		}
	}
	conf := readConf(data)
	socket := conf.DaemonSocket
	if socket == "" {
		socket = shimproto.DefaultSocket
	}
	if !filepath.IsAbs(socket) {
		return cniError(stdout, conf.CNIVersion, codeInvalidConfig, fmt.Sprintf("manifold-shim: daemonSocket %q is not an absolute path", socket))
	}
	conn, err := net.DialTimeout("unix", socket, dialTimeout)
	if err != nil {
		return fallback(req, stdout, stderr, environ, conf, fmt.Sprintf("manifold daemon at %s cannot be reached (%v)", socket, err))
	}
	defer conn.Close()
	rep, err := call(conn, req)
	if err != nil {
		// The daemon may have acted on the call before the connection broke.
		// DEL, GC, STATUS and VERSION are safe to run again; ADD and CHECK
		// are not, and the runtime's answer to a failed ADD is a DEL.
		switch req.Getenv("CNI_COMMAND") {
		case "ADD", "CHECK":
			return cniError(stdout, conf.CNIVersion, codeTryAgainLater, fmt.Sprintf("manifold daemon at %s: %v", socket, err))
		}
		return fallback(req, stdout, stderr, environ, conf, fmt.Sprintf("manifold daemon at %s: %v", socket, err))
	}
	stdout.Write(rep.Stdout)
	stderr.Write(rep.Stderr)
	return rep.ExitCode
}

func call(conn net.Conn, req *shimproto.Request) (*shimproto.Reply, error) {
	// The request is small and the daemon reads it at once; the reply comes
	// when the call is done, which the daemon bounds and the runtime times.
	conn.SetWriteDeadline(time.Now().Add(dialTimeout))
	if err := shimproto.WriteRequest(conn, req); err != nil {
		return nil, fmt.Errorf("send the call: %w", err)
	}
	rep, err := shimproto.ReadReply(conn)
	if err != nil {
		return nil, fmt.Errorf("connection lost before the answer: %w", err)
	}
	return rep, nil
}

// shimConf is the part of the network config the shim reads.
type shimConf struct {
	CNIVersion   string `json:"cniVersion"`
	DaemonSocket string `json:"daemonSocket"`
}

// readConf reads what it can. A config that does not parse is passed on as it
// is: manifold owns the error message for it.
func readConf(data []byte) shimConf {
	var c shimConf
	json.Unmarshal(data, &c)
	return c
}

// fallback runs the manifold binary that sits next to the shim, with the
// runtime's own environment and stdin, and returns its exit code.
func fallback(req *shimproto.Request, stdout, stderr io.Writer, environ []string, conf shimConf, why string) int {
	bin := filepath.Join(ownDir(), "manifold")
	fmt.Fprintf(stderr, "manifold-shim: %s; running %s instead\n", why, bin)
	cmd := exec.Command(bin)
	cmd.Env = environ
	cmd.Stdin = bytes.NewReader(req.Stdin)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	err := cmd.Run()
	var exitErr *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &exitErr) && exitErr.ExitCode() > 0:
		return exitErr.ExitCode()
	}
	return cniError(stdout, conf.CNIVersion, codeTryAgainLater, fmt.Sprintf("manifold-shim: %s, and %s failed to run: %v", why, bin, err))
}

// ownDir is the directory the runtime ran the shim from: its CNI bin dir,
// where the installer puts manifold too. The runtime runs a plugin by its full
// path; os.Executable is the fallback, and it resolves symlinks.
func ownDir() string {
	if filepath.IsAbs(os.Args[0]) {
		return filepath.Dir(os.Args[0])
	}
	if self, err := os.Executable(); err == nil {
		return filepath.Dir(self)
	}
	return "."
}

// cniError prints a CNI error and returns the exit code that goes with it.
func cniError(stdout io.Writer, cniVersion string, code int, msg string) int {
	json.NewEncoder(stdout).Encode(struct {
		CNIVersion string `json:"cniVersion,omitempty"`
		Code       int    `json:"code"`
		Msg        string `json:"msg"`
	}{cniVersion, code, msg})
	return 1
}
