package crinode

import "sync"

// running holds every Containerd and Kubelet that Start and StartKubelet
// returned and that Stop has not yet removed, so that a program interrupted
// by a signal (which skips its deferred clean-ups and t.Cleanup) can still
// remove them with StopAll.
var running struct {
	sync.Mutex
	nodes    map[*Containerd]bool
	kubelets map[*Kubelet]bool
}

func track(c *Containerd, k *Kubelet, on bool) {
	running.Lock()
	defer running.Unlock()
	if running.nodes == nil {
		running.nodes, running.kubelets = map[*Containerd]bool{}, map[*Kubelet]bool{}
	}
	if c != nil {
		if on {
			running.nodes[c] = true
		} else {
			delete(running.nodes, c)
		}
	}
	if k != nil {
		if on {
			running.kubelets[k] = true
		} else {
			delete(running.kubelets, k)
		}
	}
}

// StopAll stops every kubelet, then every containerd, still running.
func StopAll() {
	running.Lock()
	var ks []*Kubelet
	var cs []*Containerd
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
