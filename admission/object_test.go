package admission

import (
	"strings"
	"testing"
)

func TestCheckObjectFindsEachKindsAnnotations(t *testing.T) {
	bad := `"k8s.v1.cni.cncf.io/networks":"net-a@this-is-far-too-long"`
	cases := []struct {
		name, obj, object, field string
	}{
		{"pod", `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":"ns","annotations":{` + bad + `}}}`,
			"Pod ns/p", "metadata.annotations[k8s.v1.cni.cncf.io/networks]"},
		{"deployment", `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"d"},"spec":{"template":{"metadata":{"annotations":{` + bad + `}}}}}`,
			"Deployment default/d", "spec.template.metadata.annotations[k8s.v1.cni.cncf.io/networks]"},
		{"statefulset", `{"apiVersion":"apps/v1","kind":"StatefulSet","metadata":{"name":"s"},"spec":{"template":{"metadata":{"annotations":{` + bad + `}}}}}`,
			"StatefulSet default/s", "spec.template.metadata.annotations[k8s.v1.cni.cncf.io/networks]"},
		{"daemonset", `{"apiVersion":"apps/v1","kind":"DaemonSet","metadata":{"name":"s"},"spec":{"template":{"metadata":{"annotations":{` + bad + `}}}}}`,
			"DaemonSet default/s", "spec.template.metadata.annotations[k8s.v1.cni.cncf.io/networks]"},
		{"replicaset", `{"apiVersion":"apps/v1","kind":"ReplicaSet","metadata":{"name":"s"},"spec":{"template":{"metadata":{"annotations":{` + bad + `}}}}}`,
			"ReplicaSet default/s", "spec.template.metadata.annotations[k8s.v1.cni.cncf.io/networks]"},
		{"job", `{"apiVersion":"batch/v1","kind":"Job","metadata":{"generateName":"j-"},"spec":{"template":{"metadata":{"annotations":{` + bad + `}}}}}`,
			"Job default/j-*", "spec.template.metadata.annotations[k8s.v1.cni.cncf.io/networks]"},
		{"cronjob", `{"apiVersion":"batch/v1","kind":"CronJob","metadata":{"name":"c"},"spec":{"jobTemplate":{"spec":{"template":{"metadata":{"annotations":{` + bad + `}}}}}}}`,
			"CronJob default/c", "spec.jobTemplate.spec.template.metadata.annotations[k8s.v1.cni.cncf.io/networks]"},
		{"list", `{"apiVersion":"v1","kind":"List","items":[{"apiVersion":"v1","kind":"ConfigMap"},{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","annotations":{` + bad + `}}}]}`,
			"Pod default/p", "items[1].metadata.annotations[k8s.v1.cni.cncf.io/networks]"},
		{"nad", `{"apiVersion":"k8s.cni.cncf.io/v1","kind":"NetworkAttachmentDefinition","metadata":{"name":"n","namespace":"ns"},"spec":{"config":"{\"cniVersion\":\"1.0.0\",\"type\":\"multus\"}"}}`,
			"NetworkAttachmentDefinition ns/n", "spec.config"},
		{"nad config not a string", `{"apiVersion":"k8s.cni.cncf.io/v1","kind":"NetworkAttachmentDefinition","metadata":{"name":"n"},"spec":{"config":{"type":"bridge"}}}`,
			"NetworkAttachmentDefinition default/n", "spec.config"},
	}
	for _, tc := range cases {
		ps, err := CheckObject([]byte(tc.obj), "default", Options{})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if len(ps) != 1 || ps[0].Object != tc.object || ps[0].Field != tc.field || ps[0].Rule == "" {
			t.Errorf("%s: problems %+v, want one on %s %s", tc.name, ps, tc.object, tc.field)
		}
	}
}

func TestCheckObjectPassesGoodAndOtherObjects(t *testing.T) {
	for _, obj := range []string{
		`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","annotations":{"k8s.v1.cni.cncf.io/networks":"net-a@data, other/net-b"}}}`,
		`{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"d"},"spec":{"template":{"metadata":{}}}}`,
		`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","annotations":{"k8s.v1.cni.cncf.io/networks":"@@"}}}`,
		`{"apiVersion":"example.com/v1","kind":"Deployment","spec":{"template":{"metadata":{"annotations":{"k8s.v1.cni.cncf.io/networks":"@@"}}}}}`,
		`{"apiVersion":"k8s.cni.cncf.io/v1","kind":"NetworkAttachmentDefinition","metadata":{"name":"n"},"spec":{"config":""}}`,
	} {
		ps, err := CheckObject([]byte(obj), "default", Options{})
		if err != nil || len(ps) != 0 {
			t.Errorf("%s: problems %+v, %v", obj, ps, err)
		}
	}
	if _, err := CheckObject([]byte(`[1]`), "", Options{}); err == nil {
		t.Error("a JSON array was taken for an object")
	}
}

func TestAllowedPluginTypesApply(t *testing.T) {
	nad := `{"apiVersion":"k8s.cni.cncf.io/v1","kind":"NetworkAttachmentDefinition","metadata":{"name":"n"},"spec":{"config":"{\"cniVersion\":\"1.0.0\",\"type\":\"macvlan\"}"}}`
	ps, _ := CheckObject([]byte(nad), "default", Options{AllowedPluginTypes: []string{"bridge"}})
	if len(ps) != 1 || !strings.Contains(ps[0].Rule, "allowedPluginTypes") {
		t.Errorf("problems %+v, want macvlan refused by allowedPluginTypes", ps)
	}
}

func TestInterfaceProblemsNameTheirAnnotation(t *testing.T) {
	for _, tc := range []struct {
		annotations map[string]string
		field       string
	}{
		{map[string]string{"v1.multus-cni.io/default-network": "ovn@eth1", "k8s.v1.cni.cncf.io/networks": "a@net1"}, "v1.multus-cni.io/default-network"},
		{map[string]string{"v1.multus-cni.io/default-network": "ovn", "k8s.v1.cni.cncf.io/networks": "a@eth0"}, "k8s.v1.cni.cncf.io/networks"},
	} {
		ps := CheckPodAnnotations("Pod ns/p", "metadata.annotations", "ns", tc.annotations, Options{})
		if len(ps) != 1 || ps[0].Field != "metadata.annotations["+tc.field+"]" {
			t.Errorf("%v: problems %+v, want one on %s", tc.annotations, ps, tc.field)
		}
	}
}
