// Package flow is one CNI call of manifold, from its config to its result:
// choosing a pod's networks, reading the pod and its NADs, the record, the
// delegates, the status and the events (DESIGN §3-§8). The thin binary
// (cmd/manifold) and the node daemon drive it; the daemon through ServeCall,
// which answers a call from manifold-shim as the binary would.
package flow

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/manifold-cni/manifold/delegate"
	"github.com/manifold-cni/manifold/k8sclient"
	"github.com/manifold-cni/manifold/netconf"
	"github.com/manifold-cni/manifold/scratch"
)

// Plugin holds what the verbs depend on, so tests can swap them.
type Plugin struct {
	// ctx is what a call's context derives from: in the daemon, it is
	// cancelled when the shim hangs up; nil means context.Background.
	ctx  context.Context
	exec invoke.Exec // nil: run plugin binaries for real, through delegate.Exec
	// hostRoot is the daemon's --host-root: delegates run chrooted into it.
	hostRoot string
	// node is the daemon's node paths (--bin-dir, ...), which override the
	// request's config; nil in the binary, whose config is the runtime's own.
	node *netconf.NodePaths
	// devices asks the kubelet for a pod's devices; nil: execPodDevices.
	devices PodDevices
	// onTimeout, in a daemon call, learns the call's callTimeout once its
	// config is parsed, for the liveness probe; nil otherwise.
	onTimeout func(time.Duration)
	stdout    io.Writer
	stderr    io.Writer
	now       func() time.Time
	// newAPI builds the API client; tests replace it.
	newAPI func(conf *netconf.Config) (podAPI, error)
	// logs is the daemon's shared log files; nil in the binary, where each
	// call opens and closes its own.
	logs *logFiles
	// reports is the daemon's status writes in flight; nil in the binary,
	// which writes the status before it answers.
	reports *reports
	// nadMemory is the daemon's memory of the NADs it has read; nil in the
	// binary (nadCache.speculate).
	nadMemory *nadMemory
	// answered, in a daemon call, is closed once the answer is delivered and
	// the shim has gone: the status write waits for it.
	answered <-chan struct{}
}

// Version is manifold's version, set at build time with -ldflags
// "-X github.com/manifold-cni/manifold/flow.Version=...".
var Version = "dev"

// New is the plugin of the thin binary: one call, on stdin and stdout.
func New() *Plugin {
	return &Plugin{stdout: os.Stdout, stderr: os.Stderr, now: time.Now, newAPI: NewAPIClient}
}

// NewShared is the plugin of the node daemon, shared by every call it
// serves: log files stay open, status writes run after the answer, NADs are
// remembered, and newAPI hands out the daemon's long-lived API clients.
// Delegates run chrooted into hostRoot when it is set; node, when set, fixes
// the node-level keys of every call's config.
func NewShared(hostRoot string, node *netconf.NodePaths, newAPI func(*netconf.Config) (API, error)) *Plugin {
	p := New()
	p.hostRoot = hostRoot
	p.node = node
	p.newAPI = newAPI
	p.logs = &logFiles{}
	p.reports = &reports{}
	p.nadMemory = &nadMemory{}
	return p
}

// shared reports whether this is the node daemon's plugin (NewShared).
func (p *Plugin) shared() bool { return p.reports != nil }

// Funcs are the verbs, for skel.PluginMainFuncs.
func (p *Plugin) Funcs() skel.CNIFuncs {
	return skel.CNIFuncs{Add: p.cmdAdd, Del: p.cmdDel, Check: p.cmdCheck, Status: p.cmdStatus, GC: p.cmdGC}
}

// DrainWithin waits, at most bound, for the status writes that the daemon's
// calls left running. It reports whether all were done.
func (p *Plugin) DrainWithin(bound time.Duration) bool { return p.reports.drainWithin(bound) }

// NewAPIClient is the API client of one call: a new connection per client.
func NewAPIClient(conf *netconf.Config) (API, error) {
	return k8sclient.New(conf.Kubeconfig, conf.APITimeout)
}

// call is the state of one CNI invocation.
type call struct {
	// ctx bounds the whole call by callTimeout; cancel releases it (finish).
	ctx      context.Context
	cancel   context.CancelFunc
	cmd      string
	start    time.Time
	args     *skel.CmdArgs
	conf     *netconf.Config
	cniArgs  [][2]string
	pod      netconf.PodRef
	log      *slog.Logger
	closeLog func()
	runner   *delegate.Runner
	// exec runs the delegates; nil when a test supplied plugin.exec.
	exec *delegate.Exec
}

// envError is a CNI environment that manifold refuses (code 4).
type envError struct{ cni *types.Error }

func badEnv(msg string) error {
	return &envError{types.NewError(types.ErrInvalidEnvironmentVariables, msg, "")}
}

func (e *envError) Error() string { return e.cni.Msg }

// Unwrap exposes the CNI error, so its code reaches the runtime.
func (e *envError) Unwrap() error { return e.cni }

// begin parses what every verb needs: the config, the logger, CNI_ARGS. A config
// error returns a nil call. An environment error returns the call too, so the
// verb can decide: ADD refuses, DEL knows nothing can be attached under a name
// that ADD would have refused.
func (p *Plugin) begin(cmd string, args *skel.CmdArgs) (*call, error) {
	parse := netconf.ParseConfig
	if cmd == "DEL" {
		// DEL must not leave a pod's networks behind over a key it can do
		// without (netconf.ParseConfigForDel).
		parse = netconf.ParseConfigForDel
	}
	conf, err := parse(args.StdinData)
	if err != nil {
		return nil, err
	}
	if p.node != nil {
		if err := p.node.Apply(args.StdinData, conf); err != nil {
			return nil, err
		}
	}
	if p.onTimeout != nil {
		p.onTimeout(conf.CallTimeout)
	}
	c := &call{cmd: cmd, args: args, conf: conf, start: time.Now()}
	c.ctx, c.cancel = p.callContext(conf.CallTimeout)
	c.log, c.closeLog = newLogger(conf, p.stderr, p.logs)
	c.log = c.log.With("cmd", cmd, "containerID", args.ContainerID, "ifname", args.IfName)
	var envErr error
	if args.ContainerID != "" {
		if err := scratch.ValidateContainerID(args.ContainerID); err != nil {
			envErr = badEnv("CNI_CONTAINERID: " + err.Error())
		}
	}
	if args.IfName != "" && envErr == nil {
		if err := netconf.ValidateIfName(args.IfName); err != nil {
			envErr = badEnv("CNI_IFNAME: " + err.Error())
		}
	}
	c.cniArgs, err = netconf.ParseCNIArgs(args.Args)
	if err != nil && envErr == nil {
		envErr = badEnv(err.Error())
	}
	c.pod = netconf.PodFromArgs(c.cniArgs)
	c.log = c.log.With("pod", c.pod.String())
	logConfigWarnings(c.log, conf)
	ex := p.exec
	if ex == nil {
		// Each delegate's call returns as soon as it has exited, and its
		// process is reaped later, once its threads are done with their
		// own exit (delegate.Exec.ReapLater). The binary, which exits after
		// the call, reaps those still pending at the end of it (finish).
		c.exec = &delegate.Exec{Root: p.hostRoot, Stderr: os.Stderr, ReapLater: true, KeepPending: !p.shared()}
		ex = c.exec
	}
	cniPath := args.Path
	if p.node != nil {
		// The daemon runs delegates from its own --bin-dir only.
		cniPath = ""
	}
	c.runner = &delegate.Runner{
		CNI:                delegate.NewCNI(conf.BinDir, cniPath, conf.CNIDir, ex),
		Store:              &scratch.Store{Dir: conf.CNIDir},
		Log:                c.log,
		LockTimeout:        conf.LockTimeout,
		UndoTimeout:        conf.CallTimeout,
		RetryDeleteOnError: conf.RetryDeleteOnError,
		Concurrent:         conf.ConcurrentAttachments,
		MultusDir:          conf.MultusDir(),
		CNIFor:             func(dir string) libcni.CNI { return delegate.NewCNI(conf.BinDir, cniPath, dir, ex) },
		AllowedPluginTypes: conf.AllowedPluginTypes,
	}
	if c.exec != nil && conf.PrestartDelegates() {
		c.runner.Prestart = c.exec
	}
	c.runner.Released = p.releaseClaims(conf, c.log)
	return c, envErr
}

// callContext bounds one call by timeout (callTimeout): past it, the delegate
// running then is killed and the call fails, so that a delegate that never
// returns cannot hold the container's lock for good.
func (p *Plugin) callContext(timeout time.Duration) (context.Context, context.CancelFunc) {
	base := p.ctx
	if base == nil {
		base = context.Background()
	}
	return context.WithTimeoutCause(base, timeout, fmt.Errorf("the call ran past its deadline (callTimeout %s)", timeout))
}

// start is begin for the verbs that refuse a bad environment outright.
func (p *Plugin) start(cmd string, args *skel.CmdArgs) (*call, error) {
	c, err := p.begin(cmd, args)
	if err != nil && c != nil {
		return nil, c.finish(err)
	}
	return c, err
}

// finish is the one place where an error is logged and turned into the CNI error
// the runtime sees: the code is kept, and the message names the pod.
func (c *call) finish(err error) error {
	defer c.closeLog()
	defer c.cancel()
	// The binary's last step, after the record, the status write and the
	// log line: the delegates that ran early have long finished their exit
	// by now. The daemon's Exec keeps nothing pending, so this is nothing.
	defer c.exec.ReapPending()
	c.exec.Close()
	c.exec.LogStats(c.log)
	took := time.Since(c.start).Round(time.Microsecond).String()
	if err == nil {
		// The one line per call that an admin reads (DESIGN §8). The runtime
		// polls STATUS every few seconds, so a STATUS that succeeds says so
		// at debug level only.
		level := slog.LevelInfo
		if c.cmd == "STATUS" {
			level = slog.LevelDebug
		}
		c.log.Log(c.ctx, level, c.cmd+" done", "result", "ok", "duration", took)
		return nil
	}
	code := uint(types.ErrInternal)
	var te *types.Error
	if errors.As(err, &te) {
		code = te.Code
	}
	msg := err.Error()
	if c.pod.Name != "" {
		msg = fmt.Sprintf("pod %s: %s", c.pod, msg)
	}
	c.log.Error(c.cmd+" failed", "result", "error", "code", code, "error", msg, "duration", took)
	return types.NewError(code, msg, "")
}
