package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/manifold-cni/manifold/e2e/crinode"
	"github.com/manifold-cni/manifold/internal/testenv"
)

// mode runs one node (containerd and a kubelet, and in daemon mode manifold's
// daemon), one pod on it from creation to deletion, and then stops the node.
func (d *demo) mode(ctx context.Context, title string, daemon bool) error {
	heading(title)
	name := "thin"
	if daemon {
		name = "daemon"
	}
	nodeDir := filepath.Join(d.dir, name)
	binDir := filepath.Join(nodeDir, "bin")
	confDir := filepath.Join(nodeDir, "net.d")
	for _, p := range []string{binDir, confDir} {
		if err := os.MkdirAll(p, 0o755); err != nil {
			return err
		}
	}
	// In daemon mode the bin dir has no manifold binary, so the shim has
	// nothing to fall back to: only the daemon can answer.
	var err error
	if daemon {
		err = testenv.LinkPlugins(binDir, d.plugins)
	} else {
		err = testenv.LinkBinDir(binDir, d.plugins, d.manifold)
	}
	if err != nil {
		return err
	}
	socket := ""
	if daemon {
		if err := os.Symlink(d.shim, filepath.Join(binDir, "manifold-shim")); err != nil {
			return err
		}
		socket = filepath.Join(nodeDir, "run", "manifold.sock")
	}
	conf, plugin := d.manifoldConf(binDir, socket)
	if daemon {
		log, err := os.Create(filepath.Join(nodeDir, "daemon.out"))
		if err != nil {
			return err
		}
		defer log.Close()
		flags := testenv.DaemonFlags(plugin)
		dm, err := testenv.RunDaemon(d.manifold, socket, log, flags...)
		if err != nil {
			return err
		}
		d.later("stop the manifold daemon", dm.Terminate)
		fmt.Printf("  $ manifold daemon --socket %s %s   (running, pid %d)\n", socket, strings.Join(flags, " "), dm.Pid())
		fmt.Printf("  the CNI bin dir %s has the plugins and manifold-shim, and no manifold binary: only the daemon can answer\n", binDir)
	}
	if err := os.WriteFile(filepath.Join(confDir, "00-manifold.conflist"), conf, 0o644); err != nil {
		return err
	}
	fmt.Printf("  containerd's CNI conf dir %s holds only 00-manifold.conflist:\n%s\n", confDir, indent(pretty(conf), 4))

	start := time.Now()
	node, err := crinode.Start(ctx, d.bins, crinode.Options{CNIBinDir: binDir, CNIConfDir: confDir, TempDir: nodeDir})
	if err != nil {
		return err
	}
	d.later("stop containerd ("+name+" mode) and remove its sandboxes", func() error { node.Stop(); return nil })
	fmt.Printf("  containerd up on %s in %s (sandbox image built here and imported, never pulled)\n", node.Socket, time.Since(start).Round(time.Millisecond))
	start = time.Now()
	nodeName := "manifold-demo-" + name
	kubelet, err := crinode.StartKubelet(ctx, d.bins, node, d.cp.KubeconfigPath, nodeName, nil)
	if err != nil {
		return err
	}
	d.later("stop the kubelet ("+name+" mode)", func() error { kubelet.Stop(); return nil })
	cs := d.cp.Clientset()
	d.later("delete node "+nodeName, func() error {
		return cs.CoreV1().Nodes().Delete(context.Background(), nodeName, metav1.DeleteOptions{})
	})
	msg, err := d.waitNodeReady(ctx, nodeName)
	if err != nil {
		return err
	}
	fmt.Printf("  kubelet up; node %s Ready %s after it started (%s)\n", nodeName, time.Since(start).Round(100*time.Millisecond), msg)

	networks := `[{"name":"macvlan-net"},{"name":"static-net","interface":"data0","ips":["10.250.2.10/24"],"mac":"02:00:5e:10:00:0a"}]`
	grace := int64(1)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web-" + name, Namespace: podNamespace, Annotations: map[string]string{networksKey: networks}},
		Spec: corev1.PodSpec{
			NodeName:                      nodeName,
			DNSPolicy:                     corev1.DNSDefault,
			TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{Name: "web", Image: crinode.ImageRef, ImagePullPolicy: corev1.PullNever,
				Command: []string{crinode.NetTool, "listen", "0.0.0.0:8080"}}},
		},
	}
	fmt.Printf("\n  $ kubectl create -f web-%s.yaml   (a pod on %s asking for both NADs:)\n    %s: %s\n", name, nodeName, networksKey, networks)
	start = time.Now()
	if _, err := cs.CoreV1().Pods(podNamespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create pod: %w", err)
	}
	d.later("delete pod "+pod.Name+" (a no-op unless the demo stopped early)", func() error {
		err := cs.CoreV1().Pods(podNamespace).Delete(context.Background(), pod.Name, metav1.DeleteOptions{})
		if err != nil && strings.Contains(err.Error(), "not found") {
			return nil
		}
		return err
	})
	if _, err := d.waitPod(ctx, pod.Name, func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning }); err != nil {
		return err
	}
	fmt.Printf("  pod Running %s after it was created (the API polled every 100 ms)\n", time.Since(start).Round(100*time.Millisecond))
	if daemon {
		// The daemon writes network-status and the events just after it answers.
		d.waitPod(ctx, pod.Name, func(p *corev1.Pod) bool { return p.Annotations[statusKey] != "" })
		time.Sleep(500 * time.Millisecond)
	}
	if err := d.describe(ctx, pod.Name); err != nil {
		return err
	}
	if err := d.inside(ctx, node, pod.Name); err != nil {
		return err
	}
	fmt.Printf("\n  manifold's log line for this pod's ADD (%s):\n", d.logFile)
	for _, l := range d.logLines("ADD done", podNamespace+"/"+pod.Name) {
		fmt.Printf("    %s\n", l)
	}

	fmt.Printf("\n  $ kubectl delete pod %s\n", pod.Name)
	start = time.Now()
	if err := cs.CoreV1().Pods(podNamespace).Delete(ctx, pod.Name, metav1.DeleteOptions{}); err != nil {
		return err
	}
	if _, err := d.waitPod(ctx, pod.Name, nil); err != nil {
		return err
	}
	fmt.Printf("  pod gone from the API %s later (the kubelet stopped its sandbox: manifold's DEL). What is left:\n", time.Since(start).Round(100*time.Millisecond))
	fmt.Printf("    host-local leases in %s: %s\n", d.leases, orNone(files(d.leases, true)))
	fmt.Printf("    manifold's records, locks and cache in %s: %s\n", d.cniDir, orNone(files(d.cniDir, false)))
	fmt.Printf("    ports on bridge %s: %s\n", d.bridge, orNone(bridgePorts(d.bridge)))
	return nil
}

// waitNodeReady waits (at most 2 minutes) for the node's Ready condition and
// returns its message.
func (d *demo) waitNodeReady(ctx context.Context, name string) (string, error) {
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		if node, err := d.cp.Clientset().CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{}); err == nil {
			for _, c := range node.Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
					return c.Message, nil
				}
			}
		}
		if err := ctx.Err(); err != nil {
			return "", err
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("node %s not Ready within 2 minutes", name)
		}
	}
}

// waitPod polls the pod every 100 ms (at most 2 minutes) until ok holds; a
// nil ok waits until the pod is gone.
func (d *demo) waitPod(ctx context.Context, name string, ok func(*corev1.Pod) bool) (*corev1.Pod, error) {
	pods := d.cp.Clientset().CoreV1().Pods(podNamespace)
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		p, err := pods.Get(ctx, name, metav1.GetOptions{})
		if ok == nil && err != nil && strings.Contains(err.Error(), "not found") {
			return nil, nil
		}
		if ok != nil && err == nil && ok(p) {
			return p, nil
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("pod %s: still waiting after 2 minutes (last error %v)", name, err)
		}
	}
}

// describe prints what `kubectl describe pod` shows of the networking.
func (d *demo) describe(ctx context.Context, name string) error {
	cs := d.cp.Clientset()
	p, err := cs.CoreV1().Pods(podNamespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	fmt.Printf("\n  $ kubectl describe pod %s\n", name)
	fmt.Printf("    Name:         %s\n    Namespace:    %s\n    Node:         %s\n    Status:       %s\n    IP:           %s\n",
		p.Name, p.Namespace, p.Spec.NodeName, p.Status.Phase, p.Status.PodIP)
	fmt.Printf("    Annotations:  %s: %s\n", networksKey, p.Annotations[networksKey])
	fmt.Printf("                  %s:\n%s", statusKey, indent(pretty([]byte(p.Annotations[statusKey])), 20))
	evs, err := cs.CoreV1().Events(podNamespace).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
	if err != nil {
		return err
	}
	sort.SliceStable(evs.Items, func(i, j int) bool {
		return evs.Items[i].CreationTimestamp.Before(&evs.Items[j].CreationTimestamp)
	})
	fmt.Printf("    Events:\n      %-8s %-16s %-10s %s\n", "Type", "Reason", "From", "Message")
	for _, ev := range evs.Items {
		from := ev.Source.Component
		if from == "" {
			from = ev.ReportingController
		}
		fmt.Printf("      %-8s %-16s %-10s %s\n", ev.Type, ev.Reason, from, ev.Message)
	}
	return nil
}

// inside shows the pod's interfaces and routes, from its netns.
func (d *demo) inside(ctx context.Context, node *crinode.Containerd, name string) error {
	list, err := node.Runtime.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{
		Filter: &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{"io.kubernetes.pod.name": name}}})
	if err != nil || len(list.Items) == 0 {
		return fmt.Errorf("the pod's sandbox in containerd: %v", err)
	}
	path, err := node.SandboxNetNS(ctx, list.Items[0].Id)
	if err != nil {
		return err
	}
	for _, args := range [][]string{{"-br", "addr"}, {"route"}} {
		out, err := exec.CommandContext(ctx, "nsenter", append([]string{"--net=" + path, "ip"}, args...)...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("nsenter ip %v: %w: %s", args, err, out)
		}
		fmt.Printf("\n  inside the pod (sandbox %s): ip %s\n%s", list.Items[0].Id[:12], strings.Join(args, " "), indent(string(out), 4))
	}
	return nil
}

// logLines are manifold's log lines with that message for the pod.
func (d *demo) logLines(msg, pod string) []string {
	f, err := os.Open(d.logFile)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 1<<20), 1<<20)
	for s.Scan() {
		var line map[string]any
		if json.Unmarshal(s.Bytes(), &line) == nil && line["msg"] == msg && line["pod"] == pod {
			out = append(out, s.Text())
		}
	}
	return out
}
