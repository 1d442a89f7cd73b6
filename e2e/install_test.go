package e2e

// The node installer against the real API server: the DaemonSet's own flags,
// volumes and ServiceAccount, a token from the TokenRequest API in place of
// the one the kubelet projects, and manifold calls that use nothing but what
// the installer wrote.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/manifold-cni/manifold/install"
	"github.com/manifold-cni/manifold/internal/testenv"
)

// node is one Kubernetes node as the manifold DaemonSet's pod (its
// container "install") sees it, laid out under a temp dir: root stands for the host's "/", and volumes for the
// kubelet's directory of the installer pod's volumes. Paths go through the
// DaemonSet's own volumes and mounts, so a flag that names a path the pod
// does not mount, or a mount of the wrong host dir, fails the test.
type node struct {
	t       *testing.T
	ds      *appsv1.DaemonSet // whose installer this node runs
	root    string
	volumes string
	spec    corev1.PodSpec
	c       corev1.Container
	gen     int // generation of the projected volumes' contents
}

// installerNode applies deployments/ and returns a node for the thin
// DaemonSet's installer (deployedNode), where this node differs from a real
// one: the binary comes from the build rather than the image, and manifold's
// state goes to the env's cniDir rather than the host's /var. The node's
// primary network's config is in its conf dir.
func (e *env) installerNode(t *testing.T) (*node, *install.Options) {
	t.Helper()
	n, o := e.deployedNode(t, "manifold")
	o.Binary = testenv.Manifold(t)
	o.CNIDir = e.cniDir
	e.writeFile(filepath.Join(o.HostCNIConfDir, "10-bridge.conflist"), e.bridgeConflist(clusterName, e.bridge, e.cluster))
	return n, o
}

// deployedNode applies deployments/ and returns a node for the installer of
// the DaemonSet named, with its options as the DaemonSet gives them. The API
// server's address is in the environment, as the kubelet gives it to every
// pod (the DaemonSets set no --api-server).
func (e *env) deployedNode(t *testing.T, daemonSet string) (*node, *install.Options) {
	t.Helper()
	applyDeployments(t, e.cp)
	ds, err := e.k8s.AppsV1().DaemonSets(saNamespace).Get(e.ctx(), daemonSet, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get DaemonSet %s: %v", daemonSet, err)
	}
	n := newNode(t, ds)
	u, err := url.Parse(e.cp.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBERNETES_SERVICE_HOST", u.Hostname())
	t.Setenv("KUBERNETES_SERVICE_PORT", u.Port())
	return n, n.options()
}

func newNode(t *testing.T, ds *appsv1.DaemonSet) *node {
	t.Helper()
	tmp := t.TempDir()
	n := &node{t: t, ds: ds, root: filepath.Join(tmp, "host"), volumes: filepath.Join(tmp, "pod-volumes"), spec: ds.Spec.Template.Spec}
	i := slices.IndexFunc(n.spec.Containers, func(c corev1.Container) bool { return c.Name == "install" })
	if i < 0 {
		t.Fatalf("DaemonSet %s has no container \"install\"", ds.Name)
	}
	n.c = n.spec.Containers[i]
	for _, v := range n.spec.Volumes {
		// The DaemonSet asks for DirectoryOrCreate, so the kubelet makes them.
		if v.HostPath != nil {
			if err := os.MkdirAll(n.host(v.HostPath.Path), 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	return n
}

// host maps a path on the host to this node.
func (n *node) host(p string) string { return filepath.Join(n.root, p) }

// inPod maps a path in the installer container to this node, through the
// container's volume mounts.
func (n *node) inPod(p string) string {
	n.t.Helper()
	var mount *corev1.VolumeMount
	for i, m := range n.c.VolumeMounts {
		rel, err := filepath.Rel(m.MountPath, p)
		if err == nil && rel != ".." && !strings.HasPrefix(rel, "../") && (mount == nil || len(m.MountPath) > len(mount.MountPath)) {
			mount = &n.c.VolumeMounts[i]
		}
	}
	if mount == nil {
		n.t.Fatalf("installer path %s is on none of the DaemonSet's volumes", p)
	}
	rel, _ := filepath.Rel(mount.MountPath, p)
	for _, v := range n.spec.Volumes {
		switch {
		case v.Name != mount.Name:
		case v.HostPath != nil:
			return filepath.Join(n.host(v.HostPath.Path), rel)
		case v.Projected != nil:
			return filepath.Join(n.volumes, v.Name, rel)
		}
	}
	n.t.Fatalf("volume %q of mount %s is neither hostPath nor projected", mount.Name, mount.MountPath)
	return ""
}

// tokenExpiration is the lifetime the DaemonSet asks for its token.
func (n *node) tokenExpiration() int64 {
	for _, v := range n.spec.Volumes {
		if v.Projected == nil {
			continue
		}
		for _, s := range v.Projected.Sources {
			if s.ServiceAccountToken != nil && s.ServiceAccountToken.ExpirationSeconds != nil {
				return *s.ServiceAccountToken.ExpirationSeconds
			}
		}
	}
	return 3600
}

// project fills the pod's projected volumes the way the kubelet does: every
// source's files go into a fresh directory, which then replaces the old one
// at once by a rename of the ..data symlink. The ServiceAccount token is
// token; ca is the kube-root-ca.crt ConfigMap's ca.crt, which the
// controller-manager would publish in a real cluster.
func (n *node) project(token string, ca []byte) {
	n.t.Helper()
	n.gen++
	for _, v := range n.spec.Volumes {
		if v.Projected == nil {
			continue
		}
		files := map[string][]byte{}
		for _, s := range v.Projected.Sources {
			switch {
			case s.ServiceAccountToken != nil:
				files[s.ServiceAccountToken.Path] = []byte(token)
			case s.ConfigMap != nil && s.ConfigMap.Name == "kube-root-ca.crt":
				for _, it := range s.ConfigMap.Items {
					if it.Key != "ca.crt" {
						n.t.Fatalf("projected volume %s: unknown key %q of ConfigMap kube-root-ca.crt", v.Name, it.Key)
					}
					files[it.Path] = ca
				}
			default:
				n.t.Fatalf("projected volume %s: a source this test cannot provide: %+v", v.Name, s)
			}
		}
		dir := filepath.Join(n.volumes, v.Name)
		gen := filepath.Join(dir, fmt.Sprintf("..gen_%d", n.gen))
		if err := os.MkdirAll(gen, 0o755); err != nil {
			n.t.Fatal(err)
		}
		for name, data := range files {
			if err := os.WriteFile(filepath.Join(gen, name), data, 0o644); err != nil {
				n.t.Fatal(err)
			}
		}
		tmp := filepath.Join(dir, "..data_tmp")
		if err := os.Symlink(filepath.Base(gen), tmp); err != nil {
			n.t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
			n.t.Fatal(err)
		}
		for name := range files {
			link := filepath.Join(dir, name)
			if _, err := os.Lstat(link); errors.Is(err, fs.ErrNotExist) {
				if err := os.Symlink(filepath.Join("..data", name), link); err != nil {
					n.t.Fatal(err)
				}
			}
		}
		if n.gen > 1 {
			_ = os.RemoveAll(filepath.Join(dir, fmt.Sprintf("..gen_%d", n.gen-1)))
		}
	}
}

// options parses the DaemonSet's command line as manifold-install does, and
// maps its paths to this node. It fails the test unless the DaemonSet mounts,
// at --cni-bin-dir and --cni-conf-dir, the host dirs that --host-cni-bin-dir
// and --host-cni-conf-dir name: a mismatch would make manifold look for its
// files where the installer did not put them.
func (n *node) options() *install.Options {
	n.t.Helper()
	if len(n.c.Command) == 0 || filepath.Base(n.c.Command[0]) != "manifold-install" {
		n.t.Fatalf("DaemonSet command = %q, want manifold-install", n.c.Command)
	}
	o, err := install.ParseFlags(n.c.Command[0], append(slices.Clone(n.c.Command[1:]), n.c.Args...))
	if err != nil {
		n.t.Fatalf("parse the DaemonSet's installer flags: %v", err)
	}
	for _, d := range [][2]string{{o.CNIBinDir, o.HostCNIBinDir}, {o.CNIConfDir, o.HostCNIConfDir}} {
		if got, want := n.inPod(d[0]), n.host(d[1]); got != want {
			n.t.Errorf("the installer's %s is the host's %s, but manifold is told %s", d[0], strings.TrimPrefix(got, n.root), d[1])
		}
	}
	o.CNIBinDir, o.CNIConfDir = n.inPod(o.CNIBinDir), n.inPod(o.CNIConfDir)
	o.HostCNIBinDir, o.HostCNIConfDir = n.host(o.HostCNIBinDir), n.host(o.HostCNIConfDir)
	o.TokenFile, o.CAFile = n.inPod(o.TokenFile), n.inPod(o.CAFile)
	return o
}

// installer is one install.Run in the background.
type installer struct {
	done chan error
	stop func() error
}

// start runs the installer until stop is called or the test ends. Its log
// is shown when the test fails.
func (n *node) start(o *install.Options) *installer {
	n.t.Helper()
	logPath := filepath.Join(n.t.TempDir(), "manifold-install.log")
	f, err := os.Create(logPath)
	if err != nil {
		n.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	in := &installer{done: make(chan error, 1)}
	go func() {
		in.done <- install.Run(ctx, o, slog.New(slog.NewTextHandler(f, &slog.HandlerOptions{Level: slog.LevelDebug})))
	}()
	var result error
	stopped := false
	in.stop = func() error {
		if stopped {
			return result
		}
		stopped = true
		cancel()
		select {
		case result = <-in.done:
		case <-time.After(30 * time.Second):
			result = errors.New("manifold-install did not stop within 30s")
		}
		return result
	}
	n.t.Cleanup(func() {
		if err := in.stop(); err != nil {
			n.t.Errorf("manifold-install: %v", err)
		}
		f.Close()
		if n.t.Failed() {
			b, _ := os.ReadFile(logPath)
			n.t.Logf("manifold-install log:\n%s", b)
		}
	})
	return in
}

// waitFor polls cond until it holds, failing the test after bound or as soon
// as the installer exits.
func (in *installer) waitFor(t *testing.T, what string, bound time.Duration, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		select {
		case err := <-in.done:
			in.done <- err
			t.Fatalf("manifold-install exited (%v) while waiting for %s", err, what)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Since(start) > bound {
			t.Fatalf("no %s after %s", what, bound)
		}
	}
	return time.Since(start)
}

func fileHolds(path string, want []byte) func() bool {
	return func() bool {
		got, err := os.ReadFile(path)
		return err == nil && bytes.Equal(got, want)
	}
}

// TestInstallerKubeconfig runs the node installer with the DaemonSet's own
// flags and volumes on a stand-in node, with a token of the manifold
// ServiceAccount from the TokenRequest API in the projected volume, and
// drives pods through the config and kubeconfig it wrote, so every API call
// is made as the ServiceAccount. Each token is bound to a stand-in installer
// pod, as the kubelet binds the token it projects, so deleting that pod
// revokes it. The steps build on each other:
//   - the installer writes its config, the kubeconfig (tokenFile, no embedded
//     token), the token, the CA and the binary; the token is the
//     ServiceAccount's and bound to the installer pod;
//   - ADD gives the pod its networks, writes network-status through the status
//     subresource and sends the events; DEL removes it all;
//   - a garbage token in the projected volume reaches the host, and ADD fails
//     with code 7 and the 401, attaching nothing;
//   - a new token from the TokenRequest API reaches the host the same way, and
//     ADD works again with it, nothing restarted;
//   - a revoked token (its pod deleted) fails ADD like the garbage one;
//   - stopping the installer (--cleanup-config-on-exit) removes its config.
func TestInstallerKubeconfig(t *testing.T) {
	e := newEnv(t)
	cp := e.cp
	n, o := e.installerNode(t)
	o.LogFile, o.LogLevel = e.logFile, "debug"
	// The node's plugins in the bin dir.
	primary := filepath.Join(o.HostCNIConfDir, "10-bridge.conflist")
	if err := testenv.LinkBinDir(o.HostCNIBinDir, testenv.Plugins(t), o.Binary); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(o.HostCNIBinDir, "manifold")); err != nil {
		t.Fatal(err) // the installer's to put there
	}
	sa := nextSubnet()
	e.nad(e.ns, "a", e.macvlanConf("", sa))
	wants := []want{e.clusterWant(), {name: e.ns + "/a", ifname: "net1", subnet: sa}}

	// installerPod creates a pod from the DaemonSet's template, the pod a
	// token is bound to. It is not scheduled, so deleting it is immediate.
	installerPod := func(t *testing.T) *corev1.Pod {
		t.Helper()
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: testenv.UniqueName("manifold-"), Namespace: saNamespace, Labels: n.ds.Spec.Template.Labels},
			Spec:       *n.ds.Spec.Template.Spec.DeepCopy(),
		}
		p, err := e.k8s.CoreV1().Pods(saNamespace).Create(e.ctx(), p, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create installer pod: %v", err)
		}
		t.Cleanup(func() {
			_ = e.k8s.CoreV1().Pods(saNamespace).Delete(context.Background(), p.Name, metav1.DeleteOptions{})
		})
		return p
	}
	deletePod := func(t *testing.T, p *corev1.Pod) {
		t.Helper()
		err := e.k8s.CoreV1().Pods(p.Namespace).Delete(e.ctx(), p.Name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatalf("delete installer pod %s: %v", p.Name, err)
		}
	}
	ca, err := os.ReadFile(cp.CAFile)
	if err != nil {
		t.Fatal(err)
	}

	pod1 := installerPod(t)
	tokenA := mintToken(t, cp, pod1, n.tokenExpiration())
	n.project(tokenA, ca)
	start := time.Now()
	in := n.start(o)
	confPath := filepath.Join(o.HostCNIConfDir, o.ConfigName)
	in.waitFor(t, "manifold config "+confPath, 30*time.Second, func() bool { _, err := os.Stat(confPath); return err == nil })
	t.Logf("installer wrote its config in %s", time.Since(start).Round(time.Millisecond))

	credDir := filepath.Join(o.HostCNIConfDir, "manifold.d")
	kubeconfig := filepath.Join(credDir, "manifold.kubeconfig")
	hostToken := filepath.Join(credDir, "token")
	var conf *libcni.NetworkConfigList

	if !t.Run("installer output", func(t *testing.T) {
		conf = runtimeConfig(t, o.HostCNIConfDir, o.ConfigName)
		var plugin map[string]any
		if err := json.Unmarshal(conf.Plugins[0].Bytes, &plugin); err != nil {
			t.Fatal(err)
		}
		for key, want := range map[string]any{
			"type": "manifold", "kubeconfig": kubeconfig, "clusterNetwork": primary,
			"binDir": o.HostCNIBinDir, "cniDir": e.cniDir,
		} {
			if plugin[key] != want {
				t.Errorf("config key %q = %v, want %v", key, plugin[key], want)
			}
		}

		kc, err := clientcmd.LoadFromFile(kubeconfig)
		if err != nil {
			t.Fatalf("load %s: %v", kubeconfig, err)
		}
		kctx := kc.Contexts[kc.CurrentContext]
		if kctx == nil || kc.Clusters[kctx.Cluster] == nil || kc.AuthInfos[kctx.AuthInfo] == nil {
			t.Fatalf("kubeconfig's current context %q is incomplete", kc.CurrentContext)
		}
		cluster, user := kc.Clusters[kctx.Cluster], kc.AuthInfos[kctx.AuthInfo]
		if cluster.Server != cp.URL {
			t.Errorf("kubeconfig server = %q, want %q (from KUBERNETES_SERVICE_HOST/PORT)", cluster.Server, cp.URL)
		}
		if cluster.CertificateAuthority != filepath.Join(credDir, "ca.crt") || len(cluster.CertificateAuthorityData) != 0 {
			t.Errorf("kubeconfig CA = %q (data: %d bytes), want the file %s", cluster.CertificateAuthority, len(cluster.CertificateAuthorityData), filepath.Join(credDir, "ca.crt"))
		}
		if user.TokenFile != hostToken || user.Token != "" {
			t.Errorf("kubeconfig user has tokenFile %q and an embedded token of %d bytes, want tokenFile %s and no embedded token", user.TokenFile, len(user.Token), hostToken)
		}

		for _, f := range []struct {
			path string
			data []byte
			perm fs.FileMode
		}{
			{hostToken, []byte(tokenA), 0o600},
			{filepath.Join(credDir, "ca.crt"), ca, 0o644},
			{kubeconfig, nil, 0o600},
			{filepath.Join(o.HostCNIBinDir, "manifold"), mustRead(t, o.Binary), 0o755},
		} {
			fi, err := os.Lstat(f.path)
			if err != nil {
				t.Errorf("%v", err)
				continue
			}
			if !fi.Mode().IsRegular() || fi.Mode().Perm() != f.perm {
				t.Errorf("%s has mode %s, want a regular file with %s", f.path, fi.Mode(), f.perm)
			}
			if f.data != nil && !bytes.Equal(mustRead(t, f.path), f.data) {
				t.Errorf("%s does not hold what the installer was given", f.path)
			}
		}

		who := whoAmI(t, cp, string(mustRead(t, hostToken)))
		if who.Username != saUser {
			t.Errorf("the host's token authenticates as %q, want %q", who.Username, saUser)
		}
		if got := who.Extra["authentication.kubernetes.io/pod-name"]; !slices.Equal(got, []string{pod1.Name}) {
			t.Errorf("the host's token is bound to pod %v, want %s", got, pod1.Name)
		}
	}) {
		return
	}
	e.rt = testenv.NewRuntime(t, o.HostCNIBinDir)

	// attach runs a pod through ADD and DEL with the installer's config.
	attach := func(t *testing.T) {
		e := e.sub(t)
		pod := e.pod(e.ns, map[string]string{annotNetworks: "a"})
		box := e.sandboxFor(pod)
		res := e.mustAdd(conf, box)
		e.checkAttached(box, res, wants)
		// Written by manifold's client, through the status subresource.
		mf := statusWriter(e.getPod(pod))
		if mf == nil || mf.Manager != "manifold" || mf.Subresource != "status" {
			t.Errorf("network-status written by %+v, want manager manifold on the status subresource", mf)
		}
		e.mustDel(conf, box)
		e.checkNothingLeft(box)
	}
	// refused runs ADD for a pod whose token the API server refuses.
	refused := func(t *testing.T) {
		e := e.sub(t)
		pod := e.pod(e.ns, map[string]string{annotNetworks: "a"})
		box := e.sandboxFor(pod)
		start := time.Now()
		_, err := e.add(conf, box)
		te := wantCode(t, err, 7, e.ns+"/"+pod.Name, "401")
		t.Logf("ADD failed in %s: %s", time.Since(start).Round(time.Millisecond), te.Msg)
		e.checkNothingLeft(box)
		if _, ok := e.status(pod); ok {
			t.Errorf("pod %s/%s has a network-status after a refused ADD", pod.Namespace, pod.Name)
		}
	}
	// rotate puts a new token in the projected volume and waits until the
	// installer has copied it to the host.
	rotate := func(t *testing.T, token string) {
		t.Helper()
		n.project(token, ca)
		took := in.waitFor(t, "new token on the host", o.PollInterval+10*time.Second, fileHolds(hostToken, []byte(token)))
		t.Logf("the installer copied the new token in %s", took.Round(time.Millisecond))
	}

	if !t.Run("ADD and DEL as the ServiceAccount", attach) {
		return
	}

	// The installer keeps the host's token current, and manifold reads it on
	// every call: a garbage token fails ADD, and the next token the kubelet
	// projects makes it work again, with nothing restarted.
	t.Run("garbage token", func(t *testing.T) {
		rotate(t, "not-a-token")
		refused(t)
	})
	pod2 := installerPod(t)
	tokenB := mintToken(t, cp, pod2, n.tokenExpiration())
	t.Run("refreshed token", func(t *testing.T) {
		rotate(t, tokenB)
		attach(t)
	})
	// A token whose pod is gone, as one left behind by a deleted installer
	// pod. It is never used before its pod is deleted, so the API server's
	// cache of accepted tokens does not hide the revocation.
	t.Run("revoked token", func(t *testing.T) {
		pod3 := installerPod(t)
		tokenC := mintToken(t, cp, pod3, n.tokenExpiration())
		deletePod(t, pod3)
		t.Logf("the API server refused the token %s after its pod was deleted", waitRejected(t, cp, tokenC).Round(time.Millisecond))
		rotate(t, tokenC)
		refused(t)
	})

	t.Run("stop removes the config", func(t *testing.T) {
		if err := in.stop(); err != nil {
			t.Fatalf("manifold-install: %v", err)
		}
		if _, err := os.Stat(confPath); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s after the installer stopped: %v, want it removed", confPath, err)
		}
		if _, err := os.Stat(primary); err != nil {
			t.Errorf("primary config: %v", err)
		}
	})
}

// runtimeConfig loads the config a runtime would use from confDir, the first
// file in name order, and checks that it is manifold's.
func runtimeConfig(t *testing.T, confDir, want string) *libcni.NetworkConfigList {
	t.Helper()
	files, err := libcni.ConfFiles(confDir, []string{".conf", ".conflist", ".json"})
	if err != nil || len(files) == 0 {
		t.Fatalf("CNI configs in %s: %v %v", confDir, files, err)
	}
	sort.Strings(files)
	if filepath.Base(files[0]) != want {
		t.Fatalf("the runtime would load %s, want %s", files[0], want)
	}
	conf, err := libcni.ConfListFromFile(files[0])
	if err != nil {
		t.Fatalf("load %s: %v", files[0], err)
	}
	if len(conf.Plugins) != 1 {
		t.Fatalf("%s has %d plugins, want manifold only", files[0], len(conf.Plugins))
	}
	return conf
}

// statusWriter is the managedFields entry that owns the network-status
// annotation.
func statusWriter(p *corev1.Pod) *metav1.ManagedFieldsEntry {
	for i, mf := range p.ManagedFields {
		if mf.FieldsV1 != nil && bytes.Contains(mf.FieldsV1.Raw, []byte(`"f:`+annotNetworkStatus+`"`)) {
			return &p.ManagedFields[i]
		}
	}
	return nil
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
