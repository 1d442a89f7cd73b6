package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/manifold-cni/manifold/flow"
	"github.com/manifold-cni/manifold/netconf"
	"github.com/manifold-cni/manifold/shimproto"
)

// Bounds of the daemon's work that have no flag.
const (
	// hangupWait bounds how long a status write waits for the shim to hang up.
	hangupWait = 100 * time.Millisecond
	// busyWait is how long a call waits for a slot when --max-calls are in
	// flight, before it is answered "daemon busy" (code 11).
	busyWait = 5 * time.Second
	// killWait is how long, at shutdown, the calls that were cancelled get to
	// end (their delegates killed, their rollbacks run) before the daemon exits.
	killWait = 3 * time.Second
	// exitKillWait bounds the wait for the delegates' groups that are killed
	// last at exit; SIGKILL ends them in milliseconds.
	exitKillWait = time.Second
	// drainTimeout bounds the status writes still running at exit.
	drainTimeout = 5 * time.Second
	// stuckSlack is added to twice a call's callTimeout (the call, then its
	// rollback's budget) before the probe counts it as stuck.
	stuckSlack = 30 * time.Second
)

// errHungUp ends a call whose shim closed its connection: nobody is left to
// take the answer, and the runtime will run DEL or retry.
var errHungUp = errors.New("the runtime hung up: manifold-shim closed its connection")

// errShuttingDown ends the calls still running at the shutdown timeout.
var errShuttingDown = errors.New("the node daemon is shutting down (SIGTERM), and the call ran past --shutdown-timeout")

// daemon holds what lives across calls: the plugin, whose API clients, log
// files and status writes are shared by every call, and the calls in flight.
type daemon struct {
	plugin  *flow.Plugin
	log     *slog.Logger
	metrics *metrics

	// base is what every call's context derives from; cancelBase ends them
	// all, at the shutdown timeout.
	base       context.Context
	cancelBase context.CancelCauseFunc

	// slots are the calls served at once (--max-calls); conns the
	// connections held, waiting or served (twice as many).
	slots, conns    chan struct{}
	busyWait        time.Duration
	shutdownTimeout time.Duration
	killWait        time.Duration

	// peerUID is the only uid that may connect: root's. Unit tests, which
	// may run as another user, set their own.
	peerUID uint32

	// now and stuckAfter decide which calls the probe reports; tests replace
	// them.
	now        func() time.Time
	stuckAfter func(callTimeout time.Duration) time.Duration

	mu       sync.Mutex
	inflight map[*inflight]struct{}
}

// inflight is one call being served.
type inflight struct {
	cmd, containerID string
	start            time.Time
	// timeout is the call's callTimeout, once its config is parsed; until
	// then the default.
	timeout atomic.Int64
}

// setTimeout records the call's callTimeout (flow calls it once the
// call's config is parsed).
func (f *inflight) setTimeout(d time.Duration) {
	if f != nil {
		f.timeout.Store(int64(d))
	}
}

func newDaemon(log *slog.Logger, hostRoot string, node *netconf.NodePaths) *daemon {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m := newMetrics()
	apis := &apiCache{now: time.Now, build: func(c *netconf.Config) (flow.API, error) {
		api, err := flow.NewAPIClient(c)
		if err != nil {
			return nil, err
		}
		return &countedAPI{API: api, m: m}, nil
	}}
	d := &daemon{plugin: flow.NewShared(hostRoot, node, apis.get), metrics: m, log: log, busyWait: busyWait, shutdownTimeout: defaultShutdownTimeout, killWait: killWait,
		now: time.Now, stuckAfter: func(t time.Duration) time.Duration { return 2*t + stuckSlack }}
	d.plugin.SetPodDevices(podDevices)
	d.base, d.cancelBase = context.WithCancelCause(context.Background())
	d.setMaxCalls(defaultMaxCalls)
	return d
}

func (d *daemon) setMaxCalls(n int) {
	d.slots, d.conns = make(chan struct{}, n), make(chan struct{}, 2*n)
}

// serve answers calls until ctx is done, then stops taking new ones and waits
// for the calls in flight, at most shutdownTimeout: stopping one half way
// would leave a half-attached pod for DEL to clean. Past it, their contexts
// are cancelled, which kills their delegates, and after killWait more the
// daemon returns whatever is left.
func (d *daemon) serve(ctx context.Context, ln *net.UnixListener) error {
	// Close removes the socket file (net.UnixListener unlinks it), so the shims
	// that come after fall back to the binary at once.
	go func() {
		<-ctx.Done()
		ln.Close()
	}()
	var wg sync.WaitGroup
	defer d.shutdown(&wg)
	for {
		conn, err := ln.AcceptUnix()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			ln.Close()
			return fmt.Errorf("accept on the socket: %w", err)
		}
		select {
		case d.conns <- struct{}{}:
		default:
			d.log.Warn("too many connections on the socket; closing a new one", "held", cap(d.conns))
			conn.Close()
			continue
		}
		wg.Go(func() {
			defer func() { <-d.conns }()
			d.handle(conn)
		})
	}
}

// shutdown waits for the calls in flight, within the bounds of serve.
func (d *daemon) shutdown(wg *sync.WaitGroup) {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return
	case <-time.After(d.shutdownTimeout):
	}
	d.log.Warn("connections still open at the shutdown timeout; cancelling their calls", "timeout", d.shutdownTimeout.String(), "calls", d.describe(d.running(false)))
	d.cancelBase(errShuttingDown)
	select {
	case <-done:
	case <-time.After(d.killWait):
		d.log.Error("connections still open after their calls were cancelled; exiting without them", "waited", d.killWait.String(), "calls", d.describe(d.running(false)))
	}
}

// handle serves one connection: one call.
func (d *daemon) handle(conn *net.UnixConn) {
	defer conn.Close()
	// Only root may run calls, whatever the socket's mode and its directory's.
	cred, err := peerCred(conn)
	if err != nil || cred.Uid != d.peerUID {
		var pid, uid int32 = -1, -1
		if cred != nil {
			pid, uid = cred.Pid, int32(cred.Uid)
		}
		d.log.Warn("refused a connection that is not root's", "pid", pid, "uid", uid, "error", err)
		return
	}
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
	cmd := req.Getenv("CNI_COMMAND")
	if req.Getenv(probeEnv) == "1" {
		if stuck := d.running(true); len(stuck) > 0 {
			d.reply(conn, req, failure(types.ErrInternal, fmt.Sprintf("manifold daemon: %d calls ran past twice their callTimeout and more: their cancellation did not work: %s", len(stuck), d.describe(stuck))))
			return
		}
	}
	// VERSION needs no slot: it runs no delegate, and the liveness probe
	// must pass on a daemon whose slots are all taken by calls that work.
	if cmd != "VERSION" {
		if !d.acquire() {
			d.log.Warn("no call slot free; answering daemon busy", "cmd", cmd, "containerID", req.Getenv("CNI_CONTAINERID"), "maxCalls", cap(d.slots), "waited", d.busyWait.String())
			d.reply(conn, req, failure(types.ErrTryAgainLater, fmt.Sprintf("manifold daemon busy: all %d call slots (--max-calls) stayed taken for %s; try again later", cap(d.slots), d.busyWait)))
			return
		}
		defer func() { <-d.slots }()
	}
	// The shim sends nothing after its request: a read that returns means
	// it has gone (the runtime gave up, or was killed), and the call is
	// cancelled, which kills its delegate and frees the container's lock.
	ctx, cancel := context.WithCancelCause(d.base)
	defer cancel(nil)
	hungUp := make(chan struct{})
	go func() {
		io.Copy(io.Discard, conn)
		cancel(errHungUp)
		close(hungUp)
	}()
	answered := make(chan struct{})
	defer close(answered)
	call := d.track(cmd, req.Getenv("CNI_CONTAINERID"))
	d.metrics.inFlight.Inc()
	rep := d.plugin.ServeCall(ctx, req, answered, call.setTimeout)
	d.metrics.inFlight.Dec()
	d.metrics.observeCall(cmd, rep.ExitCode == 0, d.now().Sub(call.start))
	d.untrack(call)
	if !d.reply(conn, req, rep) {
		return
	}
	// The shim prints the answer and exits, and the runtime goes on with the
	// pod. The status write waits for the hang-up (bounded), so that it does
	// not compete with that for the CPU.
	select {
	case <-hungUp:
	case <-time.After(hangupWait):
	}
}

// reply writes rep to the shim, and reports whether it was delivered.
func (d *daemon) reply(conn *net.UnixConn, req *shimproto.Request, rep *shimproto.Reply) bool {
	conn.SetWriteDeadline(time.Now().Add(ioTimeout))
	if err := shimproto.WriteReply(conn, rep); err != nil {
		d.log.Warn("answer not delivered to the shim", "cmd", req.Getenv("CNI_COMMAND"), "containerID", req.Getenv("CNI_CONTAINERID"), "error", err)
		return false
	}
	return true
}

// failure is a reply that carries a CNI error, as the binary prints one.
func failure(code uint, msg string) *shimproto.Reply {
	data, _ := json.MarshalIndent(types.NewError(code, msg, ""), "", "    ")
	return &shimproto.Reply{ExitCode: 1, Stdout: data}
}

// acquire takes a call slot, waiting at most busyWait.
func (d *daemon) acquire() bool {
	select {
	case d.slots <- struct{}{}:
		return true
	default:
	}
	t := time.NewTimer(d.busyWait)
	defer t.Stop()
	select {
	case d.slots <- struct{}{}:
		return true
	case <-t.C:
		return false
	}
}

func (d *daemon) track(cmd, containerID string) *inflight {
	f := &inflight{cmd: cmd, containerID: containerID, start: d.now()}
	f.setTimeout(netconf.DefaultCallTimeout)
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.inflight == nil {
		d.inflight = map[*inflight]struct{}{}
	}
	d.inflight[f] = struct{}{}
	return f
}

func (d *daemon) untrack(f *inflight) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.inflight, f)
}

// running lists the calls in flight, oldest first; with stuckOnly, only those
// that have run longer than stuckAfter their callTimeout: calls whose
// cancellation did not work, which only a restart ends.
func (d *daemon) running(stuckOnly bool) []*inflight {
	now := d.now()
	d.mu.Lock()
	var out []*inflight
	for f := range d.inflight {
		if !stuckOnly || now.Sub(f.start) > d.stuckAfter(time.Duration(f.timeout.Load())) {
			out = append(out, f)
		}
	}
	d.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].start.Before(out[j].start) })
	return out
}

// describe names calls for a log line or the probe's answer.
func (d *daemon) describe(calls []*inflight) string {
	now := d.now()
	parts := make([]string, 0, len(calls))
	for _, f := range calls {
		parts = append(parts, fmt.Sprintf("%s of container %q running for %s (callTimeout %s)",
			f.cmd, f.containerID, now.Sub(f.start).Round(time.Second), time.Duration(f.timeout.Load())))
	}
	return strings.Join(parts, "; ")
}
