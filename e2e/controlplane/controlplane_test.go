package controlplane

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

func nad(name string, config any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "k8s.cni.cncf.io/v1",
		"kind":       "NetworkAttachmentDefinition",
		"metadata":   map[string]any{"name": name, "namespace": "default"},
		"spec":       map[string]any{"config": config},
	}}
}

// TestControlPlane drives one control plane through everything the e2e
// tests rely on; starting one costs seconds, so the checks share it.
func TestControlPlane(t *testing.T) {
	cp := StartForTest(t, Options{})
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	if !strings.HasPrefix(cp.URL, "https://127.0.0.1:") {
		t.Fatalf("URL = %q, want https://127.0.0.1:<port>", cp.URL)
	}

	t.Run("kubeconfig", func(t *testing.T) {
		cfg, err := clientcmd.BuildConfigFromFlags("", cp.KubeconfigPath)
		if err != nil {
			t.Fatalf("load kubeconfig: %v", err)
		}
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatalf("clientset from kubeconfig: %v", err)
		}
		if _, err := cs.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); err != nil {
			t.Fatalf("get default namespace through kubeconfig: %v", err)
		}
	})

	t.Run("nad crd", func(t *testing.T) {
		if err := cp.InstallCRD(ctx); err != nil {
			t.Fatalf("install crd: %v", err)
		}
		// A second install must be harmless: many tests call it.
		if err := cp.InstallCRD(ctx); err != nil {
			t.Fatalf("install crd again: %v", err)
		}
		nads := cp.Dynamic().Resource(NADResource).Namespace("default")
		const conf = `{"cniVersion":"1.0.0","name":"blue","type":"bridge"}`
		if _, err := nads.Create(ctx, nad("blue", conf), metav1.CreateOptions{}); err != nil {
			t.Fatalf("create nad: %v", err)
		}
		got, err := nads.Get(ctx, "blue", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("get nad: %v", err)
		}
		if c, _, _ := unstructured.NestedString(got.Object, "spec", "config"); c != conf {
			t.Fatalf("spec.config = %q, want %q", c, conf)
		}

		_, err = nads.Create(ctx, nad("bad", map[string]any{"type": "bridge"}), metav1.CreateOptions{})
		if !apierrors.IsInvalid(err) {
			t.Fatalf("create nad with object spec.config: err = %v, want Invalid", err)
		}
		if _, err := nads.Get(ctx, "bad", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("rejected nad was stored: get err = %v", err)
		}
	})

	t.Run("metrics", func(t *testing.T) {
		text, err := cp.Metrics(ctx)
		if err != nil {
			t.Fatalf("metrics: %v", err)
		}
		if !strings.Contains(text, "apiserver_request_total") {
			t.Fatalf("metrics lack apiserver_request_total")
		}
		match := map[string]string{"group": "k8s.cni.cncf.io", "resource": "network-attachment-definitions", "verb": "POST"}
		if n := SumMetric(text, "apiserver_request_total", match); n < 2 {
			t.Fatalf("nad POSTs counted = %v, want >= 2 (one created, one rejected)", n)
		}
		match["code"] = "422"
		if n := SumMetric(text, "apiserver_request_total", match); n != 1 {
			t.Fatalf("rejected nad POSTs counted = %v, want 1", n)
		}
	})

	t.Run("apply yaml", func(t *testing.T) {
		manifest := `
apiVersion: v1
kind: Namespace
metadata:
  name: e2e-apply
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: plugin
  namespace: e2e-apply
---
# an empty document and a comment-only one must be skipped
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: e2e-pod-reader
rules:
  - apiGroups: [""]
    resources: [pods]
    verbs: [get]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: e2e-pod-reader
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: e2e-pod-reader
subjects:
  - kind: ServiceAccount
    name: plugin
    namespace: e2e-apply
---
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: agent
  namespace: e2e-apply
spec:
  selector:
    matchLabels: {app: agent}
  template:
    metadata:
      labels: {app: agent}
    spec:
      hostNetwork: true
      containers:
        - name: agent
          image: example.invalid/agent:1
          securityContext:
            privileged: true
---
apiVersion: k8s.cni.cncf.io/v1
kind: NetworkAttachmentDefinition
metadata:
  name: green
  namespace: e2e-apply
spec:
  config: '{"cniVersion":"1.0.0","name":"green","type":"macvlan"}'
`
		path := filepath.Join(t.TempDir(), "objects.yaml")
		if err := os.WriteFile(path, []byte(manifest), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := cp.ApplyYAML(ctx, path); err != nil {
			t.Fatalf("apply: %v", err)
		}
		// Applying again updates in place instead of failing on conflicts.
		if err := cp.ApplyYAML(ctx, path); err != nil {
			t.Fatalf("apply again: %v", err)
		}
		cs := cp.Clientset()
		if _, err := cs.AppsV1().DaemonSets("e2e-apply").Get(ctx, "agent", metav1.GetOptions{}); err != nil {
			t.Fatalf("get applied daemonset: %v", err)
		}
		if _, err := cp.Dynamic().Resource(NADResource).Namespace("e2e-apply").Get(ctx, "green", metav1.GetOptions{}); err != nil {
			t.Fatalf("get applied nad: %v", err)
		}

		// RBAC is real: the binding lets the ServiceAccount get pods, not
		// delete them.
		for verb, want := range map[string]bool{"get": true, "delete": false} {
			sar := &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
				User:               "system:serviceaccount:e2e-apply:plugin",
				Groups:             []string{"system:serviceaccounts"},
				ResourceAttributes: &authzv1.ResourceAttributes{Verb: verb, Resource: "pods", Namespace: "x"},
			}}
			res, err := cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
			if err != nil {
				t.Fatalf("subject access review: %v", err)
			}
			if res.Status.Allowed != want {
				t.Fatalf("service account may %s pods = %v, want %v", verb, res.Status.Allowed, want)
			}
		}

		// TokenRequest works, and the token authenticates as the
		// ServiceAccount.
		tr, err := cs.CoreV1().ServiceAccounts("e2e-apply").CreateToken(ctx, "plugin",
			&authv1.TokenRequest{Spec: authv1.TokenRequestSpec{}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("token request: %v", err)
		}
		cfg := cp.RESTConfig()
		cfg.BearerToken = tr.Status.Token
		saClient, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		_, err = saClient.CoreV1().Pods("e2e-apply").Get(ctx, "none", metav1.GetOptions{})
		if !apierrors.IsNotFound(err) {
			t.Fatalf("get pod with service account token: err = %v, want NotFound", err)
		}
		if err := saClient.CoreV1().Pods("e2e-apply").Delete(ctx, "none", metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
			t.Fatalf("delete pod with service account token: err = %v, want Forbidden", err)
		}
	})

	t.Run("pod without controller manager", func(t *testing.T) {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "p1", Namespace: "default"},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "example.invalid/c:1"}}},
		}
		if _, err := cp.Clientset().CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create pod: %v", err)
		}
	})

	t.Run("pause and resume", func(t *testing.T) {
		if err := cp.Pause(); err != nil {
			t.Fatalf("pause: %v", err)
		}
		short, cancelShort := context.WithTimeout(ctx, time.Second)
		_, err := cp.Clientset().CoreV1().Namespaces().Get(short, "default", metav1.GetOptions{})
		cancelShort()
		if err == nil {
			t.Errorf("request to a paused kube-apiserver succeeded")
		}
		if err := cp.Resume(); err != nil {
			t.Fatalf("resume: %v", err)
		}
		if _, err := cp.Clientset().CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); err != nil {
			t.Fatalf("request after resume: %v", err)
		}
	})

	t.Run("stop and restart apiserver", func(t *testing.T) {
		if err := cp.StopAPIServer(); err != nil {
			t.Fatalf("stop kube-apiserver: %v", err)
		}
		if _, err := cp.Clientset().CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); err == nil {
			t.Fatalf("request to a stopped kube-apiserver succeeded")
		}
		if err := cp.RestartAPIServer(ctx); err != nil {
			t.Fatalf("restart kube-apiserver: %v", err)
		}
		// etcd kept the data.
		if _, err := cp.Dynamic().Resource(NADResource).Namespace("default").Get(ctx, "blue", metav1.GetOptions{}); err != nil {
			t.Fatalf("get nad after restart: %v", err)
		}
	})

	t.Run("stop", func(t *testing.T) {
		pids := []int{cp.apiserver.cmd.Process.Pid, cp.etcd.cmd.Process.Pid}
		cp.Stop()
		cp.Stop() // idempotent
		for _, pid := range pids {
			// The processes were reaped, so the pid is gone (barring reuse,
			// which cannot happen this quickly in practice).
			if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
				t.Errorf("pid %d still exists after Stop: kill 0 = %v", pid, err)
			}
		}
		if _, err := os.Stat(cp.Dir); !os.IsNotExist(err) {
			t.Errorf("scratch dir %s still exists after Stop: %v", cp.Dir, err)
		}
	})
}

func TestSumMetric(t *testing.T) {
	text := `# HELP apiserver_request_total Counter of apiserver requests.
# TYPE apiserver_request_total counter
apiserver_request_total{code="200",resource="pods",verb="GET"} 3
apiserver_request_total{code="404",resource="pods",verb="GET"} 2
apiserver_request_total{code="201",resource="pods",verb="POST"} 1
apiserver_request_total_extra{resource="pods",verb="GET"} 100
apiserver_request_total{code="200",resource="a\"b,c}",verb="GET"} 7
apiserver_request_total 5
`
	tests := []struct {
		match map[string]string
		want  float64
	}{
		{map[string]string{"resource": "pods", "verb": "GET"}, 5},
		{map[string]string{"resource": "pods"}, 6},
		{map[string]string{"resource": `a"b,c}`}, 7},
		{nil, 18},
		{map[string]string{"verb": "DELETE"}, 0},
	}
	for _, tt := range tests {
		if got := SumMetric(text, "apiserver_request_total", tt.match); got != tt.want {
			t.Errorf("SumMetric(%v) = %v, want %v", tt.match, got, tt.want)
		}
	}
}

// Samples yields each sample's labels and value, and stops when asked to.
func TestSamples(t *testing.T) {
	text := "m{a=\"1\"} 1\nm 2\nm_other 3\nm{a=\"3\"} 4\n"
	var got []string
	for labels, v := range Samples(text, "m") {
		got = append(got, fmt.Sprintf("%s=%v", labels["a"], v))
		if len(got) == 2 {
			break
		}
	}
	if want := []string{"1=1", "=2"}; !slices.Equal(got, want) {
		t.Errorf("Samples = %v, want %v", got, want)
	}
}
