package crinode

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// hostNetNSDir is where a node's containerd mounts the pods' network
// namespaces (Options.HostNetNS).
const hostNetNSDir = "/var/run/netns"

// Reboot does to this containerd what a node's reboot does: it ends containerd, every shim it started and every container they ran
// with SIGKILL, and drops what a reboot wipes from the node's tmpfs: the task
// state, the pods' network namespaces (with their interfaces) and the shim
// sockets. Its root (images, sandbox and container metadata) stays, as on
// disk. Restart brings it back; the kubelet then finds every sandbox dead.
func (c *Containerd) Reboot() {
	c.Kill()
	c.removeTasks()
	unmountUnder(filepath.Join(c.Dir, "state"))
	os.RemoveAll(filepath.Join(c.Dir, "state"))
	c.removeNetNS()
}

// removeTasks kills the runc containers and the shims of this containerd, and
// removes their sockets under /run/containerd/s/.
func (c *Containerd) removeTasks() {
	runcRoot := filepath.Join(c.Dir, "runc", "k8s.io")
	if out, err := runcCmd("--root", runcRoot, "list", "-q").Output(); err == nil {
		for _, id := range strings.Fields(string(out)) {
			runcCmd("--root", runcRoot, "delete", "-f", id).Run()
		}
	}
	for _, pid := range c.shimPids() {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	tasks, _ := os.ReadDir(filepath.Join(c.Dir, "state", "io.containerd.runtime.v2.task", "k8s.io"))
	for _, t := range tasks {
		for _, p := range []string{filepath.Join(c.Socket, "k8s.io", t.Name()), filepath.Join(c.Socket, "k8s.io", t.Name(), "debug")} {
			os.Remove(shimSocket(p))
		}
	}
	os.RemoveAll(runcRoot)
}

// removeNetNS unmounts and removes the network namespaces this containerd
// made in the host's netns dir (HostNetNS): those that were not there when
// it started. With the namespace go the pod ends of its interfaces.
func (c *Containerd) removeNetNS() {
	if !c.opts.HostNetNS {
		return
	}
	entries, _ := os.ReadDir(hostNetNSDir)
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), "cni-") || c.netnsBefore[e.Name()] {
			continue
		}
		p := filepath.Join(hostNetNSDir, e.Name())
		unix.Unmount(p, unix.MNT_DETACH)
		os.Remove(p)
	}
}

// HostNetNSNames are the runtime-made network namespaces in the host's
// /var/run/netns now: containerd's cni-<uuid> and CRI-O's <uuid>.
func HostNetNSNames() map[string]bool {
	out := map[string]bool{}
	entries, _ := os.ReadDir(hostNetNSDir)
	for _, e := range entries {
		if isUUID(strings.TrimPrefix(e.Name(), "cni-")) {
			out[e.Name()] = true
		}
	}
	return out
}

// isUUID tells whether s is a UUID in its text form (8-4-4-4-12 hex digits).
func isUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i, r := range s {
		switch i {
		case 8, 13, 18, 23:
			if r != '-' {
				return false
			}
		default:
			if !strings.ContainsRune("0123456789abcdef", r) {
				return false
			}
		}
	}
	return true
}
