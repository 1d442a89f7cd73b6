// Command runcwrap is a TEST-ONLY stand-in for runc, the runtime_path of
// e2e/crinode's CRI-O. It takes out of the OCI bundle's config.json what this
// sandbox (a container without every capability and without a hugetlb
// cgroup) cannot give a container, and for which CRI-O, unlike containerd,
// has no setting; then it runs runc (main.runc, set at build) with the same
// arguments. A real node runs runc itself. What it takes out, and why:
//   - process.oomScoreAdj: CRI-O sets every infra container's to -998;
//     lowering it needs CAP_SYS_RESOURCE, so runc fails with "nsexec: failed
//     to update /proc/self/oom_score_adj: Permission denied" (containerd has
//     restrict_oom_score_adj);
//   - linux.resources.hugepageLimits: the kubelet gives every container
//     hugepage limits, and CRI-O passes them on when /proc/cgroups lists the
//     hugetlb controller, which it does here though no hugetlb hierarchy is
//     mounted; runc fails with "cannot set hugetlb limit: container could
//     not join or create cgroup" (containerd skips them);
//   - the capabilities outside this process's bounding set: CRI-O gives a
//     privileged container every capability it knows, and runc fails with
//     "unable to apply caps: operation not permitted" (containerd gives a
//     privileged container the capabilities it has itself).
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// runc is the real runc's path (-ldflags -X main.runc=…).
var runc = "runc"

func main() {
	args := os.Args[1:]
	if bundle := bundleArg(args); bundle != "" {
		if err := fixBundle(bundle + "/config.json"); err != nil {
			fmt.Fprintf(os.Stderr, "runcwrap (test-only): %v\n", err)
			os.Exit(1)
		}
	}
	err := syscall.Exec(runc, append([]string{runc}, args...), os.Environ())
	fmt.Fprintf(os.Stderr, "runcwrap (test-only): exec %s: %v\n", runc, err)
	os.Exit(1)
}

// bundleArg is the value of --bundle or -b, or "".
func bundleArg(args []string) string {
	for i, a := range args {
		switch {
		case (a == "--bundle" || a == "-b") && i+1 < len(args):
			return args[i+1]
		case strings.HasPrefix(a, "--bundle="):
			return strings.TrimPrefix(a, "--bundle=")
		}
	}
	return ""
}

// fixBundle rewrites the config at path, when there is one.
func fixBundle(path string) error {
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	var spec map[string]any
	if err := json.Unmarshal(b, &spec); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	bounding, err := boundingSet()
	if err != nil {
		return err
	}
	if proc, ok := spec["process"].(map[string]any); ok {
		delete(proc, "oomScoreAdj")
		if caps, ok := proc["capabilities"].(map[string]any); ok {
			for set, list := range caps {
				names, _ := list.([]any)
				kept := []any{}
				for _, n := range names {
					if s, ok := n.(string); ok && bounding[s] {
						kept = append(kept, s)
					}
				}
				caps[set] = kept
			}
		}
	}
	if linux, ok := spec["linux"].(map[string]any); ok {
		if res, ok := linux["resources"].(map[string]any); ok {
			delete(res, "hugepageLimits")
		}
	}
	out, err := json.Marshal(spec)
	if err != nil {
		return err
	}
	return os.WriteFile(path, out, 0o644)
}

// capNumbers are the capabilities by name, as the OCI spec names them.
var capNumbers = map[string]int{
	"CAP_CHOWN": unix.CAP_CHOWN, "CAP_DAC_OVERRIDE": unix.CAP_DAC_OVERRIDE, "CAP_DAC_READ_SEARCH": unix.CAP_DAC_READ_SEARCH,
	"CAP_FOWNER": unix.CAP_FOWNER, "CAP_FSETID": unix.CAP_FSETID, "CAP_KILL": unix.CAP_KILL, "CAP_SETGID": unix.CAP_SETGID,
	"CAP_SETUID": unix.CAP_SETUID, "CAP_SETPCAP": unix.CAP_SETPCAP, "CAP_LINUX_IMMUTABLE": unix.CAP_LINUX_IMMUTABLE,
	"CAP_NET_BIND_SERVICE": unix.CAP_NET_BIND_SERVICE, "CAP_NET_BROADCAST": unix.CAP_NET_BROADCAST, "CAP_NET_ADMIN": unix.CAP_NET_ADMIN,
	"CAP_NET_RAW": unix.CAP_NET_RAW, "CAP_IPC_LOCK": unix.CAP_IPC_LOCK, "CAP_IPC_OWNER": unix.CAP_IPC_OWNER,
	"CAP_SYS_MODULE": unix.CAP_SYS_MODULE, "CAP_SYS_RAWIO": unix.CAP_SYS_RAWIO, "CAP_SYS_CHROOT": unix.CAP_SYS_CHROOT,
	"CAP_SYS_PTRACE": unix.CAP_SYS_PTRACE, "CAP_SYS_PACCT": unix.CAP_SYS_PACCT, "CAP_SYS_ADMIN": unix.CAP_SYS_ADMIN,
	"CAP_SYS_BOOT": unix.CAP_SYS_BOOT, "CAP_SYS_NICE": unix.CAP_SYS_NICE, "CAP_SYS_RESOURCE": unix.CAP_SYS_RESOURCE,
	"CAP_SYS_TIME": unix.CAP_SYS_TIME, "CAP_SYS_TTY_CONFIG": unix.CAP_SYS_TTY_CONFIG, "CAP_MKNOD": unix.CAP_MKNOD,
	"CAP_LEASE": unix.CAP_LEASE, "CAP_AUDIT_WRITE": unix.CAP_AUDIT_WRITE, "CAP_AUDIT_CONTROL": unix.CAP_AUDIT_CONTROL,
	"CAP_SETFCAP": unix.CAP_SETFCAP, "CAP_MAC_OVERRIDE": unix.CAP_MAC_OVERRIDE, "CAP_MAC_ADMIN": unix.CAP_MAC_ADMIN,
	"CAP_SYSLOG": unix.CAP_SYSLOG, "CAP_WAKE_ALARM": unix.CAP_WAKE_ALARM, "CAP_BLOCK_SUSPEND": unix.CAP_BLOCK_SUSPEND,
	"CAP_AUDIT_READ": unix.CAP_AUDIT_READ, "CAP_PERFMON": unix.CAP_PERFMON, "CAP_BPF": unix.CAP_BPF,
	"CAP_CHECKPOINT_RESTORE": unix.CAP_CHECKPOINT_RESTORE,
}

// boundingSet is the names of the capabilities in this process's bounding
// set (/proc/self/status CapBnd).
func boundingSet() (map[string]bool, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return nil, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		hex, ok := strings.CutPrefix(line, "CapBnd:")
		if !ok {
			continue
		}
		mask, err := strconv.ParseUint(strings.TrimSpace(hex), 16, 64)
		if err != nil {
			return nil, fmt.Errorf("CapBnd %q: %w", hex, err)
		}
		out := map[string]bool{}
		for name, n := range capNumbers {
			if mask&(1<<uint(n)) != 0 {
				out[name] = true
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("no CapBnd in /proc/self/status")
}
