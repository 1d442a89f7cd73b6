// Package daemon is `manifold daemon`, thick mode's node daemon
// (docs/thick-mode.md): the socket that manifold-shim calls, the node paths
// that its flags fix, the calls in flight and their bounds, and the API
// clients that calls share. Each call runs through package flow, as in the
// binary.
package daemon

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/manifold-cni/manifold/delegate"
	"github.com/manifold-cni/manifold/flow"
	"github.com/manifold-cni/manifold/netconf"
	"github.com/manifold-cni/manifold/shimproto"
)

// ioTimeout bounds reading a call from the shim and writing the answer back.
// The call itself is bounded by its callTimeout, as in the binary.
const ioTimeout = 10 * time.Second

// Defaults of the daemon's flags that bound its work.
const (
	defaultMaxCalls        = 128
	defaultShutdownTimeout = 20 * time.Second
)

// Run is `manifold daemon`, the node daemon of thick mode
// (docs/thick-mode.md). It serves the calls that manifold-shim passes over the
// socket with the same verbs as the binary, in one long-lived process.
func Run(args []string) int {
	fs := flag.NewFlagSet("manifold daemon", flag.ContinueOnError)
	socket := fs.String("socket", shimproto.DefaultSocket, "the unix socket to listen on; its directory is made 0700, so give it a directory of its own")
	hostRoot := fs.String("host-root", "", "the host's root filesystem as mounted in the daemon's container; delegates run chrooted into it")
	probe := fs.Bool("probe", false, "do not serve: ask the daemon on --socket for VERSION, and exit 0 if it answers within 5s and no call is stuck (a liveness probe)")
	maxCalls := fs.Int("max-calls", defaultMaxCalls, "calls served at once; a call beyond it waits for a slot for 5s, then gets code 11 (daemon busy)")
	shutdownTimeout := fs.Duration("shutdown-timeout", defaultShutdownTimeout, "on SIGTERM, how long calls in flight may finish before they are cancelled (their delegates killed)")
	nodeName := fs.String("node-name", os.Getenv("NODE_NAME"), "this node's name, for the pod watch of hot-plug (default: $NODE_NAME, which the DaemonSet sets from spec.nodeName)")
	hotplug := hotplugBuiltin
	fs.Var(&hotplug, "hotplug", "who changes a running pod's networks when its networks annotation changes (docs/hotplug.md): builtin (the daemon's pod watch; needs --node-name and an API server), external (a controller such as the multus-dynamic-networks-controller, through /delegate on the Multus socket; no pod watch) or off; true and false mean builtin and off")
	multusSocket := fs.String("multus-socket", multusSocketAuto, "serve Multus's daemon API (/cni, /delegate, /healthz, /readyz) on this unix socket (docs/thick-mode.md): an absolute path, \"auto\" (the path the installer wrote to --multus-socket-file when it took over a thick Multus, once that file is there) or \"off\"")
	multusSocketFile := fs.String("multus-socket-file", defaultMultusSocketFile, "with --multus-socket=auto, the file in which manifold-install names Multus's socket when it takes over a thick Multus")
	metricsAddr := fs.String("metrics-address", "", "serve Prometheus metrics on /metrics and a health check on /healthz at this host:port (127.0.0.1 only by convention); empty: off")
	cpuProfile := fs.String("cpu-profile", "", "write a Go CPU profile of the daemon's whole run to this file, for `go tool pprof` (docs/performance.md); empty: off")
	node := &netconf.NodePaths{}
	node.RegisterFlags(fs)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "manifold daemon: unexpected arguments %q\n", fs.Args())
		return 2
	}
	if *probe {
		if err := probeDaemon(*socket, probeTimeout); err != nil {
			fmt.Fprintf(os.Stderr, "manifold daemon --probe: %v\n", err)
			return 1
		}
		return 0
	}
	// Early, while the runtime has few threads, and not for --probe
	// (docs/performance-history.md, change 19).
	slackErr := delegate.RaiseTimerSlack(delegate.TimerSlack)
	procs := limitProcs()
	if *cpuProfile != "" {
		stop, err := startCPUProfile(*cpuProfile)
		if err != nil {
			fmt.Fprintf(os.Stderr, "manifold daemon: --cpu-profile: %v\n", err)
			return 2
		}
		defer stop()
	}
	if *hostRoot != "" {
		if fi, err := os.Stat(*hostRoot); err != nil || !fi.IsDir() || !filepath.IsAbs(*hostRoot) {
			fmt.Fprintf(os.Stderr, "manifold daemon: --host-root %q must be an absolute path to a directory (%v)\n", *hostRoot, err)
			return 2
		}
	}
	if err := node.Validate(); err != nil {
		fmt.Fprintf(os.Stderr, "manifold daemon: %v\n", err)
		return 2
	}
	if *maxCalls < 1 || *shutdownTimeout < 0 {
		fmt.Fprintf(os.Stderr, "manifold daemon: --max-calls %d must be at least 1, --shutdown-timeout %s at least 0s\n", *maxCalls, *shutdownTimeout)
		return 2
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	// Before any goroutine of ours creates a file: listenSocket sets the
	// process's umask for a moment.
	ln, err := takeSocket(ctx, log, *socket, true)
	if err != nil {
		log.Error("daemon failed to start", "error", err)
		return 1
	}
	d := newDaemon(log, *hostRoot, node)
	d.setMaxCalls(*maxCalls)
	d.shutdownTimeout = *shutdownTimeout
	hp := startHotplug(ctx, log, d, hotplug, *nodeName, node)
	ms, err := startMultusAPI(ctx, log, d, hotplug, *multusSocket, *multusSocketFile)
	if err != nil {
		ln.Close()
		log.Error("daemon failed to start", "error", err)
		return 1
	}
	if *metricsAddr != "" {
		// /livez is the liveness probe's check made from inside: a VERSION
		// call through the socket, as `--probe` makes it, without a process
		// started in the container for each probe.
		live := func() error { return probeDaemon(*socket, probeTimeout) }
		addr, err := serveMetrics(ctx, log, *metricsAddr, d.metrics, hp.health, live)
		if err != nil {
			ln.Close()
			log.Error("daemon failed to start", "error", fmt.Errorf("serve metrics on %s: %w", *metricsAddr, err))
			return 1
		}
		if addr != nil {
			log.Info("metrics and health served", "address", addr.String())
		}
	}
	if slackErr != nil {
		log.Info("the daemon's threads keep the default timer slack, which costs more CPU per call", "error", slackErr.Error())
	}
	log.Info("daemon listening", "socket", *socket, "hostRoot", *hostRoot, "binDir", node.BinDir, "cniDir", node.CNIDir,
		"confDir", node.ConfDir, "kubeconfig", node.Kubeconfig, "logFile", node.LogFile, "maxCalls", *maxCalls,
		"shutdownTimeout", shutdownTimeout.String(), "gomaxprocs", procs, "version", flow.Version)
	err = d.serve(ctx, ln)
	// The Multus socket's calls, bounded as the shim's: past the
	// shutdown timeout they are cancelled (d.base), then given killWait.
	if !ms.waitWithin(*shutdownTimeout) {
		d.cancelBase(errShuttingDown)
		if !ms.waitWithin(killWait) {
			log.Error("calls on the Multus socket still running after they were cancelled; exiting without them", "waited", killWait.String())
		}
	}
	if !hp.waitWithin(*shutdownTimeout) {
		log.Warn("hot-plug changes still running at exit; a pod's DEL or GC undoes what they left", "waited", shutdownTimeout.String())
	}
	if !d.plugin.DrainWithin(drainTimeout) {
		log.Warn("status writes still running at exit; their pods keep their networks but may lack network-status", "waited", drainTimeout.String())
	}
	// What is still running now (a rollback's DEL past the shutdown timeout,
	// a hot-plug change) would outlive the daemon: its plugin would get
	// SIGKILL from the kernel at the exit, but not what the plugin started.
	if left := delegate.KillAll(exitKillWait); len(left) > 0 {
		log.Error("delegate process groups still there after SIGKILL at exit; the node's init inherits them", "processGroups", left, "waited", exitKillWait.String())
	}
	if err != nil {
		// Exit non-zero, so that the DaemonSet restarts the daemon; until
		// then the shims run the binary.
		log.Error("daemon stopped", "error", err)
		return 1
	}
	log.Info("daemon stopped")
	return 0
}

// startCPUProfile starts Go's CPU profile into a new file at path, and
// returns what stops it and closes the file.
func startCPUProfile(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}

// probeTimeout bounds a liveness probe: connect, call and answer.
const probeTimeout = 5 * time.Second

// probeEnv marks a request as the liveness probe's. The daemon then also
// reports calls that are stuck; a daemon that predates it ignores the entry
// (it reads only CNI_* variables) and answers VERSION, as a probe expects.
const probeEnv = "MANIFOLD_PROBE"

// probeDaemon makes one VERSION call through the socket, as the shim would.
// It checks that the daemon accepts, reads, dispatches and answers, and that
// no call has outlived its bound (daemon.stuck); not the API server or the
// delegates, whose faults are the calls' own to report.
func probeDaemon(socket string, timeout time.Duration) error {
	conn, err := net.DialTimeout("unix", socket, timeout)
	if err != nil {
		return err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(timeout))
	if err := shimproto.WriteRequest(conn, &shimproto.Request{Env: []string{"CNI_COMMAND=VERSION", probeEnv + "=1"}}); err != nil {
		return fmt.Errorf("send VERSION to %s: %w", socket, err)
	}
	rep, err := shimproto.ReadReply(conn)
	if err != nil {
		return fmt.Errorf("answer to VERSION from %s: %w", socket, err)
	}
	if rep.ExitCode != 0 || !strings.Contains(string(rep.Stdout), "supportedVersions") {
		return fmt.Errorf("answer to VERSION from %s: exit %d, %s", socket, rep.ExitCode, rep.Stdout)
	}
	return nil
}

// errSocketBusy is listenSocket's answer when a live daemon holds the socket.
var errSocketBusy = errors.New("another daemon is answering there")

// takeSocket listens on path. While another daemon answers there (the old pod
// of a rolling update that starts the new pod first), it waits for it to stop:
// the old daemon finishes its calls, and until the new one listens the shims
// run the binary.
func takeSocket(ctx context.Context, log *slog.Logger, path string, umask bool) (*net.UnixListener, error) {
	for logged := false; ; logged = true {
		ln, err := listenSocket(path, umask)
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
