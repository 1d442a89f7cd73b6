// Command manifold-shim is the CNI binary of thick mode. The runtime calls it
// exactly as it would call manifold; it passes the call over a unix socket to
// the manifold node daemon, which runs it with a warm API connection, and prints
// the daemon's answer.
//
// When the daemon cannot be reached, the shim becomes the manifold binary next
// to it (execve, with the same environment and stdin), so a node whose daemon
// is down or restarting still attaches and detaches pods (docs/thick-mode.md).
//
// Start-up is what thick mode exists to save, so the shim links as little as
// it can: small standard packages, x/sys/unix and shimproto. No net, fmt,
// os/exec or encoding/json; each of those costs every call start-up time.
package main

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/manifold-cni/manifold/shimproto"
)

// connectTimeout bounds the connect to the daemon. A live daemon accepts at
// once and a socket whose daemon is gone is refused at once; the timeout is for
// a daemon that is alive but no longer accepting.
const connectTimeout = 2 // seconds

// nestedEnv is netconf.NestedEnv, which manifold sets for every delegate it
// runs (the shim does not link netconf; a test holds the two equal).
const nestedEnv = "MANIFOLD_DELEGATE_OF"

// versionAnswer is what manifold answers to VERSION (the versions of
// libcni's version.All, which the shim does not link; a test holds the two
// equal).
const versionAnswer = `{"cniVersion":"1.1.0","supportedVersions":["0.1.0","0.2.0","0.3.0","0.3.1","0.4.0","1.0.0","1.1.0"]}` + "\n"

// envValue is the value of key in environ, or "".
func envValue(environ []string, key string) string {
	for _, kv := range environ {
		if v, ok := strings.CutPrefix(kv, key+"="); ok {
			return v
		}
	}
	return ""
}

// CNI error codes the shim itself can return.
const (
	codeInvalidConfig = 7
	codeTryAgainLater = 11
)

func main() {
	os.Exit(run(os.Stdin, os.Stdout, os.Stderr, os.Environ()))
}

// run makes one CNI call and returns the exit code. It returns only when the
// daemon answered or the shim failed; the fallback replaces the process.
func run(stdin io.Reader, stdout, stderr io.Writer, environ []string) int {
	for _, kv := range environ {
		if strings.HasPrefix(kv, nestedEnv+"=") {
			// Refused before anything is read or sent: the config is not the node's.
			return cniError(stdout, "", codeInvalidConfig, "manifold-shim refuses to run as a delegate of manifold ("+nestedEnv+" is set): a network's plugin or IPAM type named a meta-plugin")
		}
	}
	if envValue(environ, "CNI_COMMAND") == "VERSION" {
		// Answered here, with neither the daemon nor the fallback: a
		// runtime asks VERSION with no config of the node's on stdin
		// (libcni sends only a cniVersion), so no daemonSocket either.
		// CRI-O asks on every change in its conf and bin dirs, and drops
		// a network whose plugin cannot answer (docs/runtimes.md).
		io.WriteString(stdout, versionAnswer)
		return 0
	}
	data, err := io.ReadAll(io.LimitReader(stdin, shimproto.MaxStdin+1))
	if err != nil || len(data) > shimproto.MaxStdin {
		return cniError(stdout, "", codeInvalidConfig, "manifold-shim: read stdin: at most "+strconv.Itoa(shimproto.MaxStdin)+" bytes can be read")
	}
	req := &shimproto.Request{Stdin: data}
	for _, kv := range environ {
		if strings.HasPrefix(kv, "CNI_") {
			req.Env = append(req.Env, kv)
		}
	}
	conf, _ := topLevelStrings(data, "cniVersion", "daemonSocket")
	cniVersion, socket := conf["cniVersion"], conf["daemonSocket"]
	if socket == "" {
		socket = shimproto.DefaultSocket
	}
	if !filepath.IsAbs(socket) {
		return cniError(stdout, cniVersion, codeInvalidConfig, "manifold-shim: daemonSocket "+strconv.Quote(socket)+" is not an absolute path")
	}
	conn, err := connect(socket)
	if err != nil {
		return fallback(data, stdout, stderr, environ, cniVersion, "manifold daemon at "+socket+" cannot be reached ("+err.Error()+")")
	}
	defer conn.Close()
	rep, err := call(conn, req)
	if err != nil {
		// The daemon may have acted on the call before the connection broke.
		// DEL, GC, STATUS and VERSION are safe to run again; ADD and CHECK
		// are not, and the runtime's answer to a failed ADD is a DEL.
		switch req.Getenv("CNI_COMMAND") {
		case "ADD", "CHECK":
			return cniError(stdout, cniVersion, codeTryAgainLater, "manifold daemon at "+socket+": "+err.Error())
		}
		return fallback(data, stdout, stderr, environ, cniVersion, "manifold daemon at "+socket+": "+err.Error())
	}
	stdout.Write(rep.Stdout)
	stderr.Write(rep.Stderr)
	return rep.ExitCode
}

// connect opens a unix stream socket to path. The send timeout bounds a
// blocking connect on a unix socket too.
//
// The connected socket is then made non-blocking, so that the wait for the
// daemon's answer (as long as the delegates take) parks in the Go runtime's
// netpoller. A read blocked in the kernel instead keeps the runtime's sysmon
// thread polling, every 20 µs at first, about 50 extra context switches and
// 0.8 ms of CPU per call here (docs/performance-history.md, change 11).
func connect(path string) (*os.File, error) {
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	tv := syscall.Timeval{Sec: connectTimeout}
	if err := syscall.SetsockoptTimeval(fd, syscall.SOL_SOCKET, syscall.SO_SNDTIMEO, &tv); err != nil {
		syscall.Close(fd)
		return nil, err
	}
	if err := syscall.Connect(fd, &syscall.SockaddrUnix{Name: path}); err != nil {
		syscall.Close(fd)
		return nil, err
	}
	if err := syscall.SetNonblock(fd, true); err != nil {
		syscall.Close(fd)
		return nil, err
	}
	return os.NewFile(uintptr(fd), path), nil
}

func call(conn *os.File, req *shimproto.Request) (*shimproto.Reply, error) {
	if err := shimproto.WriteRequest(conn, req); err != nil {
		return nil, errors.New("send the call: " + err.Error())
	}
	rep, err := shimproto.ReadReply(conn)
	if err != nil {
		return nil, errors.New("connection lost before the answer: " + err.Error())
	}
	return rep, nil
}

// fallback replaces the shim with the manifold binary from the shim's own
// directory, with the runtime's environment and the same stdin. It returns
// only if that cannot be done.
func fallback(data []byte, stdout, stderr io.Writer, environ []string, cniVersion, why string) int {
	bin := filepath.Join(ownDir(), "manifold")
	io.WriteString(stderr, "manifold-shim: "+why+"; running "+bin+" instead\n")
	if err := stdinFrom(data); err != nil {
		return cniError(stdout, cniVersion, codeTryAgainLater, "manifold-shim: "+why+", and stdin for "+bin+" could not be set up: "+err.Error())
	}
	err := syscall.Exec(bin, []string{bin}, environ)
	return cniError(stdout, cniVersion, codeTryAgainLater, "manifold-shim: "+why+", and "+bin+" could not be run: "+err.Error())
}

// stdinFrom makes fd 0 an in-memory file that holds data, from its start.
func stdinFrom(data []byte) error {
	fd, err := unix.MemfdCreate("manifold-stdin", 0)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), "stdin")
	defer f.Close()
	if _, err := f.Write(data); err != nil {
		return err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	return syscall.Dup3(fd, 0, 0)
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
	var b strings.Builder
	b.WriteString("{")
	if cniVersion != "" {
		b.WriteString(`"cniVersion":` + jsonString(cniVersion) + ",")
	}
	b.WriteString(`"code":` + strconv.Itoa(code) + `,"msg":` + jsonString(msg) + "}\n")
	io.WriteString(stdout, b.String())
	return 1
}

// jsonString quotes s as a JSON string.
func jsonString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20 || r == 0x2028 || r == 0x2029:
			b.WriteString(`\u`)
			h := strconv.FormatInt(int64(r), 16)
			b.WriteString(strings.Repeat("0", 4-len(h)) + h)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}
