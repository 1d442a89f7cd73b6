// Package delegate runs a pod's delegate networks through libcni: ADD in order,
// DEL in reverse order, rollback, CHECK, STATUS and GC (DESIGN §7).
package delegate

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"

	"github.com/manifold-cni/manifold/netconf"
	"github.com/manifold-cni/manifold/scratch"
)

// AttachmentIfnameKey is the log key of one attachment's interface name. The
// call's own interface (CNI_IFNAME) is "ifname" on every line of the call, and
// a JSON line may not carry a key twice (DESIGN §8).
const AttachmentIfnameKey = "attachmentIfname"

// Runner runs delegates. Its dependencies are fields so tests can swap them.
type Runner struct {
	// CNI runs the plugins; normally a *libcni.CNIConfig whose cache dir is cniDir.
	CNI libcni.CNI
	// Store holds the scratch records.
	Store *scratch.Store
	// Log receives one line per delegate call at debug level, and warnings.
	Log *slog.Logger
	// LockTimeout bounds the wait for another call on the same container.
	LockTimeout time.Duration
	// UndoTimeout bounds each delegate's DEL, in DEL and in the rollback of a
	// failed ADD, apart from the call's own context: the ADD may have failed
	// because that ended (a delegate that hung past callTimeout, or a daemon
	// call whose shim hung up), and one DEL that hangs must not stop the
	// others. 0 means netconf.DefaultCallTimeout.
	UndoTimeout time.Duration
	// RetryDeleteOnError keeps the record when a delegate DEL fails.
	RetryDeleteOnError bool
	// MultusDir is Multus's cniDir, where DEL, CHECK and GC read what Multus
	// attached to a container that manifold has no record of; "" turns that
	// off (Multus's records in cniDir are still read). CNIFor builds the
	// libcni whose cache dir is MultusDir; nil turns MultusDir off too.
	MultusDir string
	CNIFor    func(cacheDir string) libcni.CNI
	// AllowedPluginTypes is the node's allowedPluginTypes, which the
	// networks Multus attached from a NAD are held to, as at ADD
	// (multus.Options).
	AllowedPluginTypes []string
	// Concurrent attaches independent extra networks at once, in waves
	// (concurrentAttachments; waves).
	Concurrent bool
	// Prestart, when set, is the Exec that CNI runs plugins with: ADD and
	// DEL tell it the plugin calls to expect, so that it can start each
	// process before its turn. CNI must then be a *libcni.CNIConfig.
	Prestart *Exec
	// Confirm, when set, is called by Add before each attachment after the
	// first, with its position and the attachment as recorded. It returns nil
	// to run the attachment as recorded; a replacement, which Add records
	// before it runs it; or an error, which fails the ADD as a delegate's
	// would: what was attached is undone. The node daemon builds networks
	// from remembered NAD configs while their reads are on the way, and
	// confirms them here (cmd/manifold, nadCache.speculate).
	Confirm func(ctx context.Context, i int, recorded *netconf.Attachment) (*netconf.Attachment, error)
	// Prepare, when set, is called by Add just before each attachment's
	// delegate runs, once the record that holds it is durable: the node's
	// files that the attachment's plugins read (a Device Info file) are made
	// then, so that a crash leaves none that DEL would not remove.
	Prepare func(att *netconf.Attachment)
	// Released, when set, is called by Del (and by a hot-plug's Detach) with
	// the recorded attachments whose delegates' DEL succeeded, before it
	// returns: what manifold told the API server about them (a DRA claim's
	// status) is taken back then. It needs nothing from the attachments'
	// delegates, and its failure is its own to report.
	Released func(ctx context.Context, rec *scratch.Record, atts []netconf.Attachment)
}

// NewCNI returns the libcni runner used in production: plugins are looked up in
// binDir first and then in CNI_PATH, and results are cached under cniDir.
func NewCNI(binDir, cniPath, cniDir string, exec invoke.Exec) *libcni.CNIConfig {
	paths := []string{binDir}
	for _, p := range splitPath(cniPath) {
		if p != binDir {
			paths = append(paths, p)
		}
	}
	return libcni.NewCNIConfigWithCacheDir(paths, cniDir, withPassthru(exec))
}

func splitPath(p string) []string {
	var out []string
	start := 0
	for i := 0; i <= len(p); i++ {
		if i == len(p) || p[i] == os.PathListSeparator {
			if i > start {
				out = append(out, p[start:i])
			}
			start = i + 1
		}
	}
	return out
}

func (r *Runner) lock(ctx context.Context, containerID string) (*scratch.Lock, error) {
	timeout := r.LockTimeout
	if timeout <= 0 {
		timeout = netconf.DefaultLockTimeout
	}
	lctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	l, err := r.Store.Lock(lctx, containerID)
	if errors.Is(err, scratch.ErrLockTimeout) {
		return nil, netconf.TryAgainLater("%v (another CNI call on this container is still running)", err)
	}
	return l, err
}

// runtimeConf is what libcni needs to call one attachment's plugins.
func runtimeConf(rec *scratch.Record, att *netconf.Attachment) *libcni.RuntimeConf {
	return &libcni.RuntimeConf{
		ContainerID:    rec.ContainerID,
		NetNS:          rec.NetNS,
		IfName:         att.IfName,
		Args:           netconf.DelegateArgs(rec.RuntimeArgs, att.CNIArgs),
		CapabilityArgs: att.RuntimeConfig,
	}
}

// ExpectAdd tells Prestart that an ADD of rec's attachments comes next, so
// that the first plugin's process starts now. ADD may know only the default
// network at this point; Add itself gives the full list.
func (r *Runner) ExpectAdd(rec *scratch.Record) {
	atts := make([]*netconf.Attachment, len(rec.Attachments))
	for i := range rec.Attachments {
		atts[i] = &rec.Attachments[i]
	}
	r.expect("ADD", rec, atts)
}

// expect tells Prestart the plugin calls that running cmd ("ADD" or "DEL")
// on atts, in that order, will make: for each attachment, each plugin of its
// conflist (in reverse for DEL, as libcni runs them), with the path and
// environment that libcni will pass. It stops at the first attachment it
// cannot predict; a wrong prediction costs only the early start.
func (r *Runner) expect(cmd string, rec *scratch.Record, atts []*netconf.Attachment) {
	if _, ok := r.CNI.(*libcni.CNIConfig); r.Prestart == nil || !ok {
		return
	}
	r.Prestart.Expect(r.calls(cmd, rec, atts, false))
}

// expectWave tells Prestart that the first plugin calls of the wave's
// attachments come next, at once (Exec.ExpectAnyOrder).
func (r *Runner) expectWave(rec *scratch.Record, wave []int) {
	if _, ok := r.CNI.(*libcni.CNIConfig); r.Prestart == nil || !ok {
		return
	}
	atts := make([]*netconf.Attachment, len(wave))
	for k, i := range wave {
		atts[k] = &rec.Attachments[i]
	}
	r.Prestart.ExpectAnyOrder(r.calls("ADD", rec, atts, true))
}

// calls predicts the plugin calls of cmd on atts, in order: every plugin of
// each conflist, or with firstOnly the first each runs. It stops at the
// first attachment it cannot predict. r.CNI is a *libcni.CNIConfig.
func (r *Runner) calls(cmd string, rec *scratch.Record, atts []*netconf.Attachment, firstOnly bool) []Call {
	cfg := r.CNI.(*libcni.CNIConfig)
	var calls []Call
	for _, att := range atts {
		list, err := confList(att)
		if err != nil {
			return calls
		}
		rt := runtimeConf(rec, att) // Del has already blanked a netns that is gone
		env := planEnv(&invoke.Args{
			Command:     cmd,
			ContainerID: rt.ContainerID,
			NetNS:       rt.NetNS,
			PluginArgs:  rt.Args,
			IfName:      rt.IfName,
			Path:        strings.Join(cfg.Path, string(os.PathListSeparator)),
		})
		plugins := list.Plugins
		if cmd == "DEL" {
			plugins = slices.Clone(plugins)
			slices.Reverse(plugins)
		}
		if firstOnly {
			plugins = plugins[:1]
		}
		for _, p := range plugins {
			path, err := r.Prestart.FindInPath(p.Network.Type, cfg.Path)
			if err != nil {
				return calls
			}
			calls = append(calls, Call{Path: path, Env: env, sorted: env})
		}
	}
	return calls
}

// isNodeNetNS reports whether path is this process's own network namespace:
// the node's, in the binary and in the daemon alike (hostNetwork).
func isNodeNetNS(path string) bool {
	if path == "" {
		return false
	}
	a, errA := os.Stat(path)
	b, errB := os.Stat("/proc/self/ns/net")
	return errA == nil && errB == nil && os.SameFile(a, b)
}

// netnsGone reports whether a netns path no longer exists. Delegates are then
// called with an empty netns, which the CNI spec allows for DEL and which plugins
// handle by releasing only host-side state.
func netnsGone(path string) bool {
	if path == "" {
		return false
	}
	_, err := os.Stat(path)
	return errors.Is(err, fs.ErrNotExist)
}
