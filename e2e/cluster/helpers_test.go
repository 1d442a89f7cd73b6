package cluster_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/manifold-cni/manifold/e2e/cluster"
	"github.com/manifold-cni/manifold/e2e/controlplane"
	"github.com/manifold-cni/manifold/internal/testenv"
	"github.com/manifold-cni/manifold/k8sclient/nadv1"
)

// podWait bounds the wait for one pod to run: the kubelet retries a failed
// sandbox with a back-off that reaches tens of seconds, and a pod storm on
// two cores takes minutes. It is a did-not-hang bound, not a speed check.
const podWait = 5 * time.Minute

// reportWait bounds every wait for what manifold writes about a pod that
// runs: its network-status and events (in thick mode the daemon writes them
// just after it answers), and what the daemon's hot-plug writes. Each such
// wait polls and returns as soon as the write shows, so the bound costs
// nothing when the write comes; it only says when to give up, and on a
// loaded two-core machine (the control plane, the kubelet, the runtime and
// manifold on the same CPUs, beside other CPU-bound work) the write can take
// many seconds. It is a did-not-hang bound, not a speed check, as the e2e
// tier's reportWait.
const reportWait = 2 * time.Minute

// The extra networks every test pod asks for: a bridge and a macvlan on a
// veth end, each with host-local IPAM in its default dir
// (/var/lib/cni/networks/<name>), as an admin's NADs would be.
const (
	blueNetwork   = "cluster-blue"
	blueBridge    = "clblue0"
	greenNetwork  = "cluster-green"
	greenParent   = "clgreen0"
	podNetworks   = "blue, green"
	wantNetStatus = 3
)

var wantInterfaces = []string{"eth0", "net1", "net2"}

// tenv is one test's view of the cluster: a namespace with the two NADs.
type tenv struct {
	t    *testing.T
	c    *cluster.Cluster
	ns   string
	logs *cluster.LogKeeper // manifold's DaemonSet pods' logs, deleted pods' too
}

func newTenv(t *testing.T) *tenv {
	t.Helper()
	c := theCluster(t)
	e := &tenv{t: t, c: c, ns: testenv.UniqueName("ct-"), logs: c.KeepLogs()}
	t.Cleanup(e.logs.Stop)
	if err := ensureGreenParent(); err != nil {
		t.Fatal(err)
	}
	if err := c.CreateNamespace(e.ctx(), e.ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// The pods go first, while manifold is still installed to DEL them;
		// then whatever the test left installed; then the namespace.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		if pods, err := c.Clientset().CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{}); err == nil && len(pods.Items) > 0 {
			var list []*corev1.Pod
			for i := range pods.Items {
				list = append(list, &pods.Items[i])
			}
			if err := c.DeleteAndWait(ctx, podWait, list...); err != nil {
				t.Logf("clean-up: %v", err)
			}
		}
		for _, m := range []cluster.Mode{cluster.Thin, cluster.Thick} {
			if err := c.Uninstall(ctx, m); err != nil {
				t.Logf("clean-up: %v", err)
			}
		}
		c.Clientset().CoreV1().Namespaces().Delete(ctx, e.ns, metav1.DeleteOptions{})
	})
	e.nad("blue", fmt.Sprintf(`{"cniVersion":"1.0.0","name":%q,"plugins":[{"type":"bridge","bridge":%q,
		"ipam":{"type":"host-local","subnet":"10.245.1.0/24"}}]}`, blueNetwork, blueBridge))
	e.nad("green", fmt.Sprintf(`{"cniVersion":"1.0.0","name":%q,"type":"macvlan","master":%q,"mode":"bridge",
		"ipam":{"type":"host-local","subnet":"10.245.2.0/24"}}`, greenNetwork, greenParent))
	return e
}

var greenOnce sync.Once

// ensureGreenParent makes the veth pair whose end is the macvlan master,
// once; the cluster removes it when it stops.
func ensureGreenParent() (err error) {
	greenOnce.Do(func() {
		cluster.OwnNetwork(blueNetwork, blueBridge)
		cluster.OwnNetwork(greenNetwork, greenParent)
		veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: greenParent}, PeerName: greenParent[:len(greenParent)-1] + "1"}
		if err = netlink.LinkAdd(veth); err != nil {
			err = fmt.Errorf("create veth %s: %w", greenParent, err)
			return
		}
		for _, n := range []string{veth.Name, veth.PeerName} {
			l, lerr := netlink.LinkByName(n)
			if lerr == nil {
				lerr = netlink.LinkSetUp(l)
			}
			if lerr != nil {
				err = lerr
				return
			}
		}
	})
	return err
}

func (e *tenv) ctx() context.Context { return context.Background() }

func (e *tenv) nad(name, config string) {
	e.t.Helper()
	obj, err := nadv1.New(e.ns, name, config).ToUnstructured()
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.c.CP.Dynamic().Resource(controlplane.NADResource).Namespace(e.ns).Create(e.ctx(), obj, metav1.CreateOptions{}); err != nil {
		e.t.Fatalf("create NAD %s: %v", name, err)
	}
}

// createPod creates a pod that asks for the two extra networks.
func (e *tenv) createPod(prefix string) (*corev1.Pod, error) {
	p := cluster.PodSpec(e.ns, testenv.UniqueName(prefix), map[string]string{cluster.NetworksAnnotation: podNetworks})
	return e.c.Clientset().CoreV1().Pods(e.ns).Create(e.ctx(), p, metav1.CreateOptions{})
}

// checkNetworks says what a Running pod lacks: every network it asked for, in
// its network namespace and in its network-status. A pod that runs with the
// default network alone (manifold not called) fails both.
func (e *tenv) checkNetworks(p *corev1.Pod) error {
	got, err := e.c.Interfaces(e.ctx(), p)
	if err != nil {
		return fmt.Errorf("pod %s: %w", p.Name, err)
	}
	if !slices.Equal(got, wantInterfaces) {
		return fmt.Errorf("pod %s runs with interfaces %v, want %v", p.Name, got, wantInterfaces)
	}
	// The status patch follows the ADD's answer in daemon mode.
	deadline := time.Now().Add(reportWait)
	for {
		fresh, err := e.c.Clientset().CoreV1().Pods(p.Namespace).Get(e.ctx(), p.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		st, err := cluster.NetworkStatus(fresh)
		if err != nil {
			return err
		}
		if len(st) == wantNetStatus {
			for i, s := range st {
				if s.Interface != wantInterfaces[i] {
					return fmt.Errorf("pod %s: network-status entry %d is %s, want %s", p.Name, i, s.Interface, wantInterfaces[i])
				}
			}
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pod %s: network-status has %d entries after %s, want %d: %s", p.Name, len(st), reportWait, wantNetStatus, fresh.Annotations[cluster.StatusAnnotation])
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waitNoLeftovers waits (bounded) until the node holds nothing of pods that
// are gone, and fails the test with what is left.
func (e *tenv) waitNoLeftovers() {
	e.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		left := e.c.Leftovers()
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			e.t.Errorf("a minute after the pods went, the node still holds:\n  %s", strings.Join(left, "\n  "))
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// configGuard samples manifold's config on the host while it runs, and
// records every moment it was missing, empty, not JSON, or nesting a
// meta-plugin as the default network. A test that breaks the config itself
// excuses that one problem for the while it does.
type configGuard struct {
	stop    chan struct{}
	done    chan struct{}
	mu      sync.Mutex
	bad     []string
	last    string // the problem of the last sample, "" when there was none
	excused string // a problem's prefix that does not count for now
	n       int
}

// excuse makes the samples whose problem starts with prefix count as fine,
// until excuse("").
func (g *configGuard) excuse(prefix string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.excused = prefix
}

func guardConfig() *configGuard {
	g := &configGuard{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(g.done)
		for {
			select {
			case <-g.stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			// Under the lock: a sample is of the excuse in force when it
			// is taken.
			g.mu.Lock()
			problem := configProblem()
			g.n++
			if g.excused != "" && strings.HasPrefix(problem, g.excused) {
				problem = ""
			}
			// A problem is reported when it starts, with when it ended.
			if problem != g.last {
				now := time.Now().Format("15:04:05.000")
				if g.last != "" {
					g.bad[len(g.bad)-1] += " (until " + now + ")"
				}
				if problem != "" {
					g.bad = append(g.bad, now+" "+problem)
				}
				g.last = problem
			}
			g.mu.Unlock()
		}
	}()
	return g
}

// finish stops the sampling and returns what it saw wrong.
func (g *configGuard) finish() (samples int, bad []string) {
	close(g.stop)
	<-g.done
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.n, g.bad
}

// configProblem is what is wrong with manifold's config on the host now, or
// "".
func configProblem() string {
	b, err := os.ReadFile(cluster.ManifoldConfig)
	if err != nil {
		return "config unreadable: " + err.Error()
	}
	if len(b) == 0 {
		return "config is empty"
	}
	var list struct {
		Plugins []struct {
			Type           string `json:"type"`
			ClusterNetwork string `json:"clusterNetwork"`
		} `json:"plugins"`
	}
	if err := json.Unmarshal(b, &list); err != nil {
		return "config is not JSON: " + err.Error()
	}
	if len(list.Plugins) != 1 {
		return fmt.Sprintf("config has %d plugins", len(list.Plugins))
	}
	cn := list.Plugins[0].ClusterNetwork
	if cn == cluster.ManifoldConfig || strings.Contains(cn, "manifold") {
		return "config nests manifold in itself: clusterNetwork " + cn
	}
	if inner, err := os.ReadFile(cn); err == nil && strings.Contains(string(inner), `"manifold`) {
		return "config's clusterNetwork " + cn + " is a manifold config"
	}
	return ""
}

// manifoldLog is what manifold logged about the pod: the thin plugin's lines
// in containerd's log (it gets the plugins' stderr), and the thick daemon's
// in its container's log.
func (e *tenv) manifoldLog(pod string) string {
	var out []string
	if b, err := os.ReadFile(e.c.Node.LogFile()); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.Contains(l, pod) && strings.Contains(l, `"msg"`) {
				out = append(out, l)
			}
		}
	}
	if logs := e.c.DaemonSetLogs(e.ctx(), cluster.Thick.DaemonSet, 1<<30); logs != "" {
		for _, l := range strings.Split(logs, "\n") {
			if strings.Contains(l, pod) {
				out = append(out, l)
			}
		}
	}
	return "    manifold's log lines for " + pod + ":\n      " + strings.Join(out, "\n      ")
}
