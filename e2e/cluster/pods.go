package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/manifold-cni/manifold/e2e/crinode"
	"github.com/manifold-cni/manifold/internal/testenv"
	"github.com/manifold-cni/manifold/netconf"
)

// The pod annotations manifold reads and writes.
const (
	NetworksAnnotation = "k8s.v1.cni.cncf.io/networks"
	StatusAnnotation   = "k8s.v1.cni.cncf.io/network-status"
)

// PodSpec is a user's pod on the node: the node image, never pulled, its
// pause program, no cluster DNS, a one-second grace period. The scheduler
// places it (there is one node).
func PodSpec(namespace, name string, annotations map[string]string) *corev1.Pod {
	grace := int64(1)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Annotations: annotations},
		Spec: corev1.PodSpec{
			DNSPolicy:                     corev1.DNSDefault,
			TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{Name: "app", Image: crinode.ImageRef, ImagePullPolicy: corev1.PullNever,
				Command: []string{crinode.Pause}}},
		},
	}
}

// CreateNamespace makes a namespace and waits for its default
// ServiceAccount, without which the ServiceAccount admission refuses pods.
func (c *Cluster) CreateNamespace(ctx context.Context, name string) error {
	_, err := c.Clientset().CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", name, err)
	}
	return c.CP.WaitNamespaceReady(ctx, name)
}

// WaitRunning waits up to bound for the pod to be Running with an IP.
func (c *Cluster) WaitRunning(ctx context.Context, p *corev1.Pod, bound time.Duration) (*corev1.Pod, error) {
	deadline := time.Now().Add(bound)
	for {
		got, err := c.Clientset().CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
		if err == nil && got.Status.Phase == corev1.PodRunning && got.Status.PodIP != "" {
			return got, nil
		}
		if time.Now().After(deadline) {
			phase := "unknown"
			if got != nil {
				phase = string(got.Status.Phase)
			}
			return nil, fmt.Errorf("pod %s/%s is %s after %s (%v); events: %v", p.Namespace, p.Name, phase, bound, err, c.EventMessages(ctx, p))
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// DeleteAndWait deletes the pods and waits until the API has none of them:
// the kubelet has stopped their sandboxes (manifold's DEL) first.
func (c *Cluster) DeleteAndWait(ctx context.Context, bound time.Duration, pods ...*corev1.Pod) error {
	for _, p := range pods {
		err := c.Clientset().CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete pod %s: %w", p.Name, err)
		}
	}
	deadline := time.Now().Add(bound)
	for _, p := range pods {
		for {
			_, err := c.Clientset().CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("pod %s still in the API %s after its deletion (%v)", p.Name, bound, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	return nil
}

// NetworkStatus is the pod's network-status annotation, decoded (nil when
// there is none).
func NetworkStatus(p *corev1.Pod) ([]netconf.NetworkStatus, error) {
	v, ok := p.Annotations[StatusAnnotation]
	if !ok {
		return nil, nil
	}
	var out []netconf.NetworkStatus
	if err := json.Unmarshal([]byte(v), &out); err != nil {
		return nil, fmt.Errorf("pod %s: decode %s: %w", p.Name, StatusAnnotation, err)
	}
	return out, nil
}

// Sandbox is the ID and the network namespace of the pod's ready sandbox.
func (c *Cluster) Sandbox(ctx context.Context, p *corev1.Pod) (id, netns string, err error) {
	list, err := c.Node.CRIClient().Runtime.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{
		Filter: &runtimeapi.PodSandboxFilter{
			LabelSelector: map[string]string{"io.kubernetes.pod.uid": string(p.UID)},
			State:         &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY},
		}})
	if err != nil {
		return "", "", err
	}
	if len(list.Items) != 1 {
		return "", "", fmt.Errorf("pod %s has %d ready sandboxes, want 1", p.Name, len(list.Items))
	}
	id = list.Items[0].Id
	netns, err = c.Node.SandboxNetNS(ctx, id)
	return id, netns, err
}

// Interfaces lists the interfaces in the pod's network namespace, lo left
// out, sorted: what the pod really has, whatever the annotation says.
func (c *Cluster) Interfaces(ctx context.Context, p *corev1.Pod) ([]string, error) {
	_, path, err := c.Sandbox(ctx, p)
	if err != nil {
		return nil, err
	}
	var names []string
	err = ns.WithNetNSPath(path, func(ns.NetNS) error {
		links, err := testenv.LinkList()
		if err != nil {
			return err
		}
		for _, l := range links {
			if n := l.Attrs().Name; n != "lo" {
				names = append(names, n)
			}
		}
		return nil
	})
	sort.Strings(names)
	return names, err
}

// Events are the pod's events, oldest first.
func (c *Cluster) Events(ctx context.Context, p *corev1.Pod) []corev1.Event {
	list, err := c.Clientset().CoreV1().Events(p.Namespace).List(ctx, metav1.ListOptions{
		FieldSelector: "involvedObject.name=" + p.Name})
	if err != nil {
		return nil
	}
	sort.SliceStable(list.Items, func(i, j int) bool {
		return list.Items[i].LastTimestamp.Before(&list.Items[j].LastTimestamp)
	})
	return list.Items
}

// EventMessages are the pod's events as "Type Reason: message".
func (c *Cluster) EventMessages(ctx context.Context, p *corev1.Pod) []string {
	var out []string
	for _, e := range c.Events(ctx, p) {
		out = append(out, fmt.Sprintf("%s %s: %s", e.Type, e.Reason, e.Message))
	}
	return out
}

// ContainerLog is the log of the pod's container, from the kubelet's files
// (kubectl logs cannot reach this kubelet: it listens on 127.0.0.1 only, and
// a node may not register a loopback address). Each restart's log follows
// the one before; the CRI's timestamps and stream tags are kept.
func (c *Cluster) ContainerLog(p *corev1.Pod, container string) (string, error) {
	dir := filepath.Join(c.Kubelet.PodLogsDir(), p.Namespace+"_"+p.Name+"_"+string(p.UID), container)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", err
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	sort.Slice(names, func(i, j int) bool {
		a, _ := strconv.Atoi(strings.TrimSuffix(names[i], ".log"))
		b, _ := strconv.Atoi(strings.TrimSuffix(names[j], ".log"))
		return a < b
	})
	var b strings.Builder
	for _, n := range names {
		data, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil {
			return b.String(), err
		}
		fmt.Fprintf(&b, "--- %s:\n%s", n, data)
	}
	return b.String(), nil
}

// DaemonSetLogs are the logs of every container of the DaemonSet's pods in
// kube-system, the last max bytes of each, for a failure report.
func (c *Cluster) DaemonSetLogs(ctx context.Context, name string, max int) string {
	pods, err := c.Clientset().CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + name})
	if err != nil {
		return fmt.Sprintf("list %s's pods: %v", name, err)
	}
	var b strings.Builder
	for i := range pods.Items {
		p := &pods.Items[i]
		for _, ctr := range p.Spec.Containers {
			log, err := c.ContainerLog(p, ctr.Name)
			if len(log) > max {
				log = "…" + log[len(log)-max:]
			}
			fmt.Fprintf(&b, "=== %s/%s (%v):\n%s\n", p.Name, ctr.Name, err, log)
		}
	}
	return b.String()
}

// The DaemonSets' processes on the node, told from other tests' manifold
// processes by the flags the DaemonSets give them.
const (
	InstallerMark = "manifold-install\x00--cni-bin-dir=/host/opt/cni/bin"
	DaemonMark    = "--socket=/run/manifold/manifold.sock\x00--host-root=/hostroot"
)

// Process is one process of the node: its pid and its command line, NULs
// between the arguments.
type Process struct {
	PID     int
	Cmdline string
}

// Processes are the node's processes whose command line holds mark.
func Processes(mark string) []Process {
	var found []Process
	procs, _ := os.ReadDir("/proc")
	for _, d := range procs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", d.Name(), "cmdline"))
		if err == nil && strings.Contains(string(cmdline), mark) {
			found = append(found, Process{PID: pid, Cmdline: string(cmdline)})
		}
	}
	return found
}

// DaemonMemoryCgroup is the memory cgroup dir of the thick DaemonSet's node
// daemon: where the kubelet enforces the container's limit, and where its
// peak is read.
func DaemonMemoryCgroup() (string, error) {
	daemons := Processes(DaemonMark)
	if len(daemons) == 0 {
		return "", fmt.Errorf("no node daemon process found")
	}
	pid := strconv.Itoa(daemons[0].PID)
	b, err := os.ReadFile(filepath.Join("/proc", pid, "cgroup"))
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if parts := strings.SplitN(line, ":", 3); len(parts) == 3 && parts[1] == "memory" {
			return filepath.Join("/sys/fs/cgroup/memory", parts[2]), nil
		}
	}
	return "", fmt.Errorf("process %s has no memory cgroup: %s", pid, b)
}

// CgroupValue reads a number from a cgroup file of dir.
func CgroupValue(dir, file string) (int64, error) {
	b, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}
