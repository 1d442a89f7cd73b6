package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/manifold-cni/manifold/shimproto"
)

// ioTimeout bounds reading a call from the shim and writing the answer back.
// The call itself is bounded by the verbs' own timeouts, as in the binary.
const ioTimeout = 10 * time.Second

// runDaemon is `manifold daemon`, the node daemon of thick mode
// (docs/thick-mode.md). It serves the calls that manifold-shim passes over the
// socket with the same verbs as the binary, in one long-lived process.
func runDaemon(args []string) int {
	fs := flag.NewFlagSet("manifold daemon", flag.ContinueOnError)
	socket := fs.String("socket", shimproto.DefaultSocket, "the unix socket to listen on")
	hostRoot := fs.String("host-root", "", "the host's root filesystem as mounted in the daemon's container; delegates run chrooted into it")
	probe := fs.Bool("probe", false, "do not serve: ask the daemon on --socket for VERSION, and exit 0 if it answers within 5s (a liveness probe)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *probe {
		if err := probeDaemon(*socket, probeTimeout); err != nil {
			fmt.Fprintf(os.Stderr, "manifold daemon --probe: %v\n", err)
			return 1
		}
		return 0
	}
	if *hostRoot != "" {
		if fi, err := os.Stat(*hostRoot); err != nil || !fi.IsDir() || !filepath.IsAbs(*hostRoot) {
			fmt.Fprintf(os.Stderr, "manifold daemon: --host-root %q must be an absolute path to a directory (%v)\n", *hostRoot, err)
			return 2
		}
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	ln, err := takeSocket(ctx, log, *socket)
	if err != nil {
		log.Error("daemon failed to start", "error", err)
		return 1
	}
	log.Info("daemon listening", "socket", *socket, "hostRoot", *hostRoot, "version", Version)
	d := newDaemon(log)
	d.plugin.hostRoot = *hostRoot
	err = d.serve(ctx, ln)
	d.plugin.reports.drain()
	if err != nil {
		// Exit non-zero, so that the DaemonSet restarts the daemon; until
		// then the shims run the binary.
		log.Error("daemon stopped", "error", err)
		return 1
	}
	log.Info("daemon stopped")
	return 0
}

// daemon holds what lives across calls: the plugin, whose API clients, log
// files and status writes are shared by every call.
type daemon struct {
	plugin *plugin
	log    *slog.Logger
}

func newDaemon(log *slog.Logger) *daemon {
	p := newPlugin()
	apis := &apiCache{now: time.Now, build: newAPIClient}
	p.newAPI = apis.get
	p.logs = &logFiles{}
	p.reports = &reports{}
	p.nadMemory = &nadMemory{}
	return &daemon{plugin: p, log: log}
}

// probeTimeout bounds a liveness probe: connect, call and answer.
const probeTimeout = 5 * time.Second

// probeDaemon makes one VERSION call through the socket, as the shim would.
// It checks that the daemon accepts, reads, dispatches and answers; not the
// API server or the delegates, whose faults are the calls' own to report.
func probeDaemon(socket string, timeout time.Duration) error {
	conn, err := net.DialTimeout("unix", socket, timeout)
	if err != nil {
		return err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(timeout))
	if err := shimproto.WriteRequest(conn, &shimproto.Request{Env: []string{"CNI_COMMAND=VERSION"}}); err != nil {
		return fmt.Errorf("send VERSION to %s: %w", socket, err)
	}
	rep, err := shimproto.ReadReply(conn)
	if err != nil {
		return fmt.Errorf("answer to VERSION from %s: %w", socket, err)
	}
	if rep.ExitCode != 0 || !strings.Contains(string(rep.Stdout), "supportedVersions") {
		return fmt.Errorf("answer to VERSION from %s: exit %d, %q", socket, rep.ExitCode, rep.Stdout)
	}
	return nil
}

// errSocketBusy is listenSocket's answer when a live daemon holds the socket.
var errSocketBusy = errors.New("another daemon is answering there")

// takeSocket listens on path. While another daemon answers there (the old pod
// of a rolling update that starts the new pod first), it waits for it to stop:
// the old daemon finishes its calls, and until the new one listens the shims
// run the binary.
func takeSocket(ctx context.Context, log *slog.Logger, path string) (*net.UnixListener, error) {
	for logged := false; ; logged = true {
		ln, err := listenSocket(path)
		if !errors.Is(err, errSocketBusy) {
			return ln, err
		}
		if !logged {
			log.Info("another daemon holds the socket; waiting for it to stop", "socket", path)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("listen on %s: stopped while %w", path, err)
		case <-time.After(time.Second):
		}
	}
}

// listenSocket listens on path, in a directory only root can enter. A socket
// file left by a daemon that is gone is replaced; one that a live daemon
// answers on is not.
func listenSocket(path string) (*net.UnixListener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("create socket dir for %s: %w", path, err)
	}
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		c.Close()
		return nil, fmt.Errorf("listen on %s: %w", path, errSocketBusy)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("remove stale socket %s: %w", path, err)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	// The socket runs CNI calls as root: only root may connect.
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("restrict socket %s: %w", path, err)
	}
	return ln, nil
}

// serve answers calls until ctx is done, then stops taking new ones and waits
// for the calls in flight: stopping one half way would leave a half-attached
// pod for DEL to clean.
func (d *daemon) serve(ctx context.Context, ln *net.UnixListener) error {
	// Close removes the socket file (net.UnixListener unlinks it), so the shims
	// that come after fall back to the binary at once.
	go func() {
		<-ctx.Done()
		ln.Close()
	}()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		conn, err := ln.AcceptUnix()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			ln.Close()
			return fmt.Errorf("accept on the socket: %w", err)
		}
		wg.Go(func() { d.handle(conn) })
	}
}

// handle serves one connection: one call.
func (d *daemon) handle(conn *net.UnixConn) {
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(ioTimeout))
	req, err := shimproto.ReadRequest(conn)
	if errors.Is(err, io.EOF) {
		return // a connection closed before it said anything: a liveness probe
	}
	if err != nil {
		d.log.Warn("bad call on the socket", "error", err)
		return
	}
	conn.SetDeadline(time.Time{})
	answered := make(chan struct{})
	defer close(answered)
	rep := d.plugin.serveCall(req, answered)
	conn.SetDeadline(time.Now().Add(ioTimeout))
	if err := shimproto.WriteReply(conn, rep); err != nil {
		d.log.Warn("answer not delivered to the shim", "cmd", req.Getenv("CNI_COMMAND"), "containerID", req.Getenv("CNI_CONTAINERID"), "error", err)
		return
	}
	// The shim prints the answer and exits, and the runtime goes on with the
	// pod. The status write waits for the hang-up (bounded), so that it does
	// not compete with that for the CPU.
	conn.SetReadDeadline(time.Now().Add(hangupWait))
	io.Copy(io.Discard, io.LimitReader(conn, 1))
}

// hangupWait bounds how long a status write waits for the shim to hang up.
const hangupWait = 100 * time.Millisecond
