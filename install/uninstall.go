package install

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// The downward-API variables by which the DaemonSets tell the installer
// which pod it runs in.
const (
	envPodName      = "POD_NAME"
	envPodNamespace = "POD_NAMESPACE"
)

// uninstallCheckTimeout bounds the API reads that tell an uninstall from a
// restart; they run in the pod's grace period.
const uninstallCheckTimeout = 5 * time.Second

// stopReason says why the installer is being stopped, as far as the API
// server tells: uninstall is true only when manifold is being removed from
// the node (its DaemonSet is gone or being deleted, or its ServiceAccount's
// permissions are), and the other mode's DaemonSet does not run a pod on
// this node (a switch of modes is no uninstall). A pod deleted, evicted or restarted while its DaemonSet
// stays is not an uninstall: the DaemonSet makes a new one, and the config
// must stay so that pods created meanwhile get their networks (Multus's
// daemon removed it on every SIGTERM: multus-cni#1527). When the API cannot
// be asked, the answer is no: keeping the config fails closed, removing it
// would fail open.
func stopReason(ctx context.Context, client kubernetes.Interface, namespace, name, node string) (uninstall bool, why string) {
	ctx, cancel := context.WithTimeout(ctx, uninstallCheckTimeout)
	defer cancel()
	uninstall, why, owner := ownerReason(ctx, client, namespace, name)
	if !uninstall {
		return false, why
	}
	// The other mode's DaemonSet taking over this node (a switch of modes, as
	// docs/install.md does it) is no uninstall either, even when its
	// installer has not started yet or has just restarted, so that the node
	// lock cannot see it.
	if other, ok := successor(ctx, client, namespace, owner, node); ok {
		return false, why + ", but " + other
	}
	return uninstall, why
}

// daemonSetNames are the DaemonSets of deployments/ (thin and thick mode),
// the only ones the installer's Role may read.
var daemonSetNames = []string{"manifold", "manifold-thick"}

// successor finds another of manifold's DaemonSets, not being deleted, with
// a pod on node (any node when node is ""), that is not being deleted either.
func successor(ctx context.Context, client kubernetes.Interface, namespace, own, node string) (string, bool) {
	for _, name := range daemonSetNames {
		if name == own {
			continue
		}
		ds, err := client.AppsV1().DaemonSets(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil || ds.DeletionTimestamp != nil || ds.Spec.Selector == nil {
			continue
		}
		opts := metav1.ListOptions{LabelSelector: metav1.FormatLabelSelector(ds.Spec.Selector)}
		if node != "" {
			opts.FieldSelector = "spec.nodeName=" + node
		}
		pods, err := client.CoreV1().Pods(namespace).List(ctx, opts)
		if err != nil {
			continue
		}
		for i := range pods.Items {
			p := &pods.Items[i]
			if p.DeletionTimestamp == nil && (node == "" || p.Spec.NodeName == node) {
				return fmt.Sprintf("DaemonSet %s/%s runs pod %s on this node, which takes manifold over", namespace, name, p.Name), true
			}
		}
	}
	return "", false
}

// ownerReason is stopReason's answer from this installer's pod and its own
// DaemonSet alone, and that DaemonSet's name ("" when the pod has none).
func ownerReason(ctx context.Context, client kubernetes.Interface, namespace, name string) (uninstall bool, why, ownerName string) {
	pod, err := client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
	if gone, why := permissionsGone(err); gone {
		return true, why, ""
	}
	if err != nil {
		return false, fmt.Sprintf("cannot read this installer's pod %s/%s: %v", namespace, name, err), ""
	}
	owner := metav1.GetControllerOf(pod)
	if owner == nil || owner.Kind != "DaemonSet" {
		// Orphaned (the DaemonSet was deleted with --cascade=orphan) or never
		// owned: nothing will make this pod again.
		return true, fmt.Sprintf("pod %s/%s has no DaemonSet that owns it", namespace, name), ""
	}
	ds, err := client.AppsV1().DaemonSets(namespace).Get(ctx, owner.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return true, fmt.Sprintf("DaemonSet %s/%s is gone", namespace, owner.Name), owner.Name
	case err != nil:
		if gone, why := permissionsGone(err); gone {
			return true, why, ""
		}
		return false, fmt.Sprintf("cannot read DaemonSet %s/%s: %v", namespace, owner.Name, err), ""
	case ds.DeletionTimestamp != nil:
		return true, fmt.Sprintf("DaemonSet %s/%s is being deleted", namespace, owner.Name), owner.Name
	case ds.UID != owner.UID:
		return true, fmt.Sprintf("DaemonSet %s/%s was replaced by another object", namespace, owner.Name), owner.Name
	}
	return false, fmt.Sprintf("DaemonSet %s/%s stays; it starts a new installer", namespace, owner.Name), ""
}

// permissionsGone reports an API answer that means manifold's ServiceAccount
// or its role was deleted: an uninstall whose RBAC went first. A manifold
// left installed then could never authenticate again.
func permissionsGone(err error) (bool, string) {
	switch {
	case apierrors.IsUnauthorized(err):
		return true, "the ServiceAccount's token is refused: " + err.Error()
	case apierrors.IsForbidden(err):
		return true, "the ServiceAccount may no longer read its pod or DaemonSet: " + err.Error()
	}
	return false, ""
}

// apiClient is a client that authenticates as the installer's own pod: its
// projected token and the cluster CA, as mounted here.
func (in *installer) apiClient() (kubernetes.Interface, error) {
	return kubernetes.NewForConfig(&rest.Config{
		Host:            in.server,
		BearerTokenFile: in.o.TokenFile,
		TLSClientConfig: rest.TLSClientConfig{CAFile: in.o.CAFile},
		Timeout:         uninstallCheckTimeout,
		UserAgent:       "manifold-install",
	})
}

// uninstalling asks the API server whether this stop is an uninstall, when
// the installer knows its pod (the DaemonSets set POD_NAME and POD_NAMESPACE).
// Without them, as when it is run by hand, every stop counts as one.
func (in *installer) uninstalling() (bool, string) {
	name, namespace := in.env(envPodName), in.env(envPodNamespace)
	if name == "" || namespace == "" {
		return true, envPodName + " and " + envPodNamespace + " are not set, so every stop counts as an uninstall"
	}
	newClient := in.apiClient
	if in.o.newClient != nil {
		newClient = in.o.newClient
	}
	client, err := newClient()
	if err != nil {
		return false, fmt.Sprintf("cannot make an API client: %v", err)
	}
	return stopReason(context.Background(), client, namespace, name, in.env(envNodeName))
}
