package admission

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"
)

func runValidate(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	rc := RunValidate(args, strings.NewReader(stdin), &out, &errOut)
	return rc, out.String(), errOut.String()
}

func TestValidateGoodManifests(t *testing.T) {
	rc, out, errOut := runValidate(t, "", "-f", "testdata/manifests/good")
	if rc != 0 || out != "" || errOut != "" {
		t.Errorf("exit %d, output %q, errors %q: want 0 and nothing", rc, out, errOut)
	}
}

func TestValidateBadManifests(t *testing.T) {
	rc, out, _ := runValidate(t, "", "-f", "testdata/manifests/bad")
	if rc != 1 {
		t.Errorf("exit %d, want 1", rc)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	want := []string{
		`testdata/manifests/bad/apps.yaml: document 1: NetworkAttachmentDefinition apps/nested: spec.config "`,
		`testdata/manifests/bad/apps.yaml: document 2: Deployment apps/web: spec.template.metadata.annotations[k8s.v1.cni.cncf.io/networks] "macvlan-conf@data, storage@data": network apps/storage: interface name "data" is already taken by network apps/macvlan-conf`,
		`testdata/manifests/bad/apps.yaml: document 3: Pod apps/db: items[0].metadata.annotations[v1.multus-cni.io/default-network] "a, b": invalid default-network annotation`,
		`testdata/manifests/bad/apps.yaml: document 3: StatefulSet apps/cache: items[1].spec.template.metadata.annotations[k8s.v1.cni.cncf.io/networks] "`,
		`testdata/manifests/bad/nad.json: document 1: NetworkAttachmentDefinition apps/sriov: spec.config "`,
		`testdata/manifests/bad/nad.json: document 1: NetworkAttachmentDefinition apps/sriov: metadata.annotations "k8s.v1.cni.cncf.io/resourceName=intel.com/sriov vf": `,
	}
	if len(lines) != len(want) {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), len(want), out)
	}
	for i, w := range want {
		if !strings.HasPrefix(lines[i], w) {
			t.Errorf("line %d:\n%s\nwant it to start with\n%s", i+1, lines[i], w)
		}
	}
	for _, rule := range []string{"is a meta-plugin", "is a multicast address", "invalid spec.config", "is not a device plugin's resource"} {
		if !strings.Contains(out, rule) {
			t.Errorf("no line says %q:\n%s", rule, out)
		}
	}
}

func TestValidateJSONFromStdin(t *testing.T) {
	data, err := os.ReadFile("testdata/manifests/bad/apps.yaml")
	if err != nil {
		t.Fatal(err)
	}
	rc, out, _ := runValidate(t, string(data), "-f", "-", "-o", "json")
	var fs []Finding
	if err := json.Unmarshal([]byte(out), &fs); err != nil {
		t.Fatalf("output is not a JSON array of findings: %v\n%s", err, out)
	}
	if rc != 1 || len(fs) != 4 {
		t.Fatalf("exit %d, %d findings, want 1 and 4: %s", rc, len(fs), out)
	}
	if f := fs[1]; f.File != "-" || f.Document != 2 || f.Object != "Deployment apps/web" || f.Value != "macvlan-conf@data, storage@data" || !strings.Contains(f.Rule, "already taken") {
		t.Errorf("finding %+v", f)
	}
	rc, out, _ = runValidate(t, "", "-f", "testdata/manifests/good", "-o", "json")
	if rc != 0 || strings.TrimSpace(out) != "[]" {
		t.Errorf("good manifests: exit %d, output %q", rc, out)
	}
}

func TestValidateBrokenInput(t *testing.T) {
	rc, out, _ := runValidate(t, "kind: Pod\n  bad: [indent\n", "-f", "-")
	if rc != 1 || !strings.Contains(out, "-: document 1: ") || !strings.Contains(out, "not YAML") {
		t.Errorf("exit %d, output %q: want the document named as not YAML", rc, out)
	}
	if rc, _, _ := runValidate(t, ""); rc != 2 {
		t.Errorf("no -f: exit %d, want 2", rc)
	}
	if rc, _, _ := runValidate(t, "", "-f", "testdata/nonexistent"); rc != 2 {
		t.Errorf("missing file: exit %d, want 2", rc)
	}
}

func TestValidateOptions(t *testing.T) {
	rc, out, _ := runValidate(t, "", "-f", "testdata/manifests/good/network.yaml", "--allowed-plugin-types", "bridge,host-local,tuning")
	if rc != 1 || !strings.Contains(out, `plugin 0 type "macvlan" is not in the node's allowedPluginTypes`) {
		t.Errorf("exit %d, output %q: want macvlan refused", rc, out)
	}
}
