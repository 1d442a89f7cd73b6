package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/manifold-cni/manifold/flow"
	"github.com/manifold-cni/manifold/multusapi"
	"github.com/manifold-cni/manifold/netconf"
	"github.com/manifold-cni/manifold/shimproto"
)

// Multus's daemon API on this daemon (docs/thick-mode.md, "Multus's daemon
// API"): package multusapi's endpoints on a second unix socket, served with
// the same bounds and checks as manifold's own: only root's connections,
// the same call slots, the calls' contexts ended by the shutdown, and
// /delegate only when hot-plug belongs to an external controller.

// multusBackend is the daemon's work behind multusapi's endpoints.
type multusBackend struct {
	d *daemon
	// mode is --hotplug: /delegate serves only an external controller.
	mode hotplugMode
	// stopping is done once the daemon stops taking calls (/readyz).
	stopping context.Context
}

// callContext is a call's context: ended by the caller's hang-up (the
// request's context) and by the daemon's shutdown (d.base).
func (b *multusBackend) callContext(req context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(b.d.base)
	stop := context.AfterFunc(req, func() { cancel(errors.New("the caller hung up: it closed its connection to the Multus socket")) })
	return ctx, func() {
		stop()
		cancel(nil)
	}
}

// Call runs one /cni call as a call from manifold-shim: a call slot, the
// probe's list of calls in flight, and the metrics.
func (b *multusBackend) Call(ctx context.Context, req *shimproto.Request, answered <-chan struct{}) *shimproto.Reply {
	cmd := req.Getenv("CNI_COMMAND")
	if !b.d.acquire() {
		b.d.log.Warn("no call slot free; answering daemon busy", "cmd", cmd, "containerID", req.Getenv("CNI_CONTAINERID"), "maxCalls", cap(b.d.slots), "waited", b.d.busyWait.String(), "socket", "multus")
		return failure(types.ErrTryAgainLater, fmt.Sprintf("manifold daemon busy: all %d call slots (--max-calls) stayed taken for %s; try again later", cap(b.d.slots), b.d.busyWait))
	}
	defer func() { <-b.d.slots }()
	cctx, cancel := b.callContext(ctx)
	defer cancel()
	call := b.d.track(cmd, req.Getenv("CNI_CONTAINERID"))
	b.d.metrics.inFlight.Inc()
	rep := b.d.plugin.ServeCall(cctx, req, answered, call.setTimeout)
	b.d.metrics.inFlight.Dec()
	b.d.metrics.observeCall(cmd, rep.ExitCode == 0, b.d.now().Sub(call.start))
	b.d.untrack(call)
	return rep
}

// errNotExternal refuses /delegate while hot-plug is not an external
// controller's: two owners of one pod's changes would undo each other's.
func (b *multusBackend) refuseDelegate() error {
	if b.mode == hotplugExternal {
		return nil
	}
	return netconf.Invalid("manifold daemon: /delegate is served only with --hotplug=external (it is %s): hot-plug belongs to one owner, and here it is %s", b.mode, b.mode.owner())
}

// Plug is /delegate's ADD.
func (b *multusBackend) Plug(ctx context.Context, req *flow.PlugRequest) (types.Result, error) {
	var res types.Result
	err := b.plugCall(ctx, "ADD", req, func(ctx context.Context) error {
		var err error
		res, err = b.d.plugin.PlugOne(ctx, req)
		return err
	})
	return res, err
}

// Unplug is /delegate's DEL.
func (b *multusBackend) Unplug(ctx context.Context, req *flow.PlugRequest) error {
	return b.plugCall(ctx, "DEL", req, func(ctx context.Context) error { return b.d.plugin.UnplugOne(ctx, req) })
}

func (b *multusBackend) plugCall(ctx context.Context, cmd string, req *flow.PlugRequest, do func(context.Context) error) error {
	if err := b.refuseDelegate(); err != nil {
		b.d.log.Warn("multus API: /delegate refused", "cmd", cmd, "containerID", req.ContainerID, "pod", req.Pod.Namespace+"/"+req.Pod.Name, "ifname", req.IfName, "error", err)
		return err
	}
	if !b.d.acquire() {
		return netconf.TryAgainLater("manifold daemon busy: all %d call slots (--max-calls) stayed taken for %s; try again later", cap(b.d.slots), b.d.busyWait)
	}
	defer func() { <-b.d.slots }()
	cctx, cancel := b.callContext(ctx)
	defer cancel()
	call := b.d.track("DELEGATE "+cmd, req.ContainerID)
	defer b.d.untrack(call)
	err := do(cctx)
	op := map[string]string{"ADD": "attach", "DEL": "detach"}[cmd]
	switch {
	case err == nil:
		b.d.metrics.hotplug.WithLabelValues(op, "ok").Inc()
	case netconf.Code(err) == types.ErrInvalidNetworkConfig:
		b.d.metrics.hotplug.WithLabelValues(op, "refused").Inc()
	default:
		b.d.metrics.hotplug.WithLabelValues(op, "error").Inc()
	}
	return err
}

// Healthy is /healthz: the daemon answers.
func (b *multusBackend) Healthy() error { return nil }

// Ready is /readyz: the daemon takes calls, until it stops.
func (b *multusBackend) Ready() error {
	if b.stopping.Err() != nil {
		return errors.New("the node daemon is stopping")
	}
	return nil
}

// rootListener hands over only connections whose peer is root (or the
// daemon's peerUID, in tests), and at most cap(d.conns) at once, counted
// with manifold's own socket's.
type rootListener struct {
	*net.UnixListener
	d *daemon
}

func (l rootListener) Accept() (net.Conn, error) {
	for {
		c, err := l.AcceptUnix()
		if err != nil {
			return nil, err
		}
		cred, err := peerCred(c)
		if err != nil || cred.Uid != l.d.peerUID {
			var pid, uid int32 = -1, -1
			if cred != nil {
				pid, uid = cred.Pid, int32(cred.Uid)
			}
			l.d.log.Warn("refused a connection that is not root's", "pid", pid, "uid", uid, "error", err, "socket", "multus")
			c.Close()
			continue
		}
		select {
		case l.d.conns <- struct{}{}:
		default:
			l.d.log.Warn("too many connections on the socket; closing a new one", "held", cap(l.d.conns), "socket", "multus")
			c.Close()
			continue
		}
		return &heldConn{UnixConn: c, release: func() { <-l.d.conns }}, nil
	}
}

// heldConn gives its connection slot back once, on Close.
type heldConn struct {
	*net.UnixConn
	once    sync.Once
	release func()
}

func (c *heldConn) Close() error {
	c.once.Do(c.release)
	return c.UnixConn.Close()
}

// multusServer is Multus's API on its socket.
type multusServer struct {
	srv *http.Server
	// drained is closed once the server has stopped and its calls ended.
	drained chan struct{}
}

// serveMultus serves Multus's API on ln until ctx is done.
func (d *daemon) serveMultus(ctx context.Context, ln *net.UnixListener, mode hotplugMode) *multusServer {
	b := &multusBackend{d: d, mode: mode, stopping: ctx}
	// A body is read within ioTimeout, as a frame on manifold's socket;
	// the call that follows is bounded by its own callTimeout.
	h := multusapi.Handler(b, d.log, os.Stderr, ioTimeout)
	srv := &http.Server{Handler: h, ReadHeaderTimeout: ioTimeout, MaxHeaderBytes: 64 << 10,
		ErrorLog: slog.NewLogLogger(d.log.Handler(), slog.LevelWarn)}
	// Multus's server keeps no connection alive: each client call dials.
	srv.SetKeepAlivesEnabled(false)
	s := &multusServer{srv: srv, drained: make(chan struct{})}
	served := make(chan struct{})
	go func() {
		defer close(served)
		if err := srv.Serve(rootListener{UnixListener: ln, d: d}); err != nil && !errors.Is(err, http.ErrServerClosed) {
			d.log.Error("the Multus socket stopped serving", "error", err)
		}
	}()
	go func() {
		defer close(s.drained)
		select {
		case <-ctx.Done():
		case <-served:
		}
		// Closing the listener unlinks the socket file; the calls in
		// flight finish, or end with d.base at the shutdown timeout.
		srv.Shutdown(context.Background())
		<-served
	}()
	return s
}

// waitWithin waits for the server's calls to end, at most bound.
func (s *multusServer) waitWithin(bound time.Duration) bool {
	if s == nil {
		return true
	}
	select {
	case <-s.drained:
		return true
	case <-time.After(bound):
		return false
	}
}

// Values of --multus-socket.
const (
	multusSocketAuto = "auto"
	multusSocketOff  = "off"
	// defaultMultusSocketFile is where manifold-install names Multus's
	// socket when it takes over a thick Multus (install's
	// MultusSocketFileName, in its credentials dir).
	defaultMultusSocketFile = "/etc/cni/net.d/manifold.d/multus-socket"
	// multusSocketPoll is how often --multus-socket=auto looks for the
	// installer's file until it is there.
	multusSocketPoll = 5 * time.Second
)

// multusAPI is the Multus socket's server once it serves.
type multusAPI struct {
	mu  sync.Mutex
	srv *multusServer
}

func (m *multusAPI) set(s *multusServer) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.srv = s
}

// waitWithin waits for the calls on the Multus socket, at most bound.
func (m *multusAPI) waitWithin(bound time.Duration) bool {
	m.mu.Lock()
	s := m.srv
	m.mu.Unlock()
	return s.waitWithin(bound)
}

// startMultusAPI serves Multus's API on the socket that flag names: none
// for "off"; for "auto", the one named in file once the installer has
// written it; else the path itself. The socket is taken in the background:
// Multus's own daemon may still answer on it (it is being replaced), and
// the daemon waits for it to stop as for another manifold daemon.
func startMultusAPI(ctx context.Context, log *slog.Logger, d *daemon, mode hotplugMode, flag, file string) (*multusAPI, error) {
	m := &multusAPI{}
	if flag == multusSocketOff || flag == "" {
		if mode == hotplugExternal {
			log.Warn("--hotplug=external with no Multus socket (--multus-socket=off): nothing hot-plugs")
		}
		return m, nil
	}
	if flag != multusSocketAuto {
		if err := validMultusSocket(flag); err != nil {
			return nil, fmt.Errorf("--multus-socket: %w", err)
		}
	}
	go func() {
		path := flag
		if flag == multusSocketAuto {
			var err error
			if path, err = awaitMultusSocketFile(ctx, log, file); err != nil || path == "" {
				if err != nil {
					log.Error("Multus's daemon API not served", "file", file, "error", err)
				}
				return
			}
		}
		ln, err := takeSocket(ctx, log, path, false)
		if err != nil {
			if ctx.Err() == nil {
				log.Error("Multus's daemon API not served", "socket", path, "error", err)
			}
			return
		}
		log.Info("Multus's daemon API served", "socket", path, "hotplug", string(mode))
		m.set(d.serveMultus(ctx, ln, mode))
	}()
	return m, nil
}

// validMultusSocket checks a Multus socket path: absolute, in a directory
// of its own (which the daemon makes 0700, as Multus does).
func validMultusSocket(path string) error {
	if !filepath.IsAbs(path) || filepath.Clean(path) != path || slices.Contains(sharedDirs, filepath.Dir(path)) {
		return fmt.Errorf("%q must be an absolute path in a directory of its own, such as %s", path, filepath.Join(multusapi.DefaultSocketDir, multusapi.SocketName))
	}
	return nil
}

// awaitMultusSocketFile waits for the installer's file and returns the
// socket it names; "" when ctx ends first. The installer writes it when it
// takes over a thick Multus, which may be after the daemon started (they
// start together), or never (no Multus on the node): then the file is
// looked for every multusSocketPoll, a stat each time.
func awaitMultusSocketFile(ctx context.Context, log *slog.Logger, file string) (string, error) {
	for logged := false; ; logged = true {
		data, err := os.ReadFile(file)
		if err == nil {
			path := strings.TrimSpace(string(data))
			if err := validMultusSocket(path); err != nil {
				return "", fmt.Errorf("the installer's %s: %w", file, err)
			}
			return path, nil
		}
		if !errors.Is(err, os.ErrNotExist) {
			return "", err
		}
		if !logged {
			log.Info("Multus's daemon API waits for the installer to take over a thick Multus", "file", file)
		}
		select {
		case <-ctx.Done():
			return "", nil
		case <-time.After(multusSocketPoll):
		}
	}
}
