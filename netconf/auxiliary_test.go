package netconf

import (
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestAuxiliaryNetwork: auxiliaryCNIChainName makes a network of that name
// whose plugins are the in-process passthru and then the .conf files of the
// directory of that name next to clusterNetwork's file, in file-name order,
// in manifold's cniVersion. No directory, or no .conf in it, is no chain;
// clusterNetwork given by name is an error, as under Multus; so is a bad
// file, naming it.
func TestAuxiliaryNetwork(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{
		"10-pod.conflist":   `{"cniVersion":"1.0.0","name":"podnet","plugins":[{"type":"bridge"}]}`,
		"aux/20-rec.conf":   `{"type":"recorder"}`,
		"aux/10-tune.conf":  `{"cniVersion":"0.4.0","name":"mytuning","type":"tuning","sysctl":{"net.ipv4.conf.eth0.arp_filter":"1"}}`,
		"aux/notes.txt":     `not a config`,
		"empty/readme.json": `{"type":"not-read"}`,
		"broken/a.conf":     `{"type":"/usr/bin/evil"}`,
	})
	cluster := filepath.Join(dir, "10-pod.conflist")
	conf := &Config{ClusterNetwork: cluster, AuxiliaryCNIChainName: "aux"}
	conf.CNIVersion = "1.1.0"
	n, err := AuxiliaryNetwork(conf)
	if err != nil {
		t.Fatal(err)
	}
	if n == nil || n.Name != "aux" || n.CNIVersion != "1.1.0" {
		t.Fatalf("network %+v", n)
	}
	if want := []string{PassthruType, "tuning", "recorder"}; !reflect.DeepEqual(n.Types, want) {
		t.Errorf("types %v, want %v", n.Types, want)
	}
	for _, name := range []string{"", "missing", "empty"} {
		conf.AuxiliaryCNIChainName = name
		if n, err := AuxiliaryNetwork(conf); n != nil || err != nil {
			t.Errorf("auxiliaryCNIChainName %q: %+v, %v; want no chain", name, n, err)
		}
	}
	conf.AuxiliaryCNIChainName = "broken"
	if _, err := AuxiliaryNetwork(conf); err == nil {
		t.Error("a chained type that is a path: no error")
	} else {
		wantCode7(t, err, "auxiliaryCNIChainName", "a.conf", "/usr/bin/evil")
	}
	conf.AuxiliaryCNIChainName, conf.ClusterNetwork = "aux", "k8s-pod-network"
	if _, err := AuxiliaryNetwork(conf); err == nil {
		t.Error("clusterNetwork by name: no error")
	} else {
		wantCode7(t, err, "auxiliaryCNIChainName", "clusterNetwork", "k8s-pod-network")
	}
}

// TestAuxiliaryChainNameChecked: the key becomes a path, so it must be a
// valid network name.
func TestAuxiliaryChainNameChecked(t *testing.T) {
	for _, name := range []string{"../etc", "a/b", ".hidden"} {
		_, err := ParseConfig([]byte(`{"cniVersion":"1.0.0","clusterNetwork":"/etc/cni/net.d/a.conflist","auxiliaryCNIChainName":"` + name + `"}`))
		if err == nil || !strings.Contains(err.Error(), "auxiliaryCNIChainName") {
			t.Errorf("%q: %v, want an error naming the key", name, err)
		}
	}
}

// TestAuxiliaryIfName: the auxiliary chain is named net<i> by its position,
// as Multus names it, but never takes a name a pod's network asked for.
func TestAuxiliaryIfName(t *testing.T) {
	atts := []Attachment{{Network: "def"}, {Network: "a", IfName: "net2"}, {Network: "aux", Auxiliary: true}}
	if err := AssignIfNames(atts, "eth0"); err != nil {
		t.Fatal(err)
	}
	if atts[2].IfName != "net3" {
		t.Errorf("auxiliary chain on %q, want net3 (net2 is taken)", atts[2].IfName)
	}
	atts = []Attachment{{Network: "def"}, {Network: "a"}, {Network: "aux", Auxiliary: true}}
	if err := AssignIfNames(atts, "eth0"); err != nil || atts[2].IfName != "net2" {
		t.Errorf("auxiliary chain on %q (%v), want net2", atts[2].IfName, err)
	}
}
