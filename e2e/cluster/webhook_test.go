package cluster_test

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/manifold-cni/manifold/e2e/cluster"
)

// TestWebhook installs the validating admission webhook as
// docs/validation.md says, from deployments/webhook.yaml with manifold's
// image (only the image set), next to thin-mode manifold as an admin runs
// them: its two replicas run on the node, publish their caBundle, and the API
// server calls them through their Service. kubectl apply of a bad NAD, pod or
// Deployment is refused with a message that names the object, the field and
// the rule; good ones pass, and the good pod runs with its networks. With the
// webhook scaled to zero, the same bad NAD is admitted (failurePolicy
// Ignore) and pods still run. Deleting the manifest leaves nothing of it.
func TestWebhook(t *testing.T) {
	e := newTenv(t)
	e.install(cluster.Thin, imageV1)
	ctx := e.ctx()
	start := time.Now()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the webhook's logs:\n%s", e.logs.WebhookLogs(4000))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		if err := e.c.UninstallWebhook(ctx); err != nil {
			t.Logf("clean-up: %v", err)
		}
	})
	ictx, cancel := context.WithTimeout(ctx, 6*time.Minute)
	defer cancel()
	if err := e.c.InstallWebhook(ictx, imageV1, e.ns); err != nil {
		t.Fatal(err)
	}
	t.Logf("webhook installed with kubectl and serving in %s", time.Since(start).Round(time.Millisecond))
	dep, err := e.c.Clientset().AppsV1().Deployments("kube-system").Get(ctx, cluster.WebhookName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if dep.Status.ReadyReplicas != 2 {
		t.Errorf("the webhook has %d ready replicas, want 2", dep.Status.ReadyReplicas)
	}
	if lens, err := e.c.WebhookCABundles(ctx); err != nil || len(lens) != 2 || containsZero(lens) {
		t.Errorf("the webhook configuration's caBundles are %v long (%v), want two, none empty", lens, err)
	}

	// Refused at kubectl apply, with the object, the field and the rule.
	e.wantApplyRefused("a NAD that nests a meta-plugin", badNAD(e.ns),
		"nads.manifold-cni.github.io", "manifold refuses NetworkAttachmentDefinition "+e.ns+"/nested: the ADD of every pod that asks for network "+e.ns+"/nested would fail with CNI code 7",
		"spec.config", `network `+e.ns+`/nested: plugin 0 type "multus" is a meta-plugin`)
	e.wantApplyRefused("a pod that asks for one interface name twice", testPod(e.ns, "bad-pod", "blue@data, green@data"),
		"workloads.manifold-cni.github.io", "manifold refuses Pod "+e.ns+"/bad-pod: its ADD would fail with CNI code 7", "metadata.annotations[k8s.v1.cni.cncf.io/networks]",
		"pod "+e.ns+"/bad-pod: network "+e.ns+`/green: interface name "data" is already taken by network `+e.ns+"/blue")
	e.wantApplyRefused("a Deployment whose pods name two default networks", testDeployment(e.ns, "bad-deploy", "v1.multus-cni.io/default-network", "a, b"),
		"workloads.manifold-cni.github.io", "manifold refuses Deployment "+e.ns+"/bad-deploy: the ADD of each of its pods would fail with CNI code 7",
		"spec.template.metadata.annotations[v1.multus-cni.io/default-network]", "it must name exactly one")

	// Good ones pass, and the good pod runs with its networks.
	e.wantApplied(goodNAD(e.ns, "red"))
	e.wantApplied(testDeployment(e.ns, "good-deploy", cluster.NetworksAnnotation, podNetworks))
	e.wantApplied(testPod(e.ns, "good-pod", podNetworks))
	e.wantPodNetworks("good-pod")

	// Fail-open: with no replica left, the bad NAD is admitted and pods
	// still run.
	if out, err := e.c.Kubectl(ctx, "", "-n", "kube-system", "scale", "deployment/"+cluster.WebhookName, "--replicas=0"); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	e.waitNoWebhookPods()
	e.wantApplied(badNAD(e.ns))
	e.wantApplied(testPod(e.ns, "pod-while-down", podNetworks))
	e.wantPodNetworks("pod-while-down")

	// Uninstalled, nothing of it is left.
	if err := e.c.UninstallWebhook(ctx); err != nil {
		t.Fatal(err)
	}
	left, err := e.c.WebhookLeftovers(ctx)
	if err != nil || len(left) > 0 {
		t.Errorf("after kubectl delete -f deployments/%s, the cluster still holds %v (%v)", cluster.WebhookFile, left, err)
	}
	if vwcs, err := e.c.Clientset().AdmissionregistrationV1().ValidatingWebhookConfigurations().List(ctx, metav1.ListOptions{}); err != nil || len(vwcs.Items) > 0 {
		t.Errorf("webhook configurations left: %d (%v)", len(vwcs.Items), err)
	}
}

func badNAD(ns string) string {
	return `apiVersion: k8s.cni.cncf.io/v1
kind: NetworkAttachmentDefinition
metadata: {name: nested, namespace: ` + ns + `}
spec:
  config: '{"cniVersion": "1.0.0", "type": "multus", "kubeconfig": "/etc/kubernetes/admin.conf"}'
`
}

func goodNAD(ns, name string) string {
	return `apiVersion: k8s.cni.cncf.io/v1
kind: NetworkAttachmentDefinition
metadata: {name: ` + name + `, namespace: ` + ns + `}
spec:
  config: '{"cniVersion": "1.0.0", "type": "bridge", "bridge": "` + blueBridge + `", "ipam": {"type": "host-local", "subnet": "10.245.1.0/24"}}'
`
}

// testPod is a pod as a user writes it for this node: the node's image,
// never pulled, asking for networks.
func testPod(ns, name, networks string) string {
	return `apiVersion: v1
kind: Pod
metadata:
  name: ` + name + `
  namespace: ` + ns + `
  annotations:
    ` + cluster.NetworksAnnotation + `: '` + networks + `'
spec:
  terminationGracePeriodSeconds: 1
  dnsPolicy: Default
  containers:
    - {name: app, image: "` + podImage() + `", imagePullPolicy: Never, command: ["` + podCommand() + `"]}
`
}

// testDeployment is a Deployment of no replicas (its admission is what
// counts) whose pod template has the annotation.
func testDeployment(ns, name, annotation, value string) string {
	return `apiVersion: apps/v1
kind: Deployment
metadata: {name: ` + name + `, namespace: ` + ns + `}
spec:
  replicas: 0
  selector: {matchLabels: {app: ` + name + `}}
  template:
    metadata:
      labels: {app: ` + name + `}
      annotations: {` + annotation + `: '` + value + `'}
    spec:
      containers:
        - {name: app, image: "` + podImage() + `", imagePullPolicy: Never, command: ["` + podCommand() + `"]}
`
}

func podImage() string   { return cluster.PodSpec("", "", nil).Spec.Containers[0].Image }
func podCommand() string { return cluster.PodSpec("", "", nil).Spec.Containers[0].Command[0] }

// wantApplyRefused applies manifest with kubectl and wants it refused, with
// every one of subs in kubectl's standard error.
func (e *tenv) wantApplyRefused(what, manifest string, subs ...string) {
	e.t.Helper()
	out, err := e.c.Kubectl(e.ctx(), manifest, "apply", "-f", "-")
	if err == nil {
		e.t.Errorf("kubectl apply of %s succeeded: %s", what, out)
		return
	}
	e.t.Logf("kubectl apply of %s: %v", what, err)
	for _, s := range append([]string{"denied the request"}, subs...) {
		if !strings.Contains(err.Error(), s) {
			e.t.Errorf("kubectl apply of %s: the refusal does not say %q", what, s)
		}
	}
}

func (e *tenv) wantApplied(manifest string) {
	e.t.Helper()
	if out, err := e.c.Kubectl(e.ctx(), manifest, "apply", "-f", "-"); err != nil {
		e.t.Errorf("kubectl apply: %v\n%s", err, manifest)
	} else {
		e.t.Logf("kubectl apply: %s", strings.TrimSpace(out))
	}
}

// wantPodNetworks waits for the pod to run, with every network it asked
// for.
func (e *tenv) wantPodNetworks(name string) {
	e.t.Helper()
	p, err := e.c.Clientset().CoreV1().Pods(e.ns).Get(e.ctx(), name, metav1.GetOptions{})
	if err != nil {
		e.t.Errorf("pod %s: %v", name, err)
		return
	}
	running, err := e.c.WaitRunning(e.ctx(), p, podWait)
	if err != nil {
		e.t.Errorf("%v\n%s", err, e.manifoldLog(name))
		return
	}
	if err := e.checkNetworks(running); err != nil {
		e.t.Error(err)
	}
}

// waitNoWebhookPods waits until the webhook has no pod left.
func (e *tenv) waitNoWebhookPods() {
	e.t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		list, err := e.c.Clientset().CoreV1().Pods("kube-system").List(e.ctx(), metav1.ListOptions{LabelSelector: cluster.WebhookSelector})
		if err == nil && len(list.Items) == 0 {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("the webhook's pods are still there 2m after it was scaled to 0 (%v)", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func containsZero(l []int) bool {
	for _, n := range l {
		if n == 0 {
			return true
		}
	}
	return false
}
