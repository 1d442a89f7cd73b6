package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/manifold-cni/manifold/e2e/cluster"
	"github.com/manifold-cni/manifold/internal/testenv"
	"github.com/manifold-cni/manifold/ociimage"
)

const (
	podNamespace = "demo"
	// image is the reference the demo gives manifold's image: the
	// DaemonSets' placeholder is replaced by it, as docs/install.md asks.
	image = "registry.example/manifold:demo"
	// The macvlan NAD's master: one end of a veth pair (this kernel has no
	// dummy links).
	parent = "mfdemo0"
)

// buildImage builds manifold's image as `make image` does.
func (d *demo) buildImage(ctx context.Context) error {
	heading("0. manifold's image, built without Docker")
	dir, err := os.MkdirTemp("", "manifold-demo-")
	if err != nil {
		return err
	}
	d.dir = dir
	d.later("remove "+dir, func() error { return os.RemoveAll(dir) })
	root, err := testenv.FindRepoRoot()
	if err != nil {
		return err
	}
	start := time.Now()
	res, err := ociimage.Build(ctx, ociimage.Options{Version: "demo", Ref: image, OutPath: filepath.Join(dir, "manifold-image.tar"), RepoRoot: root})
	if err != nil {
		return err
	}
	d.image = res.Path
	st, _ := os.Stat(res.Path)
	fmt.Printf("  $ make image VERSION=demo IMAGE=%s\n", image)
	fmt.Printf("  %s: %.1f MB, %s, built in %s\n", res.Path, float64(st.Size())/1e6, res.Digest, time.Since(start).Round(100*time.Millisecond))
	return nil
}

// startCluster starts the control plane and the node, with nothing of
// manifold on it.
func (d *demo) startCluster(ctx context.Context) error {
	heading("1. The cluster")
	start := time.Now()
	c, err := cluster.Start(ctx, cluster.Options{TempDir: d.dir, NodeName: "manifold-demo"})
	if err != nil {
		return err
	}
	d.c = c
	d.later("stop the kubelet, "+c.Node.Kind()+" and the control plane; empty /etc/cni/net.d and /opt/cni/bin", func() error { c.Stop(); return nil })
	fmt.Printf("  control plane on %s and node %s up in %s\n", c.CP.URL, c.NodeName, time.Since(start).Round(100*time.Millisecond))
	_, msg, _ := c.NodeReady(ctx)
	fmt.Printf("  node %s is NotReady: %s\n", c.NodeName, msg)

	load := "ctr -n k8s.io images import " + filepath.Base(d.image)
	if c.Node.Kind() == cluster.CRIO {
		// CRI-O has no import: the image goes through a registry on the
		// node's loopback, as `skopeo copy docker-archive:… containers-storage:…` would put it.
		load = "skopeo copy docker-archive:" + filepath.Base(d.image) + " containers-storage:" + image
	}
	fmt.Printf("\n  $ %s   (on the node; never pulled)\n", load)
	if err := c.Node.Import(ctx, d.image); err != nil {
		return err
	}
	fmt.Printf("  the cluster's network plugin installs the reference CNI plugins into %s\n", cluster.BinDir)
	return cluster.InstallPrimaryPlugins()
}

// kubectl runs one step of docs/install.md and prints it.
func (d *demo) kubectl(ctx context.Context, s cluster.Step) error {
	note := ""
	if s.Apply != "" {
		note = "   (image: " + image + ", --api-server added)"
	}
	fmt.Printf("  $ %s%s\n", s, note)
	out, err := d.c.Run(ctx, s, image)
	if err != nil {
		return err
	}
	fmt.Print(indent(strings.TrimSpace(out), 4))
	return nil
}

// installThin runs docs/install.md's commands for thin mode, then the primary
// CNI writes its config, and the node turns Ready.
func (d *demo) installThin(ctx context.Context) error {
	heading("2. Installing manifold (thin mode), as docs/install.md says")
	d.later("kubectl delete -f deployments/"+cluster.Thin.File+" or "+cluster.Thick.File, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		return errors.Join(d.c.Uninstall(ctx, cluster.Thin), d.c.Uninstall(ctx, cluster.Thick))
	})
	d.mode = cluster.Thin
	for _, s := range cluster.InstallSteps(cluster.Thin) {
		if err := d.kubectl(ctx, s); err != nil {
			return err
		}
	}
	fmt.Printf("\n  the cluster's network plugin writes its config, %s (the only file put on the node by hand):\n%s",
		filepath.Join(cluster.ConfDir, cluster.PrimaryFile), indent(cluster.PrimaryConfig(), 4))
	if err := cluster.WritePrimary(cluster.PrimaryFile, cluster.PrimaryConfig()); err != nil {
		return err
	}
	start := time.Now()
	if err := d.waitConfig(ctx, "manifold"); err != nil {
		return err
	}
	msg, err := d.waitReady(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("  node Ready %s later: %s\n", time.Since(start).Round(100*time.Millisecond), msg)
	return d.showNodeFiles()
}

// networks makes the macvlan master and two NADs, with kubectl.
func (d *demo) networks(ctx context.Context) error {
	heading("3. Two NetworkAttachmentDefinitions")
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: parent}, PeerName: parent[:len(parent)-1] + "1"}
	if err := netlink.LinkAdd(veth); err != nil {
		return fmt.Errorf("create veth %s: %w", parent, err)
	}
	d.later("delete veth "+parent, func() error { return deleteLink(parent) })
	for _, n := range []string{veth.Name, veth.PeerName} {
		l, err := netlink.LinkByName(n)
		if err == nil {
			err = netlink.LinkSetUp(l)
		}
		if err != nil {
			return err
		}
	}
	cluster.OwnNetwork("demo-macvlan", "")
	cluster.OwnNetwork("demo-bridge", "mfdemobr0")
	if err := d.c.CreateNamespace(ctx, podNamespace); err != nil {
		return err
	}
	nads := `apiVersion: k8s.cni.cncf.io/v1
kind: NetworkAttachmentDefinition
metadata: {name: macvlan-net, namespace: demo}
spec:
  config: '{"cniVersion": "1.0.0", "name": "demo-macvlan", "type": "macvlan", "master": "` + parent + `", "mode": "bridge",
            "ipam": {"type": "host-local", "subnet": "10.246.1.0/24"}}'
---
apiVersion: k8s.cni.cncf.io/v1
kind: NetworkAttachmentDefinition
metadata: {name: bridge-net, namespace: demo}
spec:
  config: '{"cniVersion": "1.0.0", "name": "demo-bridge", "plugins": [{"type": "bridge", "bridge": "mfdemobr0",
            "ipam": {"type": "host-local", "subnet": "10.246.2.0/24"}}, {"type": "tuning", "capabilities": {"mac": true}}]}'
`
	fmt.Printf("  $ kubectl apply -f nads.yaml\n%s", indent(nads, 4))
	out, err := d.c.Kubectl(ctx, nads, "apply", "-f", "-")
	if err != nil {
		return fmt.Errorf("kubectl apply NADs: %w: %s", err, out)
	}
	fmt.Print(indent(strings.TrimSpace(out), 4))
	return nil
}

// podThin runs a pod through thin-mode manifold.
func (d *demo) podThin(ctx context.Context) error {
	heading("4. A pod with both networks (thin mode)")
	return d.pod(ctx, "web-thin", `[{"name": "macvlan-net"}, {"name": "bridge-net", "interface": "data0", "mac": "02:00:5e:10:00:0a"}]`)
}

// switchThick moves the node to thick mode as docs/install.md says, and runs
// a second pod through the node daemon.
func (d *demo) switchThick(ctx context.Context) error {
	heading("5. Switching the node to thick mode, as docs/install.md says")
	for _, s := range cluster.SwitchSteps(cluster.Thin, cluster.Thick) {
		if err := d.kubectl(ctx, s); err != nil {
			return err
		}
		if s.Apply != "" {
			d.mode = cluster.Thick
		}
	}
	if err := d.waitConfig(ctx, "manifold-shim"); err != nil {
		return err
	}
	if err := d.showNodeFiles(); err != nil {
		return err
	}
	heading("6. A pod with both networks (thick mode: manifold-shim and the node daemon)")
	return d.pod(ctx, "web-thick", `[{"name": "macvlan-net"}, {"name": "bridge-net", "interface": "data0"}]`)
}

// pod creates a pod with kubectl, shows it, and deletes it.
func (d *demo) pod(ctx context.Context, name, networks string) error {
	manifest := `apiVersion: v1
kind: Pod
metadata:
  name: ` + name + `
  namespace: demo
  annotations:
    k8s.v1.cni.cncf.io/networks: '` + networks + `'
spec:
  terminationGracePeriodSeconds: 1
  dnsPolicy: Default
  containers:
    - name: web
      image: manifold.test/node-tools:1
      imagePullPolicy: Never
      command: [/nettool, listen, "0.0.0.0:8080"]
`
	fmt.Printf("  $ kubectl apply -f %s.yaml\n%s", name, indent(manifest, 4))
	start := time.Now()
	if out, err := d.c.Kubectl(ctx, manifest, "apply", "-f", "-"); err != nil {
		return fmt.Errorf("kubectl apply pod: %w: %s", err, out)
	}
	cs := d.c.Clientset()
	d.later("delete pod "+name+" (a no-op unless the demo stopped early)", func() error {
		err := cs.CoreV1().Pods(podNamespace).Delete(context.Background(), name, metav1.DeleteOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	})
	p := cluster.PodSpec(podNamespace, name, nil)
	running, err := d.c.WaitRunning(ctx, p, 2*time.Minute)
	if err != nil {
		return err
	}
	fmt.Printf("  pod Running %s after kubectl apply\n", time.Since(start).Round(100*time.Millisecond))
	// In thick mode the daemon writes network-status and the events just
	// after it answers.
	for deadline := time.Now().Add(10 * time.Second); running.Annotations[cluster.StatusAnnotation] == "" && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		running, _ = cs.CoreV1().Pods(podNamespace).Get(ctx, name, metav1.GetOptions{})
	}
	time.Sleep(300 * time.Millisecond)
	if err := d.describe(ctx, running); err != nil {
		return err
	}
	if err := d.inside(ctx, running); err != nil {
		return err
	}
	fmt.Printf("\n  $ kubectl delete pod -n demo %s\n", name)
	start = time.Now()
	if err := d.c.DeleteAndWait(ctx, 2*time.Minute, running); err != nil {
		return err
	}
	fmt.Printf("  pod gone %s later (the kubelet stopped its sandbox: manifold's DEL). What the node still holds of it:\n      %s\n",
		time.Since(start).Round(100*time.Millisecond), orNone(d.c.Leftovers()))
	return nil
}

// waitConfig waits until manifold's config on the host runs the plugin typ.
func (d *demo) waitConfig(ctx context.Context, typ string) error {
	want := `"type":"` + typ + `"`
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		b, err := os.ReadFile(cluster.ManifoldConfig)
		if err == nil && strings.Contains(strings.ReplaceAll(string(b), " ", ""), want) {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("manifold's config does not run %s after 2 minutes (%s)", typ, b)
		}
	}
}

// waitReady waits (at most 2 minutes) for the node to be Ready.
func (d *demo) waitReady(ctx context.Context) (string, error) {
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		ready, msg, err := d.c.NodeReady(ctx)
		if err == nil && ready {
			return msg, nil
		}
		if err := ctx.Err(); err != nil {
			return "", err
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("node not Ready within 2 minutes: %s (%v)", msg, err)
		}
	}
}

// showNodeFiles prints what the DaemonSet installed on the host.
func (d *demo) showNodeFiles() error {
	fmt.Printf("\n  on the node:\n")
	for _, dir := range []string{cluster.ConfDir, filepath.Join(cluster.ConfDir, "manifold.d")} {
		entries, err := os.ReadDir(dir)
		if err != nil {
			return err
		}
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		fmt.Printf("    $ ls %s\n      %s\n", dir, strings.Join(names, "  "))
	}
	var bins []string
	entries, _ := os.ReadDir(cluster.BinDir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "manifold") {
			bins = append(bins, e.Name())
		}
	}
	fmt.Printf("    $ ls %s/manifold*\n      %s\n", cluster.BinDir, strings.Join(bins, "  "))
	b, err := os.ReadFile(cluster.ManifoldConfig)
	if err != nil {
		return err
	}
	fmt.Printf("    $ cat %s\n%s", cluster.ManifoldConfig, indent(pretty(b), 6))
	return nil
}

// describe prints what `kubectl describe pod` shows of the networking.
func (d *demo) describe(ctx context.Context, p *corev1.Pod) error {
	fmt.Printf("\n  $ kubectl describe pod -n demo %s\n", p.Name)
	fmt.Printf("    Name:         %s\n    Namespace:    %s\n    Node:         %s\n    Status:       %s\n    IP:           %s\n",
		p.Name, p.Namespace, p.Spec.NodeName, p.Status.Phase, p.Status.PodIP)
	fmt.Printf("    Annotations:  %s: %s\n", cluster.NetworksAnnotation, p.Annotations[cluster.NetworksAnnotation])
	fmt.Printf("                  %s:\n%s", cluster.StatusAnnotation, indent(pretty([]byte(p.Annotations[cluster.StatusAnnotation])), 20))
	evs := d.c.Events(ctx, p)
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].CreationTimestamp.Before(&evs[j].CreationTimestamp) })
	fmt.Printf("    Events:\n      %-8s %-16s %-18s %s\n", "Type", "Reason", "From", "Message")
	for _, ev := range evs {
		from := ev.Source.Component
		if from == "" {
			from = ev.ReportingController
		}
		fmt.Printf("      %-8s %-16s %-18s %s\n", ev.Type, ev.Reason, from, ev.Message)
	}
	return nil
}

// inside shows the pod's interfaces and routes, from its netns.
func (d *demo) inside(ctx context.Context, p *corev1.Pod) error {
	id, path, err := d.c.Sandbox(ctx, p)
	if err != nil {
		return err
	}
	for _, args := range [][]string{{"-br", "addr"}, {"route"}} {
		out, err := exec.CommandContext(ctx, "nsenter", append([]string{"--net=" + path, "ip"}, args...)...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("nsenter ip %v: %w: %s", args, err, out)
		}
		fmt.Printf("\n  inside the pod (sandbox %s): ip %s\n%s", id[:12], strings.Join(args, " "), indent(string(out), 4))
	}
	return nil
}

func deleteLink(name string) error {
	l, err := netlink.LinkByName(name)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
			return nil
		}
		return err
	}
	return netlink.LinkDel(l)
}
