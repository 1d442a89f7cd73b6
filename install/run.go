package install

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Run installs manifold on the node and keeps the installation current until
// ctx is done (the DaemonSet pod is being stopped). It returns an error for what
// the admin must see, and what a restart of the pod may fix: a bad flag, a
// binary or credentials that cannot be installed, or no primary CNI config
// within --primary-wait-timeout. Later failures are logged and retried.
func Run(ctx context.Context, o *Options, log *slog.Logger) error {
	return run(ctx, o, log, os.Getenv)
}

// installer is the state of one Run.
type installer struct {
	o      *Options
	log    *slog.Logger
	server string
	// written is the config this process last wrote or found in place. Only
	// that exact content is removed on exit: a config that the admin or a tool
	// put there since is not ours to remove.
	written []byte
	lastErr string // the last error logged, so a persisting one is logged once
	// multus is Multus's config found in the conf dir by the last reconcile
	// (a node being taken over from Multus); nil when there is none.
	multus *multusConfig
	// multusLogged sums up the decisions on Multus's keys last logged, so
	// that they are logged once per change; multusDaemon is the thick Multus
	// daemon's config once read, and multusDaemonFrom where from.
	multusLogged     string
	multusDaemon     map[string]any
	multusDaemonFrom string
	// multusDaemonAbsent: no thick Multus's daemon config was found for a
	// node without Multus's config, and it is not asked for again.
	multusDaemonAbsent bool
	locks              *nodeLocks // tell a DaemonSet upgrade from an uninstall on shutdown
	getenv             func(string) string
	// nodeTok mints manifold's node-bound token (nodetoken.go); tokenWarned
	// is the last reason it could not, said once in the log.
	nodeTok     *nodeTokens
	tokenWarned string
}

// syncCredentials puts manifold's token, the CA and the kubeconfig on the
// host.
func (in *installer) syncCredentials() ([]string, error) {
	token, err := in.hostToken()
	if err != nil {
		return nil, err
	}
	return in.o.syncCredentials(in.server, token)
}

func run(ctx context.Context, o *Options, log *slog.Logger, getenv func(string) string) error {
	if err := o.validate(); err != nil {
		return err
	}
	server, err := o.apiServer(getenv)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(o.credDir(), 0o700); err != nil {
		return fmt.Errorf("create %s: %w", o.credDir(), err)
	}
	locks, err := lockNode(ctx, o.credDir(), log)
	if err != nil && ctx.Err() != nil {
		log.Info("stopped before becoming the active installer")
		return nil
	}
	if err != nil {
		return err
	}
	defer locks.release()
	in := &installer{o: o, log: log, server: server, locks: locks, getenv: getenv}
	if err := in.installBinaries(); err != nil {
		return err
	}
	// Credentials first and fatal: the config that names the kubeconfig must
	// not appear before it, and a missing token mount is a deployment bug.
	changed, err := in.syncCredentials()
	if err != nil {
		return err
	}
	log.Info("manifold kubeconfig in place", "dir", o.credDir(), "server", server, "updated", changed)

	dirs := []string{o.CNIConfDir, filepath.Dir(o.TokenFile), filepath.Dir(o.CAFile)}
	if o.ConfigFile != "" {
		dirs = append(dirs, filepath.Dir(o.ConfigFile))
	}
	w := newWatcher(dirs, o.PollInterval, !o.noNotify, log)
	defer w.close()

	var timeout <-chan time.Time
	if o.PrimaryWaitTimeout > 0 {
		t := time.NewTimer(o.PrimaryWaitTimeout)
		defer t.Stop()
		timeout = t.C
	}
	waiting := false
	for {
		err := in.reconcile()
		if errors.Is(err, ErrNoPrimary) && in.written == nil {
			if !waiting {
				log.Info("waiting for the primary CNI config", "dir", o.CNIConfDir, "timeout", o.PrimaryWaitTimeout)
				waiting = true
			}
		} else {
			in.report(err)
		}
		if in.written != nil {
			timeout = nil // installed: the bound was for the first config only
		}
		if w.wait(ctx, timeout) {
			return fmt.Errorf("no usable primary CNI config in %s after %s: %w", o.CNIConfDir, o.PrimaryWaitTimeout, err)
		}
		if ctx.Err() != nil {
			return in.shutdown()
		}
	}
}

// installBinaries copies the manifold binary, and the shim when one is given
// (by default in thick mode), into the host's CNI bin dir, under the names the
// config's "type" refers to. manifold goes first, because it is the shim's
// fallback, and both go before the config that names them.
//
// Neither is removed on exit, whatever --cleanup-config-on-exit says: removing
// the config is what takes manifold out of the node's path, and the binaries
// are removed by hand once the node's pods no longer need them (docs/install.md,
// Uninstall).
func (in *installer) installBinaries() error {
	if err := in.installBinary(in.o.Binary, binaryName); err != nil {
		return err
	}
	// manifold runs manifold-daemon from its own directory, for `manifold
	// daemon` and to ask the kubelet for a pod's devices (docs/devices.md).
	daemonBin := in.o.DaemonBinary
	if daemonBin == "" && in.o.Binary != "" {
		daemonBin = filepath.Join(filepath.Dir(in.o.Binary), daemonBinaryName)
		if _, err := os.Stat(daemonBin); err != nil {
			in.log.Warn("no manifold-daemon beside manifold; pods whose networks draw a device will fail on this node in thin mode", "looked", daemonBin)
			daemonBin = ""
		}
	}
	if err := in.installBinary(daemonBin, daemonBinaryName); err != nil {
		return err
	}
	return in.installBinary(in.o.ShimBinary, shimBinaryName)
}

// installBinary copies src to <CNIBinDir>/name atomically, so a runtime that is
// running the old one keeps running it. An empty src skips the copy.
func (in *installer) installBinary(src, name string) error {
	if src == "" {
		return nil
	}
	dst := filepath.Join(in.o.CNIBinDir, name)
	same, err := sameFile(src, dst)
	if err != nil {
		return fmt.Errorf("compare %s with %s: %w", src, dst, err)
	}
	if same {
		in.log.Info(name+" binary is up to date", "path", dst)
		return nil
	}
	if err := CopyFileAtomic(src, dst, 0o755); err != nil {
		return fmt.Errorf("install %s binary: %w", name, err)
	}
	in.log.Info("installed "+name+" binary", "path", dst)
	return nil
}

// reconcile brings the credentials and the config in line with their sources.
// It is idempotent and cheap, so it runs on every wake-up.
func (in *installer) reconcile() error {
	changed, credErr := in.syncCredentials()
	if len(changed) > 0 {
		in.log.Info("refreshed manifold credentials", "dir", in.o.credDir(), "files", changed)
	}
	return errors.Join(credErr, in.reconcileConfig())
}

func (in *installer) reconcileConfig() error {
	desired, source, err := in.desiredConfig()
	if err != nil {
		return err
	}
	path := filepath.Join(in.o.CNIConfDir, in.o.outputName())
	if !sameContent(path, desired) {
		if err := WriteFileAtomic(path, desired, 0o644); err != nil {
			return fmt.Errorf("install manifold config: %w", err)
		}
		in.log.Info("wrote manifold config", "path", path, "from", source)
	}
	in.written = desired
	// Multus's config goes out of the way only once manifold's is in place,
	// so that the node is never without a config.
	return in.disableMultus(in.multus)
}

// desiredConfig is the user's file as is, or the config generated from the
// current primary. source names where it came from, for the log.
func (in *installer) desiredConfig() (data []byte, source string, err error) {
	if in.multus, err = findMultus(in.o.CNIConfDir); err != nil {
		return nil, "", err
	}
	if in.o.ConfigFile != "" {
		data, err := readCapped(in.o.ConfigFile)
		if err != nil {
			return nil, "", fmt.Errorf("read --config-file: %w", err)
		}
		// Not parsed, only checked, so a broken file never replaces a working
		// config.
		if !json.Valid(data) {
			return nil, "", fmt.Errorf("--config-file %s is not valid JSON", in.o.ConfigFile)
		}
		return data, in.o.ConfigFile, nil
	}
	// The keys of Multus's config, and in thick Multus its daemon's, that
	// manifold's config takes (multuskeys.go).
	if in.multus == nil || in.multus.shim {
		daemon, from, err := in.multusDaemonConfig(in.multus != nil)
		if err != nil {
			return nil, "", err
		}
		if in.multus == nil && daemon != nil {
			// Multus's daemon removed its shim config when it stopped.
			in.multus = daemonOnlyMultus()
		}
		if in.multus != nil {
			in.multus.daemon, in.multus.daemonFrom = daemon, from
		}
	}
	if m := in.multus; m != nil {
		m.resolve(in.o)
		in.logDecisions(m)
	}
	if err := in.noteMultusSocket(); err != nil {
		return nil, "", err
	}
	var p *Primary
	if in.multus.hasDefault() {
		// Multus's config names the default network itself: it is the one
		// the node's pods have, whatever else is in the conf dir.
		p, err = multusPrimary(in.multus)
	} else {
		p, err = FindPrimary(in.o.CNIConfDir, in.o.outputName())
	}
	if err != nil {
		return nil, "", err
	}
	data, err = generateConfig(p, in.o, in.multus)
	if err != nil {
		return nil, "", err
	}
	source = filepath.Join(in.o.CNIConfDir, p.Name)
	if m := in.multus; m != nil {
		from := "Multus's config " + filepath.Join(in.o.CNIConfDir, m.file)
		if m.file == "" {
			from = "Multus's daemon config (" + m.daemonFrom + ")"
		}
		source = from + " (keys " + strings.Join(m.carried(), ",") + "), primary " + source
	}
	return data, source, nil
}

// report logs a reconcile error once, until it changes or clears.
func (in *installer) report(err error) {
	if err == nil {
		if in.lastErr != "" {
			in.log.Info("manifold installation is current again")
		}
		in.lastErr = ""
		return
	}
	if msg := err.Error(); msg != in.lastErr {
		in.lastErr = msg
		if errors.Is(err, ErrNoPrimary) {
			// Removing our config would let the runtime fall back to whatever
			// else is in the dir; keeping it makes pod ADDs fail loudly and be
			// retried until the primary is back.
			in.log.Warn("the primary CNI config is gone; keeping manifold's config", "error", err)
			return
		}
		in.log.Error("cannot update manifold installation; retrying on the next change", "error", err)
	}
}

// shutdown removes our config when asked to, so that a node where manifold is
// uninstalled falls back to its primary network instead of calling a manifold
// that can no longer reach the API server. It leaves the config alone while
// another installer runs (an upgrade), and when the API server says this is
// no uninstall (the pod is restarted, deleted or evicted, and its DaemonSet
// makes another), so that pods created meanwhile do not silently miss their
// extra networks.
func (in *installer) shutdown() error {
	if !in.o.CleanupConfigOnExit || in.written == nil {
		in.log.Info("stopping; leaving manifold installed")
		return nil
	}
	path := filepath.Join(in.o.CNIConfDir, in.o.outputName())
	if !in.locks.alone() {
		in.log.Info("stopping; another manifold installer runs on this node, leaving the config to it", "path", path)
		return nil
	}
	if !sameContent(path, in.written) {
		in.log.Info("stopping; manifold config was replaced by someone else, leaving it", "path", path)
		return nil
	}
	uninstall, why := in.uninstalling()
	if !uninstall {
		in.log.Info("stopping; this is no uninstall, leaving manifold's config in place", "path", path, "reason", why)
		return nil
	}
	in.log.Info("stopping; manifold is being uninstalled from this node", "reason", why)
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove manifold config: %w", err)
	}
	if err := syncDir(in.o.CNIConfDir); err != nil {
		return fmt.Errorf("remove manifold config: %w", err)
	}
	in.log.Info("stopping; removed manifold config", "path", path)
	return nil
}
