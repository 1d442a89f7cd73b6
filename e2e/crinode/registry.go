package crinode

import "sync"

// running holds every Node and Kubelet that Start, StartCRIO and
// StartKubelet returned and that Stop has not yet removed, so that a program interrupted
// by a signal (which skips its deferred clean-ups and t.Cleanup) can still
// remove them with StopAll.
var running struct {
	sync.Mutex
	nodes    map[Node]bool
	kubelets map[*Kubelet]bool
}

func track(c *Containerd, k *Kubelet, on bool) {
	if c != nil {
		trackNode(c, on)
	}
	running.Lock()
	defer running.Unlock()
	if running.kubelets == nil {
		running.kubelets = map[*Kubelet]bool{}
	}
	if k != nil {
		if on {
			running.kubelets[k] = true
		} else {
			delete(running.kubelets, k)
		}
	}
}

func trackNode(n Node, on bool) {
	running.Lock()
	defer running.Unlock()
	if running.nodes == nil {
		running.nodes = map[Node]bool{}
	}
	if on {
		running.nodes[n] = true
	} else {
		delete(running.nodes, n)
	}
}

// StopAll stops every kubelet, then every runtime, still running.
func StopAll() {
	running.Lock()
	var ks []*Kubelet
	var cs []Node
	for k := range running.kubelets {
		ks = append(ks, k)
	}
	for c := range running.nodes {
		cs = append(cs, c)
	}
	running.Unlock()
	for _, k := range ks {
		k.Stop()
	}
	for _, c := range cs {
		c.Stop()
	}
}
