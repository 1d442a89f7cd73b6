package cluster

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// The host's CNI dirs, where the DaemonSets install manifold (hostPath
// volumes) and where the cluster's primary CNI puts its config and plugins.
const (
	ConfDir = "/etc/cni/net.d"
	BinDir  = "/opt/cni/bin"
)

// claimedDirs are the host dirs the cluster owns while it runs: it refuses to
// start if they hold anything it did not make, and empties them when it stops.
var claimedDirs = []string{ConfDir, BinDir}

// nodeDirs are the other host paths that manifold, its DaemonSets
// (DirectoryOrCreate volumes) and the primary's IPAM write. They may be there
// already (other test tiers share /var/lib/cni); the cluster removes those
// that were not, and otherwise only what it knows to be its own (Stop).
var nodeDirs = []string{
	"/etc/cni/manifold",
	"/var/lib/cni/manifold",
	"/var/lib/cni/multus",
	"/var/lib/cni/networks",
	"/run/manifold",
	"/run/k8s.cni.cncf.io",
	"/var/lib/kubelet/pod-resources",
	"/var/lib/kubelet/device-plugins",
	"/etc/cni",
	"/opt/cni",
}

// hostDirs is what the cluster found of the host's dirs at its start.
type hostDirs struct {
	existed map[string]bool
}

// claimHostDirs refuses a host whose CNI dirs hold files the cluster did not
// make (a real node's, or another run's that failed to clean up), and
// remembers which node dirs exist.
func claimHostDirs() (*hostDirs, error) {
	h := &hostDirs{existed: map[string]bool{}}
	for _, d := range claimedDirs {
		entries, err := os.ReadDir(d)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
		if len(entries) > 0 {
			var names []string
			for _, e := range entries {
				names = append(names, e.Name())
			}
			return nil, fmt.Errorf("refusing to run: %s holds files this test did not make (%s); the cluster tier installs manifold there with its DaemonSets and removes everything afterwards, so it needs the dir empty or absent", d, strings.Join(names, ", "))
		}
	}
	for _, d := range append(append([]string{}, claimedDirs...), nodeDirs...) {
		if _, err := os.Lstat(d); err == nil {
			h.existed[d] = true
		}
	}
	return h, nil
}

// release empties the claimed dirs and removes every node dir that was not
// there before, deepest first.
func (h *hostDirs) release() []error {
	var errs []error
	for _, d := range claimedDirs {
		entries, _ := os.ReadDir(d)
		for _, e := range entries {
			if err := os.RemoveAll(filepath.Join(d, e.Name())); err != nil {
				errs = append(errs, err)
			}
		}
	}
	all := append(append([]string{}, claimedDirs...), nodeDirs...)
	for _, d := range all {
		if !h.existed[d] {
			unmountUnder(d)
			if err := os.RemoveAll(d); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errs
}

// mountPropagation is the propagation of every mount point, from
// /proc/self/mountinfo: "shared", "slave" or "private".
func mountPropagation() (map[string]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]string{}
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) < 7 {
			continue
		}
		prop := "private"
		for _, opt := range fields[6:] {
			if opt == "-" {
				break
			}
			switch {
			case strings.HasPrefix(opt, "shared:"):
				prop = "shared"
			case strings.HasPrefix(opt, "master:") && prop != "shared":
				prop = "slave"
			}
		}
		out[fields[4]] = prop
	}
	return out, s.Err()
}

// shareRoot makes / and every mount below it shared, as on a systemd node:
// the thick DaemonSet's HostToContainer mounts need it. The returned func
// puts back what was private before (mounts made since keep theirs).
func shareRoot() (restore func(), err error) {
	before, err := mountPropagation()
	if err != nil {
		return nil, err
	}
	if err := unix.Mount("", "/", "", unix.MS_SHARED|unix.MS_REC, ""); err != nil {
		return nil, fmt.Errorf("make / rshared: %w", err)
	}
	return func() {
		for mp, prop := range before {
			if prop == "private" {
				unix.Mount("", mp, "", unix.MS_PRIVATE, "")
			}
		}
	}, nil
}

// unmountUnder detaches every mount at or below dir, deepest first.
func unmountUnder(dir string) {
	props, err := mountPropagation()
	if err != nil {
		return
	}
	var points []string
	for mp := range props {
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			points = append(points, mp)
		}
	}
	for len(points) > 0 {
		deepest := 0
		for i, p := range points {
			if len(p) > len(points[deepest]) {
				deepest = i
			}
		}
		unix.Unmount(points[deepest], unix.MNT_DETACH)
		points = append(points[:deepest], points[deepest+1:]...)
	}
}
