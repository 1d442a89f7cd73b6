package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/clock"

	"github.com/manifold-cni/manifold/netconf"
)

// The pod watch of the hot-plug: one informer on the pods of this node
// (spec.nodeName), which lists them once and then watches, through client-go.
// RBAC grants list and watch on pods for it (deployments/rbac.yaml).

// watchResync is how often the informer hands every pod to the controller
// again, so that a change missed for any reason is still made.
const watchResync = 10 * time.Minute

// The pod watch's set-up is tried again with these waits, doubling, when it
// fails: the daemon and the installer that writes its kubeconfig start
// together, so the file may not be there yet. Variables for tests.
var (
	setupBaseWait = time.Second
	setupMaxWait  = time.Minute
)

// hotplugState is the hot-plug controller once it runs, and why it does not
// until then; /healthz and the metrics say which.
type hotplugState struct {
	m        *metrics
	disabled bool // --hotplug=off or external: no pod watch, nothing to report

	mu  sync.Mutex
	hp  *hotplug
	why string // why it does not run, while hp is nil
}

// startHotplug starts the pod watch and the hot-plug controller, now or, when
// the set-up fails, in the background with growing waits until it works or
// ctx ends.
func startHotplug(ctx context.Context, log *slog.Logger, d *daemon, mode hotplugMode, nodeName string, node *netconf.NodePaths) *hotplugState {
	s := &hotplugState{m: d.metrics}
	switch {
	case mode == hotplugOff:
		log.Info("hot-plug is off (--hotplug=off)")
		s.disabled = true
		return s
	case mode == hotplugExternal:
		// An external controller owns the changes: the daemon must not act
		// on the same annotation edit, so it does not watch pods at all.
		log.Info("hot-plug belongs to an external controller (--hotplug=external): no pod watch; /delegate on the Multus socket serves it")
		s.disabled = true
		return s
	case nodeName == "":
		s.why = "no --node-name and no NODE_NAME"
	case node.Kubeconfig == "" && os.Getenv("KUBERNETES_SERVICE_HOST") == "":
		s.why = "no --kubeconfig and not in a cluster"
	}
	if s.why != "" {
		log.Warn("hot-plug is off: " + s.why)
		return s
	}
	setup := func() (*hotplug, error) {
		cfg, err := restConfig(node.Kubeconfig, d.metrics)
		if err != nil {
			return nil, err
		}
		inf, err := podInformer(cfg, nodeName)
		if err != nil {
			return nil, err
		}
		return newHotplug(log, d.plugin.Reconcile, d.metrics, node.CNIDir, inf, clock.RealClock{})
	}
	s.why = "its set-up has not run yet"
	go func() {
		for wait := setupBaseWait; ; wait = min(2*wait, setupMaxWait) {
			hp, err := setup()
			if err == nil {
				hp.run(ctx)
				s.set(hp, "")
				log.Info("hot-plug on: watching this node's pods", "node", nodeName)
				return
			}
			s.set(nil, "its set-up failed; the daemon's log says why, and it is tried again")
			log.Warn("hot-plug is not running yet: its set-up failed; trying again", "error", err, "retryIn", wait.String())
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
		}
	}()
	return s
}

func (s *hotplugState) set(hp *hotplug, why string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hp, s.why = hp, why
	if hp != nil {
		s.m.hotplugOn.Set(1)
	}
}

func (s *hotplugState) running() *hotplug {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hp
}

// health is /healthz: hot-plug, unless turned off, runs and has listed the
// node's pods. The reason says no more than it must: the endpoint has no
// authentication.
func (s *hotplugState) health() error {
	if s.disabled {
		return nil
	}
	s.mu.Lock()
	hp, why := s.hp, s.why
	s.mu.Unlock()
	if hp == nil {
		return errors.New("hot-plug is not running: " + why)
	}
	if !hp.synced() {
		return errors.New("the pod watch has not listed this node's pods yet")
	}
	return nil
}

// waitWithin waits for the hot-plug's workers to stop, at most bound.
func (s *hotplugState) waitWithin(bound time.Duration) bool {
	hp := s.running()
	return hp == nil || hp.waitWithin(bound)
}

// restConfig is the watch's client config: the daemon's --kubeconfig, or the
// in-cluster config.
func restConfig(kubeconfig string, m *metrics) (*rest.Config, error) {
	var cfg *rest.Config
	var err error
	switch {
	case kubeconfig != "":
		cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	default:
		cfg, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("the pod watch's client config: %w", err)
	}
	cfg.UserAgent = "manifold-daemon"
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { return &countingTransport{rt: rt, m: m} }
	return cfg, nil
}

// podInformer is the informer on the pods of node.
func podInformer(cfg *rest.Config, node string) (cache.SharedIndexInformer, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("the pod watch's client: %w", err)
	}
	f := informers.NewSharedInformerFactoryWithOptions(cs, watchResync, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", node).String()
	}))
	inf := f.Core().V1().Pods().Informer()
	// Only what the hot-plug reads is kept of each pod.
	if err := inf.SetTransform(trimPod); err != nil {
		return nil, err
	}
	return inf, nil
}

// trimPod drops what the controller does not read (the spec, the status,
// managed fields), so that a node's pods cost the daemon little memory.
func trimPod(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:         p.Namespace,
			Name:              p.Name,
			UID:               p.UID,
			ResourceVersion:   p.ResourceVersion,
			DeletionTimestamp: p.DeletionTimestamp,
			Annotations:       p.Annotations,
		},
		Spec: corev1.PodSpec{NodeName: p.Spec.NodeName},
	}, nil
}

// countingTransport counts the watch's requests: a list or a watch of pods.
type countingTransport struct {
	rt http.RoundTripper
	m  *metrics
}

func (t *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	kind := "pod_list"
	if r.URL.Query().Get("watch") == "true" || r.URL.Query().Get("watch") == "1" {
		kind = "pod_watch"
	}
	res, err := t.rt.RoundTrip(r)
	if err == nil && res.StatusCode >= 400 {
		t.m.apiRequest(kind, fmt.Errorf("HTTP %d", res.StatusCode))
	} else {
		t.m.apiRequest(kind, err)
	}
	return res, err
}
