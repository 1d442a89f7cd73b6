package controlplane

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// RootCAConfigMap is the ConfigMap that kube-controller-manager publishes in
// every namespace, holding the cluster's CA under the key "ca.crt"; pods'
// projected token volumes include it.
const RootCAConfigMap = "kube-root-ca.crt"

// startControllers starts kube-controller-manager, then kube-scheduler, each
// as its own user through its own kubeconfig in Dir, and waits for their
// /healthz.
func (cp *ControlPlane) startControllers(ctx context.Context, bins Binaries, p *pki) error {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(p.caCertBytes)
	// No credentials: /healthz is open to anonymous requests.
	probeClient := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	defer probeClient.CloseIdleConnections()

	for _, c := range []struct {
		name, bin, user string
		slot            **process
		args            []string
	}{
		// The serviceaccount and root-ca-cert-publisher controllers make each
		// namespace's "default" ServiceAccount and kube-root-ca.crt, which
		// ServiceAccount admission and the kubelet need. Each controller
		// runs as its own ServiceAccount, as on a real cluster.
		{"kube-controller-manager", bins.KubeControllerManager, controllerManagerUser, &cp.controllerManager, []string{
			"--root-ca-file=" + p.caFile,
			"--service-account-private-key-file=" + p.saKeyFile,
			"--use-service-account-credentials=true",
		}},
		{"kube-scheduler", bins.KubeScheduler, schedulerUser, &cp.scheduler, nil},
	} {
		kubeconfig, err := cp.writeKubeconfig(c.name, p.tokens[c.user])
		if err != nil {
			return err
		}
		flags := func(port int) []string {
			return append(controllerArgs(kubeconfig, port, p), c.args...)
		}
		if err := cp.startController(ctx, c.name, c.bin, c.slot, flags, probeClient); err != nil {
			return err
		}
	}
	return nil
}

// controllerArgs are the flags kube-controller-manager and kube-scheduler
// share:
//   - their own kubeconfig;
//   - serving on 127.0.0.1 only, with the API server's certificate (it names
//     127.0.0.1 and is signed by the CA), so the health probe verifies TLS;
//     no authentication or authorization kubeconfig, so requests to their
//     endpoints are anonymous and only /healthz, /readyz and /livez answer
//     them. (Delegated authentication would need kube-apiserver's client and
//     front-proxy CAs, which nothing here uses, and logs their absence again
//     and again.)
//   - no leader election: there is one of each, and a lease would only delay
//     the start.
func controllerArgs(kubeconfig string, port int, p *pki) []string {
	return []string{
		"--kubeconfig=" + kubeconfig,
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--tls-cert-file=" + p.certFile,
		"--tls-private-key-file=" + p.keyFile,
		"--leader-elect=false",
	}
}

// startController starts one program on a free port, records it in *slot so
// that Stop ends it, and waits for its /healthz. A port taken by someone else
// before the program binds it is retried with a fresh one.
func (cp *ControlPlane) startController(ctx context.Context, name, bin string, slot **process,
	args func(port int) []string, probeClient *http.Client) error {
	for attempt := 1; ; attempt++ {
		port, err := freePort()
		if err != nil {
			return err
		}
		proc, err := startProcess(name, bin, args(port), filepath.Join(cp.Dir, name+".log"), cp.env)
		if err != nil {
			return err
		}
		cp.mu.Lock()
		*slot = proc
		cp.mu.Unlock()
		url := "https://127.0.0.1:" + strconv.Itoa(port) + "/healthz"
		err = cp.waitReady(ctx, proc, func(ctx context.Context) (bool, string) {
			return probe(ctx, probeClient, url, "ok")
		})
		if err == nil {
			return nil
		}
		if attempt >= 3 || !errors.Is(err, errPortInUse) {
			return err
		}
		_ = proc.kill()
	}
}

// WaitNamespaceReady waits until the controllers have given the namespace
// its "default" ServiceAccount and its kube-root-ca.crt ConfigMap: until
// then, ServiceAccount admission refuses a pod there, and the kubelet cannot
// fill its token volume. Without Options.Controllers it returns at once.
func (cp *ControlPlane) WaitNamespaceReady(ctx context.Context, namespace string) error {
	if !cp.controllers {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, cp.readyTimeout)
	defer cancel()
	for {
		_, err := cp.clientset.CoreV1().ServiceAccounts(namespace).Get(ctx, "default", metav1.GetOptions{})
		if err == nil {
			_, err = cp.clientset.CoreV1().ConfigMaps(namespace).Get(ctx, RootCAConfigMap, metav1.GetOptions{})
		}
		if err == nil {
			return nil
		}
		if !apierrors.IsNotFound(err) && ctx.Err() == nil {
			return fmt.Errorf("wait for namespace %s to be ready: %w", namespace, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for the default ServiceAccount and %s in namespace %s: %w (last: %v)",
				RootCAConfigMap, namespace, ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
