package e2e

// A DaemonSet on the real node, made the way manifold's own is run: the
// cluster plane's controllers make its pod, the scheduler binds it, and the
// kubelet runs it with its ServiceAccount token mounted.

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/manifold-cni/manifold/e2e/crinode"
)

// serviceAccountDir is where ServiceAccount admission mounts a pod's token,
// and where client-go's in-cluster config reads it.
const serviceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// A DaemonSet on the host network that tolerates every taint, like
// manifold's: its pod is made for the node and bound by kube-scheduler, runs
// with a token the kubelet mounted that authenticates as the pod's
// ServiceAccount, bound to that pod, next to the cluster's CA and the
// namespace; deleting the DaemonSet removes the pod.
func nodeDaemonSet(n *kubeNode) {
	t := n.t
	labels := map[string]string{"app": "agent"}
	grace := int64(1)
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: n.ns},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					HostNetwork:                   true,
					TerminationGracePeriodSeconds: &grace,
					Tolerations:                   []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
					Containers: []corev1.Container{{Name: "agent", Image: crinode.ImageRef,
						ImagePullPolicy: corev1.PullNever, Command: []string{crinode.Pause}}},
				},
			},
		},
	}
	if _, err := n.k8s.AppsV1().DaemonSets(n.ns).Create(n.ctx(), ds, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create DaemonSet: %v", err)
	}
	p := n.daemonPod("app=agent")
	if !slices.ContainsFunc(n.events(p), func(ev corev1.Event) bool {
		return ev.Reason == "Scheduled" && (ev.ReportingController == "default-scheduler" || ev.Source.Component == "default-scheduler")
	}) {
		t.Errorf("pod %s has no Scheduled event from default-scheduler: %v", p.Name, eventMessages(n.events(p)))
	}

	dir := n.mountedServiceAccount(p)
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatalf("the kubelet's ServiceAccount volume: %v", err)
		}
		return string(b)
	}
	ca, err := os.ReadFile(n.cp.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	if read("ca.crt") != string(ca) {
		t.Errorf("mounted ca.crt is not the cluster's CA %s", n.cp.CAFile)
	}
	if got := read("namespace"); got != n.ns {
		t.Errorf("mounted namespace = %q, want %q", got, n.ns)
	}
	review, err := n.k8s.AuthenticationV1().TokenReviews().Create(n.ctx(),
		&authv1.TokenReview{Spec: authv1.TokenReviewSpec{Token: read("token")}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("review the mounted token: %v", err)
	}
	if st := review.Status; !st.Authenticated || st.User.Username != "system:serviceaccount:"+n.ns+":default" ||
		!slices.Equal(st.User.Extra["authentication.kubernetes.io/pod-name"], []string{p.Name}) {
		t.Errorf("mounted token authenticates as %+v (error %q), want the default ServiceAccount bound to pod %s", st.User, st.Error, p.Name)
	}

	if err := n.k8s.AppsV1().DaemonSets(n.ns).Delete(n.ctx(), ds.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete DaemonSet: %v", err)
	}
	n.waitNoPods("app=agent")
	n.waitEmpty()
}

// daemonPod waits for a pod with the label selector to be bound to the node
// and Running, and returns it. (A host-network pod has no status.podIP here:
// the node's address is 127.0.0.1, so waitRunning would wait forever.)
func (n *kubeNode) daemonPod(selector string) *corev1.Pod {
	n.t.Helper()
	var found *corev1.Pod
	n.waitPods(selector, "a pod Running on node "+n.name, func(pods []corev1.Pod) bool {
		for i, p := range pods {
			if p.Spec.NodeName == n.name && p.Status.Phase == corev1.PodRunning {
				found = &pods[i]
			}
		}
		return found != nil
	})
	return found
}

// waitNoPods waits until no pod matches the label selector.
func (n *kubeNode) waitNoPods(selector string) {
	n.t.Helper()
	n.waitPods(selector, "no pods", func(pods []corev1.Pod) bool { return len(pods) == 0 })
}

// waitPods lists the pods of the label selector in the test's namespace until
// done is true of them; after nodeWait it fails the test, saying it wanted
// what, and where the pods were.
func (n *kubeNode) waitPods(selector, what string, done func([]corev1.Pod) bool) {
	n.t.Helper()
	deadline := time.Now().Add(nodeWait)
	for {
		list, err := n.k8s.CoreV1().Pods(n.ns).List(n.ctx(), metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			n.t.Fatal(err)
		}
		if done(list.Items) {
			return
		}
		if time.Now().After(deadline) {
			var phases []string
			for _, p := range list.Items {
				phases = append(phases, fmt.Sprintf("%s on %q: %s", p.Name, p.Spec.NodeName, p.Status.Phase))
			}
			n.t.Fatalf("pods %s: want %s after %s, have %v", selector, what, nodeWait, phases)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// mountedServiceAccount returns the host directory that the pod's container
// has mounted read-only at serviceAccountDir, as containerd reports it.
func (n *kubeNode) mountedServiceAccount(p *corev1.Pod) string {
	n.t.Helper()
	list, err := n.node.CRIClient().Runtime.ListContainers(n.ctx(), &runtimeapi.ListContainersRequest{
		Filter: &runtimeapi.ContainerFilter{LabelSelector: map[string]string{"io.kubernetes.pod.uid": string(p.UID)}}})
	if err != nil || len(list.Containers) != 1 {
		n.t.Fatalf("containers of pod %s: %v (%d found, want 1)", p.Name, err, len(list.GetContainers()))
	}
	st, err := n.node.CRIClient().Runtime.ContainerStatus(n.ctx(), &runtimeapi.ContainerStatusRequest{ContainerId: list.Containers[0].Id})
	if err != nil {
		n.t.Fatalf("status of container %s: %v", list.Containers[0].Id, err)
	}
	var paths []string
	for _, m := range st.Status.Mounts {
		if m.ContainerPath == serviceAccountDir {
			if !m.Readonly {
				n.t.Errorf("%s is mounted writable", serviceAccountDir)
			}
			return m.HostPath
		}
		paths = append(paths, m.ContainerPath)
	}
	n.t.Fatalf("pod %s has nothing mounted at %s (mounts: %s)", p.Name, serviceAccountDir, strings.Join(paths, ", "))
	return ""
}
