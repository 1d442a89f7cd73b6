package controlplane

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"

	"github.com/manifold-cni/manifold/k8sclient/nadv1"
)

// CRDPath is the repository-relative path of the NetworkAttachmentDefinition
// CRD manifest.
const CRDPath = "deployments/crd.yaml"

// NADCRDName is the name of the NetworkAttachmentDefinition CRD object.
const NADCRDName = "network-attachment-definitions.k8s.cni.cncf.io"

// NADResource is the NetworkAttachmentDefinition resource, for the dynamic
// client.
var NADResource = nadv1.Resource

var crdResource = schema.GroupVersionResource{
	Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions",
}

// fieldManager names this harness in server-side apply's managedFields.
const fieldManager = "manifold-e2e"

func (cp *ControlPlane) restMapper() *restmapper.DeferredDiscoveryRESTMapper {
	return cp.mapper
}

// InstallCRD applies deployments/crd.yaml (found from the repository root)
// and waits until the NetworkAttachmentDefinition CRD is Established, so NADs
// can be created as soon as it returns.
func (cp *ControlPlane) InstallCRD(ctx context.Context) error {
	root, err := RepoRoot()
	if err != nil {
		return fmt.Errorf("install nad crd: %w", err)
	}
	if err := cp.ApplyYAML(ctx, filepath.Join(root, CRDPath)); err != nil {
		return fmt.Errorf("install nad crd: %w", err)
	}
	return cp.WaitCRDEstablished(ctx, NADCRDName)
}

// ApplyYAML server-side-applies every object in a multi-document YAML (or
// JSON) file, in file order, so it creates missing objects and updates
// existing ones. Namespaced objects without a namespace go to "default". A
// CustomResourceDefinition is waited on until Established before the next
// document, so a file may define a CRD and then use it.
func (cp *ControlPlane) ApplyYAML(ctx context.Context, path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read manifest: %w", err)
	}
	if err := cp.ApplyYAMLBytes(ctx, data); err != nil {
		return fmt.Errorf("apply %s: %w", path, err)
	}
	return nil
}

// ApplyYAMLBytes is ApplyYAML for a manifest held in memory.
func (cp *ControlPlane) ApplyYAMLBytes(ctx context.Context, data []byte) error {
	objs, err := decodeManifest(data)
	if err != nil {
		return err
	}
	for i, obj := range objs {
		if err := cp.applyObject(ctx, obj); err != nil {
			return fmt.Errorf("object %d (%s %q): %w", i+1, obj.GetKind(), obj.GetName(), err)
		}
	}
	return nil
}

// decodeManifest splits a multi-document manifest into objects, skipping
// empty documents and expanding kind: List.
func decodeManifest(data []byte) ([]*unstructured.Unstructured, error) {
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var objs []*unstructured.Unstructured
	for doc := 1; ; doc++ {
		raw, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read document %d: %w", doc, err)
		}
		// Converting to JSON first makes numbers int64 the way the
		// unstructured code expects, instead of the float64 that decoding
		// YAML into a map would give.
		js, err := utilyaml.ToJSON(raw)
		if err != nil {
			return nil, fmt.Errorf("convert document %d to json: %w", doc, err)
		}
		if len(bytes.TrimSpace(js)) == 0 || string(bytes.TrimSpace(js)) == "null" {
			continue
		}
		obj := &unstructured.Unstructured{}
		if err := obj.UnmarshalJSON(js); err != nil {
			return nil, fmt.Errorf("decode document %d: %w", doc, err)
		}
		if obj.IsList() {
			list, err := obj.ToList()
			if err != nil {
				return nil, fmt.Errorf("decode list in document %d: %w", doc, err)
			}
			for i := range list.Items {
				objs = append(objs, &list.Items[i])
			}
			continue
		}
		objs = append(objs, obj)
	}
}

func (cp *ControlPlane) applyObject(ctx context.Context, obj *unstructured.Unstructured) error {
	gvk := obj.GroupVersionKind()
	if gvk.Kind == "" || gvk.Version == "" {
		return errors.New("missing apiVersion or kind")
	}
	mapping, err := cp.mapping(ctx, gvk)
	if err != nil {
		return err
	}
	var ri dynamic.ResourceInterface = cp.dynamic.Resource(mapping.Resource)
	if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
		if obj.GetNamespace() == "" {
			obj.SetNamespace(metav1.NamespaceDefault)
		}
		ri = cp.dynamic.Resource(mapping.Resource).Namespace(obj.GetNamespace())
	}
	if obj.GetName() == "" {
		// Server-side apply needs a name; generateName objects can only be
		// created.
		if _, err := ri.Create(ctx, obj, metav1.CreateOptions{FieldManager: fieldManager}); err != nil {
			return fmt.Errorf("create: %w", err)
		}
		return nil
	}
	if _, err := ri.Apply(ctx, obj.GetName(), obj, metav1.ApplyOptions{FieldManager: fieldManager, Force: true}); err != nil {
		return fmt.Errorf("apply: %w", err)
	}
	if mapping.Resource == crdResource {
		if err := cp.WaitCRDEstablished(ctx, obj.GetName()); err != nil {
			return err
		}
		// The new kind is not in the cached discovery data yet.
		cp.restMapper().Reset()
	}
	return nil
}

// mapping resolves gvk to a resource. A kind that is not known yet may belong
// to a CRD that was just established, and discovery can trail that by a
// moment, so it refreshes discovery and retries for a few seconds.
func (cp *ControlPlane) mapping(ctx context.Context, gvk schema.GroupVersionKind) (*meta.RESTMapping, error) {
	mapper := cp.restMapper()
	var mapping *meta.RESTMapping
	var lastErr error
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err == nil {
			mapping = m
			return true, nil
		}
		if !meta.IsNoMatchError(err) {
			return false, err
		}
		lastErr = err
		mapper.Reset()
		return false, nil
	})
	if err != nil {
		if lastErr != nil {
			return nil, fmt.Errorf("map %s to a resource: %w", gvk, lastErr)
		}
		return nil, fmt.Errorf("map %s to a resource: %w", gvk, err)
	}
	return mapping, nil
}

// createGrace is how long kube-apiserver holds every create of a custom
// resource made right after its CRD became Established (a fixed 2 s sleep in
// apiextensions-apiserver's customresource_handler.go, meant for HA API
// servers to catch up).
const createGrace = 2 * time.Second

// WaitCRDEstablished waits (up to 30 seconds) until the named CRD reports the
// Established condition, and then until kube-apiserver's post-establishment
// create delay has passed. Without the second wait the first creates would
// each stall for up to two seconds, which would show up as noise in latency
// measurements; the wait is skipped for a CRD established long ago.
func (cp *ControlPlane) WaitCRDEstablished(ctx context.Context, name string) error {
	var last string
	var since time.Time
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		crd, err := cp.dynamic.Resource(crdResource).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			last = "not found"
			return false, nil
		}
		if err != nil {
			return false, err
		}
		conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
		for _, c := range conds {
			cm, ok := c.(map[string]any)
			if !ok || cm["type"] != "Established" {
				continue
			}
			if cm["status"] != "True" {
				last = fmt.Sprintf("Established=%v: %v", cm["status"], cm["message"])
				continue
			}
			if ts, ok := cm["lastTransitionTime"].(string); ok {
				// Second precision, so this is at or before the real
				// transition, which errs towards waiting long enough.
				since, _ = time.Parse(time.RFC3339, ts)
			}
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("wait for crd %s to be established (last: %s): %w", name, last, err)
	}
	if since.IsZero() {
		return nil
	}
	// Both servers share this machine's clock, so comparing is sound.
	if d := time.Until(since.Add(createGrace + 50*time.Millisecond)); d > 0 {
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for crd %s create delay: %w", name, ctx.Err())
		case <-time.After(d):
		}
	}
	return nil
}
