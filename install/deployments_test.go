package install

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// manifestObjects decodes every document of deployments/<name> strictly (an
// unknown or misspelt field fails), keyed by kind.
func manifestObjects(t *testing.T, name string) map[string][]any {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "deployments", name))
	if err != nil {
		t.Fatal(err)
	}
	objs := map[string][]any{}
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var obj any
		switch tm.Kind {
		case "":
			continue // comment-only document
		case "ServiceAccount":
			obj = &corev1.ServiceAccount{}
		case "ClusterRole":
			obj = &rbacv1.ClusterRole{}
		case "ClusterRoleBinding":
			obj = &rbacv1.ClusterRoleBinding{}
		case "DaemonSet":
			obj = &appsv1.DaemonSet{}
		default:
			t.Fatalf("%s: unexpected kind %q", name, tm.Kind)
		}
		if err := yaml.UnmarshalStrict(doc, obj); err != nil {
			t.Fatalf("%s: %s: %v", name, tm.Kind, err)
		}
		objs[tm.Kind] = append(objs[tm.Kind], obj)
	}
	return objs
}

// TestClusterRoleIsLeastPrivilege pins the ClusterRole to exactly what the
// plugin's API calls need, so that a broader grant is a deliberate change.
func TestClusterRoleIsLeastPrivilege(t *testing.T) {
	objs := manifestObjects(t, "rbac.yaml")
	if len(objs["ServiceAccount"]) != 1 || len(objs["ClusterRole"]) != 1 || len(objs["ClusterRoleBinding"]) != 1 {
		t.Fatalf("want one ServiceAccount, ClusterRole and ClusterRoleBinding, got %v", objs)
	}
	sa := objs["ServiceAccount"][0].(*corev1.ServiceAccount)
	role := objs["ClusterRole"][0].(*rbacv1.ClusterRole)
	binding := objs["ClusterRoleBinding"][0].(*rbacv1.ClusterRoleBinding)

	// Flatten to group/resource:verb so the order in the file does not matter.
	var got []string
	for _, r := range role.Rules {
		if len(r.ResourceNames) > 0 || len(r.NonResourceURLs) > 0 {
			t.Errorf("unexpected rule %+v", r)
		}
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, v := range r.Verbs {
					got = append(got, g+"/"+res+":"+v)
				}
			}
		}
	}
	slices.Sort(got)
	want := []string{
		"/events:create", "/events:patch",
		"/pods/status:patch", "/pods:get",
		"events.k8s.io/events:create", "events.k8s.io/events:patch",
		"k8s.cni.cncf.io/network-attachment-definitions:get",
	}
	slices.Sort(want)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ClusterRole grants\n %v\nwant exactly\n %v", got, want)
	}

	wantSubject := rbacv1.Subject{Kind: "ServiceAccount", Name: sa.Name, Namespace: sa.Namespace}
	if binding.RoleRef.Kind != "ClusterRole" || binding.RoleRef.Name != role.Name ||
		len(binding.Subjects) != 1 || binding.Subjects[0] != wantSubject {
		t.Errorf("binding %+v does not bind %s to %+v", binding, role.Name, wantSubject)
	}
}

// TestDaemonSet checks the DaemonSet against the installer it runs: its args
// are valid flags, and the paths they name are the volumes it mounts.
func TestDaemonSet(t *testing.T) {
	objs := manifestObjects(t, "daemonset.yaml")
	if len(objs["DaemonSet"]) != 1 {
		t.Fatalf("want one DaemonSet, got %v", objs)
	}
	ds := objs["DaemonSet"][0].(*appsv1.DaemonSet)
	spec := ds.Spec.Template.Spec
	sa := manifestObjects(t, "rbac.yaml")["ServiceAccount"][0].(*corev1.ServiceAccount)

	if !spec.HostNetwork || spec.PriorityClassName != "system-node-critical" || spec.ServiceAccountName != sa.Name || ds.Namespace != sa.Namespace {
		t.Errorf("hostNetwork %v, priorityClassName %q, serviceAccount %s/%s; want true, system-node-critical, %s/%s",
			spec.HostNetwork, spec.PriorityClassName, ds.Namespace, spec.ServiceAccountName, sa.Namespace, sa.Name)
	}
	if !slices.ContainsFunc(spec.Tolerations, func(tl corev1.Toleration) bool {
		return tl.Key == "" && tl.Operator == corev1.TolerationOpExists && tl.Effect == ""
	}) {
		t.Errorf("tolerations %+v do not tolerate every taint", spec.Tolerations)
	}
	if len(spec.InitContainers) != 0 || len(spec.Containers) != 1 {
		t.Fatalf("want a single container and no init containers, got %d and %d", len(spec.Containers), len(spec.InitContainers))
	}
	c := spec.Containers[0]
	if c.Image != "ghcr.io/manifold-cni/manifold:latest" {
		t.Errorf("image %q", c.Image)
	}
	o, err := ParseFlags("daemonset", c.Args)
	if err != nil {
		t.Fatalf("DaemonSet args %q: %v", c.Args, err)
	}

	// With cleanup on exit, an upgrade must start the new installer before the
	// old one stops, or the old one removes the config (see peerLock).
	if ru := ds.Spec.UpdateStrategy.RollingUpdate; o.CleanupConfigOnExit &&
		(ru == nil || ru.MaxSurge == nil || ru.MaxSurge.IntValue() < 1 || ru.MaxUnavailable == nil || ru.MaxUnavailable.IntValue() != 0) {
		t.Errorf("rolling update %+v: want maxSurge 1 and maxUnavailable 0 with --cleanup-config-on-exit", ru)
	}

	volumes := map[string]corev1.Volume{}
	for _, v := range spec.Volumes {
		volumes[v.Name] = v
	}
	mountOf := func(path string) (corev1.VolumeMount, corev1.Volume) {
		for _, m := range c.VolumeMounts {
			if m.MountPath == path {
				return m, volumes[m.Name]
			}
		}
		t.Fatalf("nothing is mounted at %s", path)
		return corev1.VolumeMount{}, corev1.Volume{}
	}
	for mounted, host := range map[string]string{o.CNIBinDir: o.HostCNIBinDir, o.CNIConfDir: o.HostCNIConfDir} {
		if m, v := mountOf(mounted); v.HostPath == nil || v.HostPath.Path != host || m.ReadOnly {
			t.Errorf("%s: want a writable mount of host path %s, got %+v", mounted, host, v)
		}
	}

	if filepath.Dir(o.TokenFile) != filepath.Dir(o.CAFile) {
		t.Fatalf("token %s and CA %s are expected in one projected volume", o.TokenFile, o.CAFile)
	}
	_, v := mountOf(filepath.Dir(o.TokenFile))
	if v.Projected == nil {
		t.Fatalf("credentials volume %+v is not projected", v)
	}
	var token, ca bool
	for _, s := range v.Projected.Sources {
		if st := s.ServiceAccountToken; st != nil {
			token = st.Path == filepath.Base(o.TokenFile) && st.ExpirationSeconds != nil && *st.ExpirationSeconds == 3600
		}
		if cm := s.ConfigMap; cm != nil {
			ca = cm.Name == "kube-root-ca.crt" && len(cm.Items) == 1 &&
				cm.Items[0].Key == "ca.crt" && cm.Items[0].Path == filepath.Base(o.CAFile)
		}
	}
	if !token || !ca {
		t.Errorf("projected sources %+v: want a 3600s token at %s and kube-root-ca.crt at %s", v.Projected.Sources, o.TokenFile, o.CAFile)
	}
	if !strings.Contains(strings.Join(c.Command, " "), "manifold-install") {
		t.Errorf("command %q does not run the installer", c.Command)
	}
}

// TestDockerfileBuildsBothBinaries guards the paths the DaemonSet relies on.
func TestDockerfileBuildsBothBinaries(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "deployments", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	s := string(data)
	for _, want := range []string{"./cmd/manifold ", "./cmd/manifold-install", "CGO_ENABLED=0", "distroless/static", "/usr/local/bin/"} {
		if !strings.Contains(s, want) {
			t.Errorf("Dockerfile lacks %q", want)
		}
	}
	if DefaultOptions().Binary != "/usr/local/bin/manifold" {
		t.Errorf("default --binary %q is not where the Dockerfile puts it", DefaultOptions().Binary)
	}
}
