package controlplane

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
)

// TestControllers drives a control plane with kube-scheduler and
// kube-controller-manager: what they make, what ServiceAccount admission
// adds, a Deployment's pod bound to a node, and kubectl. The checks share
// one control plane, as starting one costs seconds.
func TestControllers(t *testing.T) {
	cp := StartForTest(t, Options{Controllers: true})
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	cs := cp.Clientset()
	const ns = "e2e-controllers"
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace: %v", err)
	}

	t.Run("a new namespace gets its ServiceAccount and root CA", func(t *testing.T) {
		if err := cp.WaitNamespaceReady(ctx, ns); err != nil {
			t.Fatal(err)
		}
		cm, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, RootCAConfigMap, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ca, err := os.ReadFile(cp.CAFile)
		if err != nil {
			t.Fatal(err)
		}
		if cm.Data["ca.crt"] != string(ca) {
			t.Errorf("%s holds %q, want the CA of %s", RootCAConfigMap, cm.Data["ca.crt"], cp.CAFile)
		}
	})

	t.Run("ServiceAccount admission", func(t *testing.T) {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "with-token", Namespace: ns},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "example.invalid/c:1"}}},
		}
		got, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create pod: %v", err)
		}
		defer cs.CoreV1().Pods(ns).Delete(context.Background(), pod.Name, metav1.DeleteOptions{})
		checkTokenVolume(t, got)

		// The plugin is on: a pod naming a ServiceAccount that does not
		// exist is refused (with the plugin off it would be stored).
		pod = pod.DeepCopy()
		pod.Name, pod.Spec.ServiceAccountName = "no-account", "nobody"
		_, err = cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
		if err == nil || !strings.Contains(err.Error(), `serviceaccount "nobody" not found`) {
			t.Errorf("create pod with ServiceAccount nobody: err = %v, want it refused as not found", err)
		}
	})

	t.Run("the scheduler binds a Deployment's pod", func(t *testing.T) {
		const node = "e2e-worker"
		readyNode(t, ctx, cp, node)
		deployWeb(t, ctx, cp, ns)
		var bound *corev1.Pod
		for bound == nil {
			pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
			if err != nil {
				t.Fatal(err)
			}
			for i, p := range pods.Items {
				if p.Spec.NodeName != "" {
					bound = &pods.Items[i]
				}
			}
			if bound == nil {
				select {
				case <-ctx.Done():
					t.Fatalf("no pod of Deployment web was bound (pods: %d)\n%s", len(pods.Items), cp.LogTails())
				case <-time.After(200 * time.Millisecond):
				}
			}
		}
		if bound.Spec.NodeName != node {
			t.Errorf("pod %s bound to %q, want %q", bound.Name, bound.Spec.NodeName, node)
		}
		if owners := bound.OwnerReferences; len(owners) != 1 || owners[0].Kind != "ReplicaSet" {
			t.Errorf("pod %s owners = %v, want its ReplicaSet", bound.Name, owners)
		}
		events, err := cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + bound.Name})
		if err != nil {
			t.Fatal(err)
		}
		scheduled := false
		for _, e := range events.Items {
			byScheduler := e.ReportingController == "default-scheduler" || e.Source.Component == "default-scheduler"
			scheduled = scheduled || (e.Reason == "Scheduled" && byScheduler)
		}
		if !scheduled {
			t.Errorf("pod %s has no Scheduled event from default-scheduler: %v", bound.Name, events.Items)
		}
	})

	t.Run("kubectl", func(t *testing.T) {
		settings := `apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
  namespace: ` + ns + `
data:
  mode: thin
`
		manifest := filepath.Join(t.TempDir(), "settings.yaml")
		if err := os.WriteFile(manifest, []byte(settings), 0o644); err != nil {
			t.Fatal(err)
		}
		// From a file, then the same from stdin.
		for _, c := range []struct{ stdin, file, want string }{
			{"", manifest, "configmap/settings created"},
			{settings, "-", "configmap/settings unchanged"},
		} {
			out, err := cp.Kubectl(ctx, c.stdin, "apply", "-f", c.file)
			if err != nil || strings.TrimSpace(out) != c.want {
				t.Errorf("kubectl apply -f %s = %q, %v; want %q", c.file, out, err, c.want)
			}
		}
		if out, err := cp.Kubectl(ctx, "", "get", "configmap", "settings", "-n", ns, "-o", "jsonpath={.data.mode}"); err != nil || out != "thin" {
			t.Errorf("kubectl get configmap = %q, %v; want thin", out, err)
		}
		if out, err := cp.Kubectl(ctx, "", "get", "pods", "-n", ns, "-l", "app=web", "-o", "jsonpath={.items[*].spec.nodeName}"); err != nil || out != "e2e-worker" {
			t.Errorf("kubectl get pods = %q, %v; want the node e2e-worker", out, err)
		}
		_, err := cp.Kubectl(ctx, "", "get", "configmap", "nowhere", "-n", ns)
		if err == nil || !strings.Contains(err.Error(), `configmaps "nowhere" not found`) {
			t.Errorf("kubectl get of a missing object: err = %v, want kubectl's not-found message", err)
		}
	})

	t.Run("stop", func(t *testing.T) {
		cp.mu.Lock()
		procs := []*process{cp.scheduler, cp.controllerManager, cp.apiserver, cp.etcd}
		cp.mu.Unlock()
		var pids []int
		for i, p := range procs {
			if p == nil {
				t.Fatalf("server %d of 4 was never started", i+1)
			}
			pids = append(pids, p.cmd.Process.Pid)
		}
		cp.Stop()
		for _, pid := range pids {
			if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
				t.Errorf("pid %d still exists after Stop: kill 0 = %v", pid, err)
			}
		}
	})
}

// checkTokenVolume checks that ServiceAccount admission gave the pod the
// "default" ServiceAccount and a projected volume with its token, the root
// CA and its namespace, mounted read-only where client-go looks for them.
func checkTokenVolume(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	if pod.Spec.ServiceAccountName != "default" {
		t.Errorf("serviceAccountName = %q, want default", pod.Spec.ServiceAccountName)
	}
	var volume *corev1.Volume
	for i, v := range pod.Spec.Volumes {
		if strings.HasPrefix(v.Name, "kube-api-access-") && v.Projected != nil {
			volume = &pod.Spec.Volumes[i]
		}
	}
	if volume == nil {
		t.Fatalf("no kube-api-access projected volume in %+v", pod.Spec.Volumes)
	}
	var token, rootCA, namespace bool
	for _, src := range volume.Projected.Sources {
		token = token || (src.ServiceAccountToken != nil && src.ServiceAccountToken.Path == "token")
		rootCA = rootCA || (src.ConfigMap != nil && src.ConfigMap.Name == RootCAConfigMap)
		namespace = namespace || src.DownwardAPI != nil
	}
	if !token || !rootCA || !namespace {
		t.Errorf("projected sources %+v: token %v, %s %v, namespace %v; want all", volume.Projected.Sources, token, RootCAConfigMap, rootCA, namespace)
	}
	mounted := false
	for _, m := range pod.Spec.Containers[0].VolumeMounts {
		mounted = mounted || (m.Name == volume.Name && m.MountPath == "/var/run/secrets/kubernetes.io/serviceaccount" && m.ReadOnly)
	}
	if !mounted {
		t.Errorf("volume %s is not mounted read-only at the ServiceAccount path: %+v", volume.Name, pod.Spec.Containers[0].VolumeMounts)
	}
}

// readyNode registers a Node as a kubelet would, with room for pods and a
// Ready condition, so that the scheduler may bind pods to it. Nothing runs
// them.
func readyNode(t *testing.T, ctx context.Context, cp *ControlPlane, name string) {
	t.Helper()
	nodes := cp.Clientset().CoreV1().Nodes()
	if _, err := nodes.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create node: %v", err)
	}
	room := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("4"),
		corev1.ResourceMemory: resource.MustParse("8Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	// The controllers annotate a new node too; retry on their conflicts.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node, err := nodes.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		node.Status.Capacity, node.Status.Allocatable = room, room
		now := metav1.Now()
		node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue,
			Reason: "KubeletReady", LastHeartbeatTime: now, LastTransitionTime: now}}
		_, err = nodes.UpdateStatus(ctx, node, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("update node status: %v", err)
	}
}

// deployWeb creates a one-replica Deployment whose pod tolerates every taint,
// so that only the scheduler's binding decides where it goes.
func deployWeb(t *testing.T, ctx context.Context, cp *ControlPlane, ns string) {
	t.Helper()
	one := int32(1)
	labels := map[string]string{"app": "web"}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: &one,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
					Containers:  []corev1.Container{{Name: "web", Image: "example.invalid/web:1"}},
				},
			},
		},
	}
	if _, err := cp.Clientset().AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create deployment: %v", err)
	}
}
