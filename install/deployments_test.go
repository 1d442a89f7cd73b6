package install

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"maps"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/manifold-cni/manifold/netconf"
	"github.com/manifold-cni/manifold/shimproto"
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
		case "Role":
			obj = &rbacv1.Role{}
		case "RoleBinding":
			obj = &rbacv1.RoleBinding{}
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
		"/pods/status:patch", "/pods:get", "/pods:list", "/pods:watch",
		"events.k8s.io/events:create", "events.k8s.io/events:patch",
		"k8s.cni.cncf.io/network-attachment-definitions:get",
		"resource.k8s.io/resourceclaims:get", "resource.k8s.io/resourceslices:list",
		"resource.k8s.io/resourceclaims/status:patch", "resource.k8s.io/resourceclaims/driver:associated-node:patch",
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

	// The installer's Role, in its namespace: get on the two DaemonSets, a
	// token for its ServiceAccount, and get on Multus's daemon ConfigMap,
	// which must be in that namespace too.
	if len(objs["Role"]) != 1 || len(objs["RoleBinding"]) != 1 {
		t.Fatalf("want one Role and one RoleBinding, got %v", objs)
	}
	ir := objs["Role"][0].(*rbacv1.Role)
	irb := objs["RoleBinding"][0].(*rbacv1.RoleBinding)
	wantRules := []rbacv1.PolicyRule{
		{APIGroups: []string{"apps"}, Resources: []string{"daemonsets"}, ResourceNames: []string{"manifold", "manifold-thick"}, Verbs: []string{"get"}},
		{APIGroups: []string{""}, Resources: []string{"serviceaccounts/token"}, ResourceNames: []string{sa.Name}, Verbs: []string{"create"}},
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{multusDaemonName(t)}, Verbs: []string{"get"}},
	}
	if ir.Namespace != sa.Namespace || !reflect.DeepEqual(ir.Rules, wantRules) {
		t.Errorf("Role %s/%s grants %+v, want only %+v in %s", ir.Namespace, ir.Name, ir.Rules, wantRules, sa.Namespace)
	}
	for _, f := range []string{"daemonset.yaml", "daemonset-thick.yaml"} {
		ds := manifestObjects(t, f)["DaemonSet"][0].(*appsv1.DaemonSet)
		if !slices.Contains(wantRules[0].ResourceNames, ds.Name) || ds.Namespace != ir.Namespace {
			t.Errorf("%s: DaemonSet %s/%s is not one the installer may read", f, ds.Namespace, ds.Name)
		}
		// ... and the installer knows its pod, to find that DaemonSet.
		got := map[string]string{}
		for _, c := range ds.Spec.Template.Spec.Containers {
			for _, e := range c.Env {
				if c.Name == "install" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
					got[e.Name] = e.ValueFrom.FieldRef.FieldPath
				}
			}
		}
		if got[envPodName] != "metadata.name" || got[envPodNamespace] != "metadata.namespace" || got[envNodeName] != "spec.nodeName" {
			t.Errorf("%s: the install container's downward-API variables are %v, want %s, %s and %s", f, got, envPodName, envPodNamespace, envNodeName)
		}
	}
	if irb.Namespace != ir.Namespace || irb.RoleRef.Kind != "Role" || irb.RoleRef.Name != ir.Name ||
		len(irb.Subjects) != 1 || irb.Subjects[0] != wantSubject {
		t.Errorf("RoleBinding %+v does not bind %s to %+v", irb, ir.Name, wantSubject)
	}
}

// TestDaemonSet checks the DaemonSet against the installer it runs: its args
// are valid flags, and the paths they name are the volumes it mounts.
func TestDaemonSet(t *testing.T) {
	ds := daemonSet(t, "daemonset.yaml", "manifold")
	spec := ds.Spec.Template.Spec
	if len(spec.InitContainers) != 0 || len(spec.Containers) != 1 {
		t.Fatalf("want a single container and no init containers, got %d and %d", len(spec.Containers), len(spec.InitContainers))
	}
	o := checkInstaller(t, ds, spec.Containers[0], "manifold-x7k2p")
	if o.thick() || o.ShimBinary != "" {
		t.Errorf("daemonset.yaml sets up thick mode (socket %q, shim %q); that is daemonset-thick.yaml's job", o.DaemonSocket, o.ShimBinary)
	}
}

// TestDaemonSetThick checks daemonset-thick.yaml: its installer sets up thick
// mode with the shim and its fallback, and its daemon container listens where
// the config sends the shim, runs the delegates in the host's root, and sees
// every host path of the config at the same path, as manifold expects.
func TestDaemonSetThick(t *testing.T) {
	ds := daemonSet(t, "daemonset-thick.yaml", "manifold-thick")
	spec := ds.Spec.Template.Spec
	if len(spec.InitContainers) != 0 || len(spec.Containers) != 2 {
		t.Fatalf("want the installer and the daemon and no init containers, got %d and %d", len(spec.Containers), len(spec.InitContainers))
	}
	containers := map[string]corev1.Container{}
	for _, c := range spec.Containers {
		containers[c.Name] = c
	}
	in, daemon := containers["install"], containers["daemon"]
	if in.Name == "" || daemon.Name == "" {
		t.Fatalf("want containers install and daemon, got %v", slices.Collect(maps.Keys(containers)))
	}
	const pod = "manifold-thick-x7k2p"
	o := checkInstaller(t, ds, in, pod)
	if !o.thick() {
		t.Fatalf("installer args %q do not set up thick mode", in.Args)
	}
	// The shim falls back to the manifold binary next to it.
	if o.ShimBinary != DefaultShimBinary || o.Binary == "" {
		t.Errorf("installer copies shim %q and manifold %q; want the image's shim %s and manifold", o.ShimBinary, o.Binary, DefaultShimBinary)
	}

	if !spec.HostPID {
		t.Error("hostPID is off: the daemon cannot open a netns named /proc/<pid>/ns/net")
	}
	if daemon.Image != in.Image {
		t.Errorf("daemon image %q, installer image %q; want one image", daemon.Image, in.Image)
	}
	if sc := daemon.SecurityContext; sc == nil || sc.Privileged == nil || !*sc.Privileged {
		t.Errorf("daemon security context %+v is not privileged", sc)
	}
	for _, c := range []corev1.Container{in, daemon} {
		r := c.Resources
		if r.Requests.Cpu().IsZero() || r.Requests.Memory().IsZero() || r.Limits.Memory().IsZero() {
			t.Errorf("container %s: resources %+v; want CPU and memory requests and a memory limit", c.Name, r)
		}
	}

	// The daemon is `manifold daemon --socket S --host-root R` and its node
	// paths, S being the config's socket. The node paths' flags and their
	// defaults are the daemon's own (netconf.NodePaths.RegisterFlags).
	var node *netconf.NodePaths
	var metricsAddr, multusSocket string
	daemonFlags := func(pod string) (socket, hostRoot string) {
		cmd := expandArgs(t, daemon, pod)
		if len(cmd) < 2 || cmd[0] != DefaultOptions().Binary || cmd[1] != "daemon" {
			t.Fatalf("daemon command %q, want %s daemon", cmd, DefaultOptions().Binary)
		}
		fs := flag.NewFlagSet("manifold daemon", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		fs.StringVar(&socket, "socket", shimproto.DefaultSocket, "")
		fs.StringVar(&hostRoot, "host-root", "", "")
		fs.Int("max-calls", 128, "")
		fs.Duration("shutdown-timeout", 20*time.Second, "")
		fs.StringVar(&metricsAddr, "metrics-address", "", "")
		fs.StringVar(&multusSocket, "multus-socket", "auto", "")
		fs.String("multus-socket-file", "/etc/cni/net.d/manifold.d/"+MultusSocketFileName, "")
		fs.String("hotplug", "builtin", "")
		node = &netconf.NodePaths{}
		node.RegisterFlags(fs)
		if err := fs.Parse(cmd[2:]); err != nil || fs.NArg() > 0 {
			t.Fatalf("daemon args %q: %v (stray: %q)", cmd[2:], err, fs.Args())
		}
		return socket, hostRoot
	}
	socket, hostRoot := daemonFlags(pod)
	if socket != o.DaemonSocket {
		t.Errorf("the daemon listens on %s, the config sends the shim to %s", socket, o.DaemonSocket)
	}
	// The liveness probe is the kubelet's GET of /livez on the daemon's
	// metrics address, on loopback (it is unauthenticated), which makes the
	// probe's VERSION call through the socket from inside the daemon. An exec
	// probe started a process in the container each time, and under a pod
	// storm runc's exec alone passed the timeout and the daemon was restarted.
	host, port, err := net.SplitHostPort(metricsAddr)
	if err != nil || !net.ParseIP(host).IsLoopback() {
		t.Errorf("the daemon's --metrics-address %q, want a loopback host:port", metricsAddr)
	}
	if p := daemon.LivenessProbe; p == nil || p.HTTPGet == nil {
		t.Error("the daemon has no HTTP liveness probe")
	} else if g := p.HTTPGet; g.Path != "/livez" || g.Host != host || g.Port.String() != port || p.TimeoutSeconds < 6 || p.FailureThreshold < 3 {
		t.Errorf("liveness probe GET %s:%s%s (timeout %ds, %d failures), want GET %s/livez with a timeout of at least 6s (the check's own is 5s) and 3 failures",
			g.Host, g.Port.String(), g.Path, p.TimeoutSeconds, p.FailureThreshold, metricsAddr)
	}
	// In a rollout with surge the new pod's daemon waits on the old one's
	// socket until the old one has stopped, and the config that the old
	// installer wrote stays right for the new daemon: one socket for every
	// pod, in both containers.
	const other = "manifold-thick-q9z4m"
	if o2 := checkInstaller(t, ds, in, other); o2.DaemonSocket != o.DaemonSocket {
		t.Errorf("the installer's --daemon-socket is %s in pod %s and %s in pod %s; want one fixed socket", o.DaemonSocket, pod, o2.DaemonSocket, other)
	}
	if s2, _ := daemonFlags(other); s2 != socket {
		t.Errorf("the daemon's --socket is %s in pod %s and %s in pod %s; want one fixed socket", socket, pod, s2, other)
	}

	volumes := map[string]corev1.Volume{}
	for _, v := range spec.Volumes {
		volumes[v.Name] = v
	}
	// The delegates run chrooted into the host's /, which the daemon mounts
	// writable (leases, locks) and with the netns mounts that the runtime
	// makes after the daemon started.
	if hostRoot == "" || !filepath.IsAbs(hostRoot) {
		t.Errorf("daemon --host-root %q; want the absolute path where the host's / is mounted", hostRoot)
	} else if m, ok := mountFor(daemon, hostRoot); !ok || m.MountPath != filepath.Clean(hostRoot) {
		t.Errorf("daemon --host-root %s: no volume is mounted there (nearest mount %+v)", hostRoot, m)
	} else if v := volumes[m.Name]; v.HostPath == nil || v.HostPath.Path != "/" {
		t.Errorf("daemon --host-root %s: mounted from %+v; want the host's /", hostRoot, v.VolumeSource)
	} else if m.MountPropagation == nil || *m.MountPropagation != corev1.MountPropagationHostToContainer {
		t.Errorf("daemon --host-root %s: mounted with propagation %s; want HostToContainer", hostRoot, propagation(m))
	} else if m.ReadOnly {
		t.Errorf("daemon --host-root %s: mounted read-only, but delegates write leases and locks there", hostRoot)
	}

	// Multus's daemon API on a node taken over from a thick Multus: the
	// socket the installer names (Multus's default one) is in the host's
	// /run/multus, which the daemon mounts where the host has it, and the
	// installer's file is in the conf dir's manifold.d, which it mounts too.
	if multusSocket == "auto" {
		if m, ok := mountFor(daemon, "/run/multus"); !ok || m.MountPath != "/run/multus" {
			t.Errorf("daemon --multus-socket=auto: /run/multus is not mounted (nearest mount %+v)", m)
		} else if v := volumes[m.Name]; v.HostPath == nil || v.HostPath.Path != "/run/multus" || m.ReadOnly {
			t.Errorf("daemon's /run/multus is mounted from %+v; want the host's /run/multus, writable", v.VolumeSource)
		}
		if m, ok := mountFor(daemon, "/etc/cni/net.d/manifold.d/"+MultusSocketFileName); !ok || volumes[m.Name].HostPath == nil {
			t.Errorf("daemon --multus-socket=auto: the installer's file is not on a host path in the daemon (nearest mount %+v)", m)
		}
	}

	// Every host path in the config that manifold itself reads or writes in
	// the daemon, outside the delegates' chroot, at the same path.
	data, err := GenerateConfig(&Primary{Name: "10-calico.conflist", CNIVersion: "1.0.0"}, o)
	if err != nil {
		t.Fatal(err)
	}
	_, plugin, err := decodeConflist(data)
	if err != nil {
		t.Fatal(err)
	}
	plugin["cniVersion"], plugin["name"] = "1.0.0", DefaultNetworkName
	stdin, err := json.Marshal(plugin)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := netconf.ParseConfig(stdin)
	if err != nil {
		t.Fatal(err)
	}
	// The daemon refuses a config whose node paths differ from its flags:
	// its own check, on the config the installer writes, and the daemon's
	// flags as the installer describes them.
	if err := node.Apply(stdin, cfg); err != nil {
		t.Errorf("the daemon would refuse every call of the installer's config: %v", err)
	}
	if got, want := *node, *o.daemonPaths(); got != want {
		t.Errorf("the daemon runs with node paths %+v, the installer writes its config for %+v", got, want)
	}
	paths := []struct {
		key, path string
		write     bool
	}{
		{"binDir", cfg.BinDir, false},
		{"cniDir", cfg.CNIDir, true},
		{"confDir", cfg.ConfDir, false},
		{"clusterNetwork", cfg.ClusterNetwork, false},
		{"kubeconfig", cfg.Kubeconfig, false},
		{"daemonSocket", filepath.Dir(o.DaemonSocket), true},
		{"logFile", cfg.LogFile, true},
		{"readinessindicatorfile", cfg.ReadinessIndicatorFile, false},
		{"the netns dir", "/var/run/netns", false},
	}
	for _, p := range paths {
		if p.path == "" {
			continue // not set: nothing to mount
		}
		m, ok := mountFor(daemon, p.path)
		v := volumes[m.Name]
		switch {
		case !ok:
			t.Errorf("%s %s: the daemon does not mount it", p.key, p.path)
		case v.HostPath == nil || v.HostPath.Path != m.MountPath:
			t.Errorf("%s %s: mounted at %s from %+v; want the host's %s at the same path", p.key, p.path, m.MountPath, v.VolumeSource, m.MountPath)
		case p.write && m.ReadOnly:
			t.Errorf("%s %s: mounted read-only at %s, but the daemon writes there", p.key, p.path, m.MountPath)
		}
	}
	// The runtime mounts each pod's netns after the daemon has started.
	if m, _ := mountFor(daemon, "/var/run/netns"); m.MountPropagation == nil || *m.MountPropagation != corev1.MountPropagationHostToContainer {
		t.Errorf("/var/run/netns is mounted with propagation %v; want HostToContainer", m.MountPropagation)
	}
}

// daemonSet reads the single DaemonSet of deployments/<file>, named name, and
// checks what every manifold DaemonSet needs on its nodes.
func daemonSet(t *testing.T, file, name string) *appsv1.DaemonSet {
	t.Helper()
	objs := manifestObjects(t, file)
	if len(objs["DaemonSet"]) != 1 || len(objs) != 1 {
		t.Fatalf("want one DaemonSet and nothing else in %s, got %v", file, objs)
	}
	ds := objs["DaemonSet"][0].(*appsv1.DaemonSet)
	spec := ds.Spec.Template.Spec
	sa := manifestObjects(t, "rbac.yaml")["ServiceAccount"][0].(*corev1.ServiceAccount)
	if ds.Name != name {
		t.Errorf("%s: DaemonSet %q, want %q", file, ds.Name, name)
	}
	if !spec.HostNetwork || spec.PriorityClassName != "system-node-critical" || spec.ServiceAccountName != sa.Name || ds.Namespace != sa.Namespace {
		t.Errorf("hostNetwork %v, priorityClassName %q, serviceAccount %s/%s; want true, system-node-critical, %s/%s",
			spec.HostNetwork, spec.PriorityClassName, ds.Namespace, spec.ServiceAccountName, sa.Namespace, sa.Name)
	}
	if !slices.ContainsFunc(spec.Tolerations, func(tl corev1.Toleration) bool {
		return tl.Key == "" && tl.Operator == corev1.TolerationOpExists && tl.Effect == ""
	}) {
		t.Errorf("tolerations %+v do not tolerate every taint", spec.Tolerations)
	}
	return ds
}

// checkInstaller checks the installer container c of ds as it runs in the pod
// named pod: its args are valid flags, the paths they name are the volumes it
// mounts, and the rollout fits --cleanup-config-on-exit. It returns the
// parsed flags.
func checkInstaller(t *testing.T, ds *appsv1.DaemonSet, c corev1.Container, pod string) *Options {
	t.Helper()
	spec := ds.Spec.Template.Spec
	if c.Image != "ghcr.io/manifold-cni/manifold:latest" {
		t.Errorf("image %q", c.Image)
	}
	if len(c.Command) != 1 || filepath.Base(c.Command[0]) != "manifold-install" {
		t.Fatalf("command %q does not run the installer", c.Command)
	}
	args := expandArgs(t, c, pod)
	o, err := ParseFlags("daemonset", args[1:])
	if err != nil {
		t.Fatalf("DaemonSet args %q: %v", args[1:], err)
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
	return o
}

// expandArgs is c's command and args as the kubelet runs them in the pod
// named pod: $(VAR) is replaced by the container's variable VAR, and $$ is a
// literal $. A reference to a variable that c does not define fails the test,
// where the kubelet would pass it on as it is.
func expandArgs(t *testing.T, c corev1.Container, pod string) []string {
	t.Helper()
	env := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name":
			env[e.Name] = pod
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "spec.nodeName":
			env[e.Name] = "node-1"
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.namespace":
			env[e.Name] = "kube-system"
		default:
			t.Fatalf("container %s: variable %s has a source this test does not know: %+v", c.Name, e.Name, e.ValueFrom)
		}
	}
	ref := regexp.MustCompile(`\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)
	var out []string
	for _, a := range append(slices.Clone(c.Command), c.Args...) {
		out = append(out, ref.ReplaceAllStringFunc(a, func(m string) string {
			if m == "$$" {
				return "$"
			}
			name := m[2 : len(m)-1]
			v, ok := env[name]
			if !ok {
				t.Errorf("container %s: %q names $(%s), which it does not define", c.Name, a, name)
			}
			return v
		}))
	}
	return out
}

// propagation is m's mountPropagation, "none" when it is not set.
func propagation(m corev1.VolumeMount) string {
	if m.MountPropagation == nil {
		return "none"
	}
	return string(*m.MountPropagation)
}

// mountFor is c's mount that holds path: the one with the longest mount path
// that path is on.
func mountFor(c corev1.Container, path string) (corev1.VolumeMount, bool) {
	var best corev1.VolumeMount
	found := false
	for _, m := range c.VolumeMounts {
		rel, err := filepath.Rel(m.MountPath, path)
		if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
			continue
		}
		if !found || len(m.MountPath) > len(best.MountPath) {
			best, found = m, true
		}
	}
	return best, found
}

// TestDockerfileBuildsAllBinaries guards the paths the DaemonSets rely on.
func TestDockerfileBuildsAllBinaries(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "deployments", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	s := string(data)
	for _, want := range []string{"./cmd/manifold ", "./cmd/manifold-install", "./cmd/manifold-shim", "CGO_ENABLED=0", "\nFROM scratch\n", "/usr/local/bin/"} {
		if !strings.Contains(s, want) {
			t.Errorf("Dockerfile lacks %q", want)
		}
	}
	// Each binary built into /out must be copied into the image, where the
	// DaemonSets and the installer's defaults expect it.
	copyLine := regexp.MustCompile(`(?m)^COPY --from=build (.*) /usr/local/bin/$`).FindStringSubmatch(s)
	if copyLine == nil {
		t.Fatal("Dockerfile has no COPY --from=build ... /usr/local/bin/ line")
	}
	for _, bin := range []string{"manifold", "manifold-install", "manifold-shim"} {
		if !slices.Contains(strings.Fields(copyLine[1]), "/out/"+bin) || !strings.Contains(s, "-o /out/"+bin+" ") {
			t.Errorf("Dockerfile does not build /out/%s and copy it to /usr/local/bin/", bin)
		}
	}
	if DefaultOptions().Binary != "/usr/local/bin/manifold" {
		t.Errorf("default --binary %q is not where the Dockerfile puts it", DefaultOptions().Binary)
	}
	if DefaultShimBinary != "/usr/local/bin/manifold-shim" {
		t.Errorf("default --shim-binary %q is not where the Dockerfile puts it", DefaultShimBinary)
	}
}

// multusDaemonName is the name of the ConfigMap that --multus-daemon-config
// names by default; the test fails unless it is in kube-system, the
// installer's Role's namespace.
func multusDaemonName(t *testing.T) string {
	t.Helper()
	namespace, name, _ := DefaultOptions().multusDaemonRef()
	if namespace != "kube-system" {
		t.Errorf("--multus-daemon-config defaults to the namespace %s, where the installer's Role grants nothing", namespace)
	}
	return name
}
