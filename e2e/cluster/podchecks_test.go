package cluster_test

// Checks of the pods of a scenario, and their clean-up: what a pod's network
// namespace holds (cluster.PodNet) against what it should, and its
// network-status.

import (
	"context"
	"net"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/manifold-cni/manifold/e2e/cluster"
)

// runPods creates the pods and waits for each to run.
func (e *tenv) runPods(specs ...*corev1.Pod) []*corev1.Pod {
	e.t.Helper()
	var created []*corev1.Pod
	for _, s := range specs {
		p, err := e.c.Clientset().CoreV1().Pods(e.ns).Create(e.ctx(), s, metav1.CreateOptions{})
		if err != nil {
			e.t.Fatalf("create pod %s: %v", s.Name, err)
		}
		created = append(created, p)
	}
	var out []*corev1.Pod
	for _, p := range created {
		running, err := e.c.WaitRunning(e.ctx(), p, podWait)
		if err != nil {
			e.t.Fatalf("%v\n%s", err, e.manifoldLog(p.Name))
		}
		out = append(out, running)
	}
	return out
}

// waitReplicas waits for n Running pods with the label selector.
func (e *tenv) waitReplicas(selector string, n int) []*corev1.Pod {
	e.t.Helper()
	deadline := time.Now().Add(podWait)
	for {
		list, err := e.c.Clientset().CoreV1().Pods(e.ns).List(e.ctx(), metav1.ListOptions{LabelSelector: selector})
		var running []*corev1.Pod
		if err == nil {
			for i := range list.Items {
				if p := &list.Items[i]; p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" && p.DeletionTimestamp == nil {
					running = append(running, p)
				}
			}
		}
		if len(running) == n {
			return running
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("%d of %d pods %s Running after %s (%v)", len(running), n, selector, podWait, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// clearPods deletes the namespace's Deployments, waiting for their pods to
// go, and then every other pod. Each scenario runs it at its end, and on
// failure.
func (e *tenv) clearPods() {
	ctx, cancel := context.WithTimeout(context.Background(), podWait)
	defer cancel()
	deps := e.c.Clientset().AppsV1().Deployments(e.ns)
	fg := metav1.DeletePropagationForeground
	if err := deps.DeleteCollection(ctx, metav1.DeleteOptions{PropagationPolicy: &fg}, metav1.ListOptions{}); err != nil {
		e.t.Errorf("delete the Deployments: %v", err)
	}
	for {
		list, err := deps.List(ctx, metav1.ListOptions{})
		if err == nil && len(list.Items) == 0 {
			break
		}
		if ctx.Err() != nil {
			e.t.Errorf("the Deployments are still there after %s (%v)", podWait, err)
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
	pods, err := e.c.Clientset().CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		e.t.Errorf("list pods: %v", err)
		return
	}
	var list []*corev1.Pod
	for i := range pods.Items {
		list = append(list, &pods.Items[i])
	}
	if err := e.c.DeleteAndWait(ctx, podWait, list...); err != nil {
		e.t.Error(err)
	}
}

// podNet reads the pod's network namespace, with the sysctls.
func (e *tenv) podNet(p *corev1.Pod, sysctls ...string) *cluster.PodNet {
	e.t.Helper()
	n, err := e.c.PodNet(e.ctx(), p, sysctls...)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Logf("pod %s: %s", p.Name, n)
	return n
}

// wantLinks: the pod has exactly these interfaces (lo aside).
func (e *tenv) wantLinks(n *cluster.PodNet, names ...string) {
	e.t.Helper()
	if got := n.Names(); !slices.Equal(got, names) {
		e.t.Errorf("the pod has interfaces %v, want %v", got, names)
	}
}

// wantLink: the interface is of kind, with exactly the address addr (any
// address when addr is "").
func (e *tenv) wantLink(n *cluster.PodNet, name, kind, addr string) {
	e.t.Helper()
	l, ok := n.Links[name]
	if !ok {
		e.t.Errorf("the pod has no %s", name)
		return
	}
	if l.Kind != kind {
		e.t.Errorf("%s is a %s, want a %s", name, l.Kind, kind)
	}
	if addr != "" && !slices.Equal(l.Addrs, []string{addr}) {
		e.t.Errorf("%s has the addresses %v, want %s", name, l.Addrs, addr)
	}
}

// wantAddrIn: the interface has one IPv4 address, in the subnet; it returns
// the address without its prefix length.
func (e *tenv) wantAddrIn(n *cluster.PodNet, name, subnet string) string {
	e.t.Helper()
	_, want, err := net.ParseCIDR(subnet)
	if err != nil {
		e.t.Fatal(err)
	}
	addrs := n.Links[name].Addrs
	if len(addrs) != 1 {
		e.t.Errorf("%s has the addresses %v, want one in %s", name, addrs, subnet)
		return ""
	}
	ip, ipn, err := net.ParseCIDR(addrs[0])
	if err != nil || !want.Contains(ip) || ipn.Mask.String() != want.Mask.String() {
		e.t.Errorf("%s has %s, want an address in %s", name, addrs[0], subnet)
		return ""
	}
	return ip.String()
}

// wantDefaultRoute: the pod's only default route is route.
func (e *tenv) wantDefaultRoute(n *cluster.PodNet, route string) {
	e.t.Helper()
	if got := n.DefaultRoutes(); !slices.Equal(got, []string{route}) {
		e.t.Errorf("the pod's default routes are %q, want %q", got, route)
	}
}

// wantRoute: the pod has the route.
func (e *tenv) wantRoute(n *cluster.PodNet, route string) {
	e.t.Helper()
	if !slices.Contains(n.Routes, route) {
		e.t.Errorf("the pod's routes %q lack %q", n.Routes, route)
	}
}

func (e *tenv) wantSysctl(n *cluster.PodNet, name, value string) {
	e.t.Helper()
	if got := n.Sysctls[name]; got != value {
		e.t.Errorf("%s is %q in the pod, want %q", name, got, value)
	}
}

// wantStatus waits (the thick daemon patches just after its answer) for the
// pod's network-status, and checks its entries, each "<interface>
// <network>" in order.
func (e *tenv) wantStatus(p *corev1.Pod, want ...string) {
	e.t.Helper()
	deadline := time.Now().Add(reportWait)
	for {
		var got []string
		st, err := cluster.NetworkStatus(e.fresh(p))
		if err != nil {
			e.t.Error(err)
			return
		}
		for _, s := range st {
			got = append(got, s.Interface+" "+s.Name)
		}
		if len(got) > 0 && slices.Equal(got, want) {
			return
		}
		if time.Now().After(deadline) {
			e.t.Errorf("pod %s's network-status is %q after %s, want %q", p.Name, got, reportWait, want)
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}
