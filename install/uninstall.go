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
// permissions are). A pod deleted, evicted or restarted while its DaemonSet
// stays is not an uninstall: the DaemonSet makes a new one, and the config
// must stay so that pods created meanwhile get their networks (Multus's
// daemon removed it on every SIGTERM: multus-cni#1527). When the API cannot
// be asked, the answer is no: keeping the config fails closed, removing it
// would fail open.
func stopReason(ctx context.Context, client kubernetes.Interface, namespace, name string) (uninstall bool, why string) {
	ctx, cancel := context.WithTimeout(ctx, uninstallCheckTimeout)
	defer cancel()
	pod, err := client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
	if gone, why := permissionsGone(err); gone {
		return true, why
	}
	if err != nil {
		return false, fmt.Sprintf("cannot read this installer's pod %s/%s: %v", namespace, name, err)
	}
	owner := metav1.GetControllerOf(pod)
	if owner == nil || owner.Kind != "DaemonSet" {
		// Orphaned (the DaemonSet was deleted with --cascade=orphan) or never
		// owned: nothing will make this pod again.
		return true, fmt.Sprintf("pod %s/%s has no DaemonSet that owns it", namespace, name)
	}
	ds, err := client.AppsV1().DaemonSets(namespace).Get(ctx, owner.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return true, fmt.Sprintf("DaemonSet %s/%s is gone", namespace, owner.Name)
	case err != nil:
		if gone, why := permissionsGone(err); gone {
			return true, why
		}
		return false, fmt.Sprintf("cannot read DaemonSet %s/%s: %v", namespace, owner.Name, err)
	case ds.DeletionTimestamp != nil:
		return true, fmt.Sprintf("DaemonSet %s/%s is being deleted", namespace, owner.Name)
	case ds.UID != owner.UID:
		return true, fmt.Sprintf("DaemonSet %s/%s was replaced by another object", namespace, owner.Name)
	}
	return false, fmt.Sprintf("DaemonSet %s/%s stays; it starts a new installer", namespace, owner.Name)
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
	return stopReason(context.Background(), client, namespace, name)
}
