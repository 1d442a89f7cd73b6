package daemon

import (
	"fmt"
	"net/http"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
)

// The pod watch of the hot-plug: one informer on the pods of this node
// (spec.nodeName), which lists them once and then watches, through client-go.
// RBAC grants list and watch on pods for it (deployments/rbac.yaml).

// watchResync is how often the informer hands every pod to the controller
// again, so that a change missed for any reason is still made.
const watchResync = 10 * time.Minute

// restConfig is the watch's client config: the daemon's --kubeconfig, or the
// in-cluster config; nil when neither is there.
func restConfig(kubeconfig string, m *metrics) (*rest.Config, error) {
	var cfg *rest.Config
	var err error
	switch {
	case kubeconfig != "":
		cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	case os.Getenv("KUBERNETES_SERVICE_HOST") != "":
		cfg, err = rest.InClusterConfig()
	default:
		return nil, nil
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
