package e2e

// The manifests in deployments/ against the real API server: every object is
// accepted, the CRD is served and enforces its schema, and the ServiceAccount
// gets tokens through the TokenRequest API as the kubelet would get them.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"

	"github.com/manifold-cni/manifold/e2e/controlplane"
	"github.com/manifold-cni/manifold/internal/testenv"
)

// The ServiceAccount that deployments/rbac.yaml defines and the DaemonSet
// runs as.
const (
	saNamespace = "kube-system"
	saName      = "manifold"
	saUser      = "system:serviceaccount:" + saNamespace + ":" + saName
)

// applyDeployments applies every manifest in deployments/ (as
// `kubectl apply -f deployments/` does) and returns the objects they hold.
// When the test ends, every object but the CRD is deleted again; the CRD
// stays because the whole package uses it.
func applyDeployments(t *testing.T, cp *controlplane.ControlPlane) []*unstructured.Unstructured {
	t.Helper()
	dir := filepath.Join(testenv.RepoRoot(t), "deployments")
	var files []string
	for _, pattern := range []string{"*.yaml", "*.yml", "*.json"} {
		m, err := filepath.Glob(filepath.Join(dir, pattern))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	// kubectl applies a directory in name order; crd.yaml sorts first anyway.
	slices.Sort(files)
	if len(files) == 0 {
		t.Fatalf("no manifests in %s", dir)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var objs []*unstructured.Unstructured
	for _, f := range files {
		if err := cp.ApplyYAML(ctx, f); err != nil {
			t.Fatalf("apply %s: %v", filepath.Base(f), err)
		}
		objs = append(objs, decodeManifest(t, f)...)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for i := len(objs) - 1; i >= 0; i-- {
			obj := objs[i]
			if obj.GetKind() == "CustomResourceDefinition" {
				continue
			}
			err := resourceFor(t, cp, obj).Delete(ctx, obj.GetName(), metav1.DeleteOptions{})
			if err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("delete %s %s: %v", obj.GetKind(), obj.GetName(), err)
			}
		}
	})
	return objs
}

// decodeManifest reads every object of a multi-document manifest, filling in
// the namespace the way ApplyYAML does.
func decodeManifest(t *testing.T, path string) []*unstructured.Unstructured {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var out []*unstructured.Unstructured
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("read %s: %v", path, err)
		}
		js, err := utilyaml.ToJSON(doc)
		if err != nil {
			t.Fatalf("convert %s: %v", path, err)
		}
		if s := string(bytes.TrimSpace(js)); s == "" || s == "null" {
			continue
		}
		obj := &unstructured.Unstructured{}
		if err := obj.UnmarshalJSON(js); err != nil {
			t.Fatalf("decode %s: %v", path, err)
		}
		out = append(out, obj)
	}
}

// resourceFor is the dynamic client for obj's kind (and namespace).
func resourceFor(t *testing.T, cp *controlplane.ControlPlane, obj *unstructured.Unstructured) dynamic.ResourceInterface {
	t.Helper()
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(cp.Clientset().Discovery()))
	gvk := obj.GroupVersionKind()
	m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		t.Fatalf("map %s to a resource: %v", gvk, err)
	}
	if m.Scope.Name() != meta.RESTScopeNameNamespace {
		return cp.Dynamic().Resource(m.Resource)
	}
	namespace := obj.GetNamespace()
	if namespace == "" {
		namespace = metav1.NamespaceDefault
	}
	return cp.Dynamic().Resource(m.Resource).Namespace(namespace)
}

// TestDeployments applies every manifest in deployments/ and checks that each
// of its objects is stored, that the NAD CRD is Established with its names
// accepted, and that the CRD's schema refuses a NAD whose spec.config is not a
// string while it accepts the forms manifold reads.
func TestDeployments(t *testing.T) {
	cp := controlPlane(t)
	objs := applyDeployments(t, cp)

	t.Run("every object exists", func(t *testing.T) {
		var kinds []string
		for _, obj := range objs {
			kinds = append(kinds, obj.GetKind())
			got, err := resourceFor(t, cp, obj).Get(context.Background(), obj.GetName(), metav1.GetOptions{})
			if err != nil {
				t.Errorf("%s %s/%s: %v", obj.GetKind(), obj.GetNamespace(), obj.GetName(), err)
				continue
			}
			if got.GetUID() == "" {
				t.Errorf("%s %s has no UID", obj.GetKind(), obj.GetName())
			}
		}
		for _, k := range []string{"CustomResourceDefinition", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "DaemonSet"} {
			if !slices.Contains(kinds, k) {
				t.Errorf("deployments/ has no %s (kinds: %v)", k, kinds)
			}
		}
		ds, err := cp.Clientset().AppsV1().DaemonSets(saNamespace).Get(context.Background(), "manifold", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("get DaemonSet: %v", err)
		}
		if sa := ds.Spec.Template.Spec.ServiceAccountName; sa != saName {
			t.Errorf("DaemonSet runs as ServiceAccount %q, want %q", sa, saName)
		}
	})

	t.Run("CRD established", func(t *testing.T) {
		crd, err := cp.Dynamic().Resource(crdGVR).Get(context.Background(), controlplane.NADCRDName, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("get CRD: %v", err)
		}
		conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
		status := map[string]any{}
		for _, c := range conds {
			if cm, ok := c.(map[string]any); ok {
				status[cm["type"].(string)] = cm["status"]
			}
		}
		for _, c := range []string{"Established", "NamesAccepted"} {
			if status[c] != "True" {
				t.Errorf("CRD condition %s = %v, want True (all: %v)", c, status[c], status)
			}
		}
		stored, _, _ := unstructured.NestedStringSlice(crd.Object, "status", "storedVersions")
		if !slices.Equal(stored, []string{"v1"}) {
			t.Errorf("CRD storedVersions = %v, want [v1]", stored)
		}
	})

	t.Run("NAD schema", func(t *testing.T) {
		// The object forms would log "unknown field" warnings otherwise.
		cfg := cp.RESTConfig()
		cfg.WarningHandler = rest.NoWarnings{}
		dyn, err := dynamic.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		nads := dyn.Resource(controlplane.NADResource).Namespace(metav1.NamespaceDefault)
		for _, tc := range []struct {
			name  string
			spec  map[string]any // nil: no spec at all
			valid bool
		}{
			{"config is a JSON string", map[string]any{"config": `{"cniVersion":"1.0.0","type":"bridge"}`}, true},
			{"config is empty", map[string]any{"config": ""}, true},
			{"no config", map[string]any{}, true},
			{"no spec", nil, true},
			{"config is an object", map[string]any{"config": map[string]any{"cniVersion": "1.0.0", "type": "bridge"}}, false},
			{"config is a number", map[string]any{"config": int64(42)}, false},
			{"config is a list", map[string]any{"config": []any{"bridge"}}, false},
			{"config is a boolean", map[string]any{"config": true}, false},
		} {
			t.Run(tc.name, func(t *testing.T) {
				name := testenv.UniqueName("schema-")
				obj := &unstructured.Unstructured{Object: map[string]any{
					"apiVersion": "k8s.cni.cncf.io/v1",
					"kind":       "NetworkAttachmentDefinition",
					"metadata":   map[string]any{"name": name},
				}}
				if tc.spec != nil {
					obj.Object["spec"] = tc.spec
				}
				_, err := nads.Create(context.Background(), obj, metav1.CreateOptions{})
				if err == nil {
					t.Cleanup(func() { _ = nads.Delete(context.Background(), name, metav1.DeleteOptions{}) })
				}
				switch {
				case tc.valid && err != nil:
					t.Errorf("create NAD: %v, want it accepted", err)
				case !tc.valid && err == nil:
					t.Errorf("NAD with spec %v was accepted, want Invalid", tc.spec)
				case !tc.valid && !apierrors.IsInvalid(err):
					t.Errorf("create NAD: %v (reason %s), want Invalid", err, apierrors.ReasonForError(err))
				case !tc.valid && !(strings.Contains(err.Error(), "spec.config") && strings.Contains(err.Error(), "string")):
					t.Errorf("rejection %q does not name spec.config and the type string", err)
				}
			})
		}
	})
}

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// mintToken asks the TokenRequest API for a token of the manifold
// ServiceAccount, bound to pod when it is not nil (as the kubelet binds the
// token it projects into a pod), and checks that it was issued.
func mintToken(t *testing.T, cp *controlplane.ControlPlane, pod *corev1.Pod, seconds int64) string {
	t.Helper()
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &seconds}}
	if pod != nil {
		req.Spec.BoundObjectRef = &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got, err := cp.Clientset().CoreV1().ServiceAccounts(saNamespace).CreateToken(ctx, saName, req, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("TokenRequest for %s/%s: %v", saNamespace, saName, err)
	}
	if got.Status.Token == "" {
		t.Fatal("TokenRequest returned no token")
	}
	if left := time.Until(got.Status.ExpirationTimestamp.Time); left <= 0 || left > time.Duration(seconds+60)*time.Second {
		t.Errorf("token expires in %s, want about %ds", left, seconds)
	}
	return got.Status.Token
}

// tokenClient is a clientset that authenticates with token only.
func tokenClient(t *testing.T, cp *controlplane.ControlPlane, token string) kubernetes.Interface {
	t.Helper()
	cfg := rest.AnonymousClientConfig(cp.RESTConfig())
	cfg.BearerToken = token
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// whoAmI asks the API server who token authenticates as.
func whoAmI(t *testing.T, cp *controlplane.ControlPlane, token string) authenticationv1.UserInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := tokenClient(t, cp, token).AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("SelfSubjectReview: %v", err)
	}
	return r.Status.UserInfo
}

// waitRejected waits until the API server refuses token, and returns how
// long that took. kube-apiserver caches a successful token check for ten
// seconds, so a revoked token that was in use keeps working for up to that
// long.
func waitRejected(t *testing.T, cp *controlplane.ControlPlane, token string) time.Duration {
	t.Helper()
	cs := tokenClient(t, cp, token)
	start := time.Now()
	// A check made before the API server's pod informer has seen a deletion
	// succeeds, and that success is then cached: give the informer a moment.
	time.Sleep(300 * time.Millisecond)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		cancel()
		if apierrors.IsUnauthorized(err) {
			return time.Since(start)
		}
		if time.Since(start) > 30*time.Second {
			t.Fatalf("token still accepted %s after its pod was deleted (last error: %v)", time.Since(start).Round(time.Second), err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
