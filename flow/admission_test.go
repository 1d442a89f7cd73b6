package flow

import (
	"bufio"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/manifold-cni/manifold/admission"
	"github.com/manifold-cni/manifold/k8sclient"
	"github.com/manifold-cni/manifold/netconf"
)

// The admission checks (package admission) and ADD must give the same
// verdict, in the same words, on every case below: the seeds of netconf's
// fuzz corpus (FuzzParseNetworksAnnotation's as a pod's networks
// annotation, FuzzParseNetwork's as a NAD's spec.config) and a table of
// the cases the corpus has no target for. ADD runs here up to its
// delegates, against a fake API server that has every NAD the pod names.

// allCapsConf declares every capability an annotation can ask for, so that
// ADD refuses nothing the admission checks cannot see.
const allCapsConf = `{"cniVersion":"1.0.0","plugins":[{"type":"must-not-run",
  "capabilities":{"portMappings":true,"bandwidth":true,"ips":true,"mac":true,"infinibandGUID":true,"deviceID":true}}]}`

// corpusValues reads the first value of each seed of a fuzz target.
func corpusValues(t *testing.T, target string) map[string]string {
	t.Helper()
	dir := filepath.Join("..", "netconf", "testdata", "fuzz", target)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, e := range ents {
		f, err := os.Open(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 1<<20)
		sc.Scan() // "go test fuzz v1"
		sc.Scan()
		f.Close()
		line := sc.Text()
		open := strings.Index(line, "(")
		v, err := strconv.Unquote(strings.TrimSuffix(line[open+1:], ")"))
		if open < 0 || err != nil {
			t.Fatalf("seed %s: cannot read %q: %v", e.Name(), line, err)
		}
		out[e.Name()] = v
	}
	return out
}

// addVerdict runs ADD for a pod with annotations, up to its delegates, with
// the NADs in nads (namespace/name to spec.config) and, for every other NAD
// the pod names, allCapsConf. It returns ADD's code-7 message, "" when ADD
// accepted the pod.
func addVerdict(t *testing.T, annotations map[string]string, nads map[string]string, nadAnnotations map[string]map[string]string) string {
	t.Helper()
	api := &fakeAPI{pod: &k8sclient.Pod{Namespace: "default", Name: "p", UID: "u", Annotations: annotations},
		nads: map[string]string{}, nadAnnotations: nadAnnotations}
	req := netconf.ParsePodRequest(annotations, "default", netconf.DefaultSystemNamespace)
	sels := req.Networks
	if req.Override != nil {
		sels = append(sels, *req.Override)
	}
	for _, s := range sels {
		api.nads[s.Namespace+"/"+s.Name] = allCapsConf
	}
	for k, v := range nads {
		api.nads[k] = v
	}
	p, c := apiCall(t, api, nil)
	pc, err := p.lookupPod(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.networksFor(context.Background(), c, pc)
	if err == nil {
		return ""
	}
	if netconf.Code(err) != 7 {
		t.Fatalf("ADD failed with code %d, not 7: %v", netconf.Code(err), err)
	}
	return errText(err)
}

// errText is the message of a CNI error (Details is never set by netconf).
func errText(err error) string { return err.Error() }

// admissionVerdict is the rules the admission checks give, joined.
func admissionVerdict(ps []admission.Problem) string {
	var rules []string
	for _, p := range ps {
		rules = append(rules, p.Rule)
	}
	return strings.Join(rules, "; ")
}

func sameVerdict(t *testing.T, name, add, adm string) {
	t.Helper()
	if add != adm {
		t.Errorf("%s: ADD says %q, the admission checks say %q", name, add, adm)
	}
}

func TestAdmissionAgreesWithADDOnAnnotations(t *testing.T) {
	seeds := corpusValues(t, "FuzzParseNetworksAnnotation")
	refused := 0
	for name, v := range seeds {
		for _, key := range []string{netconf.AnnotNetworks, netconf.AnnotDefaultNetwork} {
			a := map[string]string{key: v}
			add := addVerdict(t, a, nil, nil)
			adm := admissionVerdict(admission.CheckPodAnnotations("Pod default/p", "metadata.annotations", "default", a, admission.Options{}))
			sameVerdict(t, name+" as "+key, add, adm)
			if add != "" {
				refused++
			}
		}
	}
	// The seeds hold bad values: a check that refused nothing would agree
	// with an ADD that refused nothing.
	if refused < 10 {
		t.Errorf("ADD refused only %d of the seeds", refused)
	}
}

func TestAdmissionAgreesWithADDOnNADConfigs(t *testing.T) {
	refused := 0
	for name, config := range corpusValues(t, "FuzzParseNetwork") {
		a := map[string]string{netconf.AnnotNetworks: "nad"}
		add := addVerdict(t, a, map[string]string{"default/nad": config}, nil)
		adm := admissionVerdict(admission.CheckNAD("NetworkAttachmentDefinition default/nad", "default", "nad", nil, config, admission.Options{}))
		if strings.TrimSpace(config) == "" {
			continue // a file on the node: only ADD can look
		}
		sameVerdict(t, name, add, adm)
		if add != "" {
			refused++
		}
	}
	if refused < 5 {
		t.Errorf("ADD refused only %d of the seeds", refused)
	}
}

// TestAdmissionAgreesWithADDOnNADAnnotations: the device annotations, which
// no fuzz target reads as a NAD's. ADD is run to the point where the NAD's
// annotations are applied (attachmentFor), before any device is looked for.
func TestAdmissionAgreesWithADDOnNADAnnotations(t *testing.T) {
	cases := map[string]map[string]string{
		"resource":               {netconf.AnnotResourceName: "intel.com/sriov_vf"},
		"claim in Multus's form": {netconf.AnnotResourceName: "nics"},
		"bad resource":           {netconf.AnnotResourceName: "intel.com/sriov vf"},
		"resource with two /":    {netconf.AnnotResourceName: "intel.com/a/b"},
		"both sources":           {netconf.AnnotResourceName: "intel.com/x", netconf.AnnotResourceClaim: "nics"},
		"claim":                  {netconf.AnnotResourceClaim: "nics/vf"},
		"bad claim":              {netconf.AnnotResourceClaim: "Nics"},
		"device keys":            {netconf.AnnotResourceClaim: "nics", netconf.AnnotDeviceKeys: `{"device":"dra.example.com/ifName"}`},
		"reserved device key":    {netconf.AnnotResourceClaim: "nics", netconf.AnnotDeviceKeys: `{"type":"ifName"}`},
		"device keys not JSON":   {netconf.AnnotDeviceKeys: `{device:ifName}`},
	}
	_, c := apiCall(t, &fakeAPI{}, nil)
	sel := netconf.NetworkSelection{Namespace: "default", Name: "nad"}
	refused := 0
	for name, a := range cases {
		var add string
		if _, err := attachmentFor(c.log, c.conf, sel, defOf(&k8sclient.NetworkAttachmentDefinition{Metadata: k8sclient.ObjectMeta{Annotations: a}, Spec: k8sclient.NetworkAttachmentDefinitionSpec{Config: allCapsConf}}), true); err != nil {
			add = errText(err)
			refused++
		}
		adm := admissionVerdict(admission.CheckNAD("NetworkAttachmentDefinition default/nad", "default", "nad", a, allCapsConf, admission.Options{}))
		sameVerdict(t, name, add, adm)
	}
	if refused != 6 {
		t.Errorf("ADD refused %d cases, want 6", refused)
	}
}
