package e2e

// The admission webhook (package webhook) called by the real kube-apiserver
// over TLS on 127.0.0.1, with the certificates it makes and publishes itself:
// bad NADs, pods and Deployments are refused with ADD's words, good ones
// pass, a webhook that is down refuses nothing (failurePolicy Ignore), and
// its certificates rotate under load with no request lost.

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	admregv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/manifold-cni/manifold/admission"
	"github.com/manifold-cni/manifold/e2e/controlplane"
	"github.com/manifold-cni/manifold/internal/testenv"
	"github.com/manifold-cni/manifold/k8sclient/nadv1"
	"github.com/manifold-cni/manifold/netconf"
	"github.com/manifold-cni/manifold/webhook"
)

// webhookUnderTest is the webhook served in this process for one test.
type webhookUnderTest struct {
	cp     *controlplane.ControlPlane
	ns     string
	keeper *webhook.Keeper
	stop   context.CancelFunc
	done   chan error
}

// webhookNamespace creates a namespace for the test and a
// ValidatingWebhookConfiguration of the same name that sends its NADs, pods
// and Deployments to url, fail-open, and returns the name.
func webhookNamespace(t *testing.T, cp *controlplane.ControlPlane, url string) string {
	t.Helper()
	k8s := cp.Clientset()
	ctx := context.Background()
	ns := testenv.UniqueName("e2e-webhook-")
	if _, err := k8s.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })
	ignore, none, timeout := admregv1.Ignore, admregv1.SideEffectClassNone, int32(3)
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}}
	rule := func(group, version string, resources ...string) admregv1.RuleWithOperations {
		return admregv1.RuleWithOperations{Operations: []admregv1.OperationType{admregv1.Create, admregv1.Update},
			Rule: admregv1.Rule{APIGroups: []string{group}, APIVersions: []string{version}, Resources: resources}}
	}
	vwc := &admregv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: ns},
		Webhooks: []admregv1.ValidatingWebhook{{
			Name: "all.manifold-cni.github.io", AdmissionReviewVersions: []string{"v1"}, SideEffects: &none,
			FailurePolicy: &ignore, TimeoutSeconds: &timeout, NamespaceSelector: sel,
			ClientConfig: admregv1.WebhookClientConfig{URL: &url},
			Rules: []admregv1.RuleWithOperations{
				rule("k8s.cni.cncf.io", "*", "network-attachment-definitions"),
				rule("", "v1", "pods"),
				rule("apps", "v1", "deployments"),
			},
		}}}
	vwcs := k8s.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	if _, err := vwcs.Create(ctx, vwc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = vwcs.Delete(context.Background(), ns, metav1.DeleteOptions{}) })

	return ns
}

// startWebhook creates a namespace and a ValidatingWebhookConfiguration for
// the test (webhookNamespace), and serves the webhook in this process on
// 127.0.0.1, its certificates made with the lifetimes in l and checked every
// interval.
func startWebhook(t *testing.T, l webhook.Lifetimes, interval time.Duration) *webhookUnderTest {
	t.Helper()
	cp := controlPlane(t)
	k8s := cp.Clientset()
	ctx := context.Background()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ns := webhookNamespace(t, cp, "https://"+ln.Addr().String()+"/validate")

	k := &webhook.Keeper{Client: k8s, Namespace: ns, SecretName: "manifold-webhook-certs", WebhookConfig: ns,
		Hosts: []string{"127.0.0.1"}, Lifetimes: l, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if err := k.Round(ctx); err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(context.Background())
	w := &webhookUnderTest{cp: cp, ns: ns, keeper: k, stop: stop, done: make(chan error, 1)}
	go k.Run(sctx, interval)
	// No keep-alive: every call of the API server makes a TLS handshake,
	// so that each is checked against the certificate served at that moment.
	noKeepAlive := func(s *http.Server) { s.SetKeepAlivesEnabled(false) }
	go func() { w.done <- webhook.Serve(sctx, ln, k.GetCertificate, k.Ready, admission.Options{}, noKeepAlive) }()
	t.Cleanup(func() { w.shutdown(t) })
	w.waitServing(t)
	return w
}

func (w *webhookUnderTest) shutdown(t *testing.T) {
	if w.stop == nil {
		return
	}
	w.stop()
	w.stop = nil
	if err := <-w.done; err != nil {
		t.Errorf("webhook: %v", err)
	}
}

const metaPluginNAD = `{"cniVersion":"1.0.0","type":"multus","kubeconfig":"/etc/kubernetes/admin.conf"}`

// createNAD creates (or with dryRun, only admits) a NAD in the test's namespace.
func (w *webhookUnderTest) createNAD(name, config string, dryRun bool) error {
	obj, err := nadv1.New(w.ns, name, config).ToUnstructured()
	if err != nil {
		return err
	}
	opts := metav1.CreateOptions{}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = w.cp.Dynamic().Resource(controlplane.NADResource).Namespace(w.ns).Create(ctx, obj, opts)
	return err
}

// waitServing waits until the API server calls the webhook: a NAD it
// refuses is refused (the configuration takes a moment to reach the API
// server's watch).
func (w *webhookUnderTest) waitServing(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		err := w.createNAD("probe", metaPluginNAD, true)
		if err != nil && strings.Contains(err.Error(), "meta-plugin") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the API server does not call the webhook: a meta-plugin NAD gives %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func pod(ns, name string, annotations map[string]string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Annotations: annotations},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.example/none:1"}}}}
}

func deployment(ns, name string, annotations map[string]string) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: annotations},
				Spec: pod(ns, name, nil).Spec}}}
}

func wantRefused(t *testing.T, what string, err error, subs ...string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s was admitted", what)
		return
	}
	for _, s := range subs {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("%s: refusal %q does not say %q", what, err, s)
		}
	}
}

func TestWebhookRefusesBadObjects(t *testing.T) {
	w := startWebhook(t, webhook.Lifetimes{CA: 24 * time.Hour, Leaf: time.Hour, RenewFraction: 1.0 / 3}, time.Minute)
	ctx := context.Background()
	k8s := w.cp.Clientset()
	dup := map[string]string{netconf.AnnotNetworks: "net-a@data, net-b@data"}
	good := map[string]string{netconf.AnnotNetworks: "net-a@data, net-b"}

	wantRefused(t, "a meta-plugin NAD", w.createNAD("nested", metaPluginNAD, false),
		"manifold refuses NetworkAttachmentDefinition "+w.ns+"/nested: the ADD of every pod that asks for network "+w.ns+"/nested would fail with CNI code 7",
		"spec.config", `network `+w.ns+`/nested: plugin 0 type "multus" is a meta-plugin`)
	if err := w.createNAD("good", `{"cniVersion":"1.0.0","type":"macvlan","master":"eth0"}`, false); err != nil {
		t.Errorf("good NAD: %v", err)
	}
	_, err := k8s.CoreV1().Pods(w.ns).Create(ctx, pod(w.ns, "bad", dup), metav1.CreateOptions{})
	wantRefused(t, "a pod with an interface name twice", err,
		"manifold refuses Pod "+w.ns+"/bad: its ADD would fail with CNI code 7", "metadata.annotations[k8s.v1.cni.cncf.io/networks]",
		"pod "+w.ns+"/bad: network "+w.ns+`/net-b: interface name "data" is already taken by network `+w.ns+"/net-a")
	if _, err := k8s.CoreV1().Pods(w.ns).Create(ctx, pod(w.ns, "good", good), metav1.CreateOptions{}); err != nil {
		t.Errorf("good pod: %v", err)
	}
	_, err = k8s.AppsV1().Deployments(w.ns).Create(ctx, deployment(w.ns, "bad", map[string]string{netconf.AnnotDefaultNetwork: "a, b"}), metav1.CreateOptions{})
	wantRefused(t, "a Deployment whose pods name two default networks", err,
		"manifold refuses Deployment "+w.ns+"/bad: the ADD of each of its pods would fail with CNI code 7", "spec.template.metadata.annotations[v1.multus-cni.io/default-network]", "it must name exactly one")
	if _, err := k8s.AppsV1().Deployments(w.ns).Create(ctx, deployment(w.ns, "good", good), metav1.CreateOptions{}); err != nil {
		t.Errorf("good Deployment: %v", err)
	}

	// kubectl apply shows the user the same refusal.
	if _, err := w.cp.Kubectl(ctx, `apiVersion: k8s.cni.cncf.io/v1
kind: NetworkAttachmentDefinition
metadata: {name: applied, namespace: `+w.ns+`}
spec: {config: '`+metaPluginNAD+`'}
`, "apply", "-f", "-"); err == nil || !strings.Contains(err.Error(), "meta-plugin") {
		if err == nil || !strings.Contains(err.Error(), "no kubectl binary") {
			t.Errorf("kubectl apply of a meta-plugin NAD: %v", err)
		}
	}

	// Fail-open: with the webhook down, everything is admitted; ADD still
	// checks it.
	w.shutdown(t)
	if err := w.createNAD("nested", metaPluginNAD, false); err != nil {
		t.Errorf("with the webhook down, a NAD was refused: %v", err)
	}
	if _, err := k8s.CoreV1().Pods(w.ns).Create(ctx, pod(w.ns, "bad", dup), metav1.CreateOptions{}); err != nil {
		t.Errorf("with the webhook down, a pod was refused: %v", err)
	}
}

// TestWebhookRotationUnderLoad rotates the serving certificate every few
// seconds and the CA twice while refusals are asked for without pause: a
// webhook call that failed would be ignored and the bad NAD admitted (dry
// run), so every admitted one is a lost request.
func TestWebhookRotationUnderLoad(t *testing.T) {
	l := webhook.Lifetimes{CA: 30 * time.Second, Leaf: 8 * time.Second, RenewFraction: 0.5}
	w := startWebhook(t, l, 500*time.Millisecond)
	first, _ := w.keeper.GetCertificate(nil)

	var refused, admitted atomic.Int64
	var mu sync.Mutex
	var otherErrs []error
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := 0; i < 2; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				err := w.createNAD("load", metaPluginNAD, true)
				switch {
				case err == nil:
					admitted.Add(1)
				case strings.Contains(err.Error(), "meta-plugin"):
					refused.Add(1)
				default:
					mu.Lock()
					otherErrs = append(otherErrs, err)
					mu.Unlock()
				}
			}
		}()
	}
	// Wait for two CA rotations: the CA of the Secret changes twice.
	cas := map[string]bool{}
	deadline := time.Now().Add(3 * time.Minute)
	for len(cas) < 3 && time.Now().Before(deadline) {
		s, err := w.cp.Clientset().CoreV1().Secrets(w.ns).Get(context.Background(), "manifold-webhook-certs", metav1.GetOptions{})
		if err == nil {
			cas[string(s.Data["ca-signing.crt"])] = true
		}
		time.Sleep(200 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	last, _ := w.keeper.GetCertificate(nil)
	if len(cas) < 3 || string(first.Certificate[0]) == string(last.Certificate[0]) {
		t.Fatalf("the certificates did not rotate: %d CAs seen", len(cas))
	}
	if len(otherErrs) > 0 {
		t.Errorf("%d requests failed otherwise, the first with %v", len(otherErrs), otherErrs[0])
	}
	t.Logf("%d refusals, %d admitted through %d CAs", refused.Load(), admitted.Load(), len(cas))
	if admitted.Load() != 0 || refused.Load() < 10 {
		t.Errorf("%d bad NADs were admitted (webhook calls lost) and %d refused", admitted.Load(), refused.Load())
	}
}

// TestWebhookBinary runs `manifold webhook` (manifold-daemon webhook) as a
// process, as the Deployment does: it makes its Secret, publishes its
// caBundle, refuses a bad NAD, and stops cleanly on SIGTERM.
func TestWebhookBinary(t *testing.T) {
	cp := controlPlane(t)
	bin := testenv.Manifold(t)
	addr := testenv.FreeLoopbackAddr(t)
	ns := webhookNamespace(t, cp, "https://"+addr+"/validate")
	cmd := exec.Command(bin, "webhook", "--listen="+addr, "--kubeconfig="+cp.KubeconfigPath, "--namespace="+ns,
		"--webhook-config="+ns, "--hosts=127.0.0.1", "--check-interval=2s")
	var logs bytes.Buffer
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("webhook log:\n%s", logs.String())
		}
	})
	w := &webhookUnderTest{cp: cp, ns: ns}
	w.waitServing(t)
	s, err := cp.Clientset().CoreV1().Secrets(ns).Get(context.Background(), "manifold-webhook-certs", metav1.GetOptions{})
	if err != nil || len(s.Data["ca.crt"]) == 0 || len(s.Data["tls.key"]) == 0 {
		t.Errorf("the certificates' Secret: %v", err)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("the webhook exited with %v after SIGTERM", err)
		}
	case <-time.After(30 * time.Second):
		t.Error("the webhook did not stop within 30s of SIGTERM")
	}
}
