// Command demo installs manifold on a real one-node Kubernetes the way an admin
// does, and shows what a pod gets. The cluster is built from source, with no
// Docker and no kind (e2e/cluster): a real etcd, kube-apiserver, kube-scheduler
// and kube-controller-manager on 127.0.0.1, and a node of containerd 2.x (or
// CRI-O 1.35 with make demo RUNTIME=crio) with runc and a kubelet, whose CNI
// dirs are the host's /etc/cni/net.d and /opt/cni/bin.
//
// manifold's image is built without Docker (as `make image` does) and imported
// into the node's runtime; then the commands of docs/install.md run with
// kubectl: the CRD, the RBAC and the thin DaemonSet, whose pod installs
// manifold on the node. The only file placed on the node by hand is the
// cluster's primary CNI config (and its reference plugins), as the cluster's
// network plugin would install them. A pod with two NADs runs; the demo prints
// what `kubectl describe pod` shows of it and what is inside it. Then the node
// is switched to the thick DaemonSet, the way the docs say, and a second pod
// runs through the node daemon. Last, the admission webhook is installed from
// deployments/webhook.yaml, and kubectl apply of a bad NAD is refused.
// Everything it creates is removed at the end, also on error or Ctrl-C.
//
// Run it with `make demo` (as root). It finds its binaries like the tests do
// (MANIFOLD_PLUGINS_DIR, MANIFOLD_KUBE_*, MANIFOLD_ETCD, MANIFOLD_KUBECTL,
// MANIFOLD_CONTAINERD_DIR, MANIFOLD_KUBELET), or builds them (minutes when
// cold; progress on stderr).
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/manifold-cni/manifold/e2e/cluster"
)

func main() {
	os.Exit(run())
}

func run() int {
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "the demo runs a control plane, containerd, a kubelet and network namespaces: run it as root (make demo)")
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		// A second Ctrl-C during the clean-up kills the demo outright; the
		// servers die with it (Pdeathsig).
		stop()
	}()
	d := &demo{started: time.Now()}
	err := d.run(ctx)
	switch {
	case err != nil && ctx.Err() != nil:
		// The error is only the echo of the interruption; its first line says
		// where it struck.
		first, _, _ := strings.Cut(err.Error(), "\n")
		fmt.Fprintf(os.Stderr, "\ninterrupted (%s)\n", first)
	case err != nil:
		fmt.Fprintf(os.Stderr, "\ndemo failed: %v\n", err)
		d.showLogs()
	}
	d.cleanup()
	if err != nil {
		return 1
	}
	fmt.Printf("\nThe demo took %s in all.\n", time.Since(d.started).Round(time.Second))
	return 0
}

// demo holds what the demo made, so it can be shown and removed.
type demo struct {
	started time.Time
	undo    []step
	dir     string
	image   string // the image tarball
	c       *cluster.Cluster
	mode    cluster.Mode // what is installed now
}

type step struct {
	what string
	fn   func() error
}

// later registers a clean-up step; they run in reverse order.
func (d *demo) later(what string, fn func() error) {
	d.undo = append(d.undo, step{what, fn})
}

func (d *demo) cleanup() {
	heading("Cleaning up")
	for i := len(d.undo) - 1; i >= 0; i-- {
		s := d.undo[i]
		if err := s.fn(); err != nil {
			fmt.Printf("  %-62s FAILED: %v\n", s.what, err)
			continue
		}
		fmt.Printf("  %-62s done\n", s.what)
	}
}

func (d *demo) run(ctx context.Context) error {
	heading("manifold demo: installed with kubectl on a one-node Kubernetes built from source")
	rt, err := cluster.RuntimeFromEnv()
	if err != nil {
		return err
	}
	fmt.Printf("etcd, kube-apiserver, kube-scheduler and kube-controller-manager on 127.0.0.1; %s,\n", map[string]string{cluster.Containerd: "containerd 2.x", cluster.CRIO: "CRI-O 1.35"}[rt])
	fmt.Println("runc and a kubelet on this machine, with the host's /etc/cni/net.d and /opt/cni/bin.")
	for _, f := range []func(context.Context) error{d.buildImage, d.startCluster, d.installThin, d.networks, d.podThin, d.switchThick, d.webhook} {
		if err := f(ctx); err != nil {
			return err
		}
	}
	return nil
}

// showLogs prints the end of the DaemonSet's and the servers' logs, to
// explain a failure.
func (d *demo) showLogs() {
	if d.c == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	fmt.Fprintf(os.Stderr, "\nthe DaemonSet's logs:\n%s\n", d.c.DaemonSetLogs(ctx, d.mode.DaemonSet, 4000))
	fmt.Fprintf(os.Stderr, "\n%s\n", d.c.LogTails())
}

func heading(s string) {
	fmt.Printf("\n=== %s %s\n", s, strings.Repeat("=", max(0, 72-len(s))))
}

func pretty(b []byte) string {
	var out bytes.Buffer
	if err := json.Indent(&out, b, "", "  "); err != nil {
		return string(b)
	}
	return out.String()
}

func indent(s string, n int) string {
	pad := strings.Repeat(" ", n)
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range lines {
		lines[i] = pad + l
	}
	return strings.Join(lines, "\n") + "\n"
}

func orNone(list []string) string {
	if len(list) == 0 {
		return "none"
	}
	return strings.Join(list, "\n      ")
}
