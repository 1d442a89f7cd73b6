package netconf

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// What Multus v4.3.0 reads, in our own words and layout, from its source:
// pkg/types (NetConf, NetworkSelectionElement), pkg/server (the daemon's
// ControllerNetConf), pkg/server/config (MultusConf), cmd/thin_entrypoint and
// cmd/install_multus (their flags), pkg/k8sclient (the annotations), and the
// NetworkStatus of network-attachment-definition-client v1.7.6, which it
// writes. The keys are grouped as docs/compatibility.md groups them.
var multusV430 = map[string][]string{
	"Config keys": {
		// CNI's own, embedded in Multus's NetConf.
		"cniVersion", "name", "type", "capabilities", "ipam", "dns", "prevResult", "cni.dev/valid-attachments",
		// Multus's.
		"runtimeConfig", "confDir", "cniDir", "binDir", "delegates", "clusterNetwork", "defaultNetworks",
		"kubeconfig", "logFile", "logLevel", "logToStderr", "logOptions", "readinessindicatorfile",
		"namespaceIsolation", "globalNamespaces", "auxiliaryCNIChainName", "systemNamespaces",
		"multusNamespace", "retryDeleteOnError",
	},
	"Thick daemon keys": {
		// The daemon's own (ControllerNetConf).
		"chrootDir", "logFile", "logLevel", "logToStderr", "perNodeCertificate", "connectionLimit",
		"metricsPort", "enablePprof", "socketDir",
		// The ones it uses to write the shim's config (MultusConf).
		"binDir", "capabilities", "cniVersion", "logOptions", "name", "clusterNetwork", "namespaceIsolation",
		"globalNamespaces", "readinessindicatorfile", "type", "cniDir", "cniConfigDir", "auxiliaryCNIChainName",
		"daemonSocketDir", "multusConfigFile", "multusMasterCNI", "multusAutoconfigDir", "forceCNIVersion",
		"overrideNetworkName",
	},
	"Installer flags": {
		// thin_entrypoint.
		"--cni-bin-dir", "--cni-conf-dir", "--cni-version", "--multus-conf-file", "--multus-bin-file",
		"--multus-cni-conf-dir", "--skip-multus-binary-copy", "--multus-kubeconfig-file-host",
		"--multus-master-cni-file-name", "--namespace-isolation", "--global-namespaces",
		"--multus-autoconfig-dir", "--multus-log-to-stderr", "--multus-log-level", "--multus-log-file",
		"--override-network-name", "--cleanup-config-on-exit", "--skip-config-watch", "--rename-conf-file",
		"--readiness-indicator-file", "--additional-bin-dir", "--skip-tls-verify", "--force-cni-version", "--help",
		// install_multus, and multus-daemon.
		"--type", "--dest-dir", "--config",
	},
	"Annotations": {
		"k8s.v1.cni.cncf.io/networks", "v1.multus-cni.io/default-network",
		"k8s.v1.cni.cncf.io/network-status", "k8s.v1.cni.cncf.io/resourceName",
	},
	"Selection keys": {
		"name", "namespace", "interface", "interfaceRequest", "ips", "mac", "infiniband-guid",
		"portMappings", "bandwidth", "deviceID", "cni-args", "default-route",
	},
	"Network-status fields": {
		"name", "interface", "ips", "mac", "mtu", "default", "dns", "gateway", "device-info",
	},
}

// compatStatuses are the words of the doc's "manifold" column. Only "same"
// claims that manifold reads the key as Multus does, and shows it;
// "untested" claims the same meaning without a test that shows it; each
// other one is a deliberate difference.
var compatStatuses = []string{"same", "untested", "differs", "installer", "no", "extra"}

// TestCompatibilityDocCoversMultus: every key that Multus v4.3.0 reads is in
// docs/compatibility.md, under its heading, with what manifold does. Where
// the doc says "same", manifold's parser must read the key: a config key is
// one of ConfigKeys, a selection key is one that the annotation parser
// refuses a wrong value of, a status field is one of NetworkStatus's. A key
// manifold does not read must be listed as a difference. Every config and
// daemon key is also in docs/migration.md's table, which says what a
// takeover from Multus does with it.
func TestCompatibilityDocCoversMultus(t *testing.T) {
	doc := compatTables(t, filepath.Join("..", "docs", "compatibility.md"))
	configKeys := ConfigKeys()
	statusFields := map[string]bool{}
	jsonKeys(reflect.TypeOf(NetworkStatus{}), statusFields)
	for section, keys := range multusV430 {
		rows, ok := doc[section]
		if !ok {
			t.Errorf("docs/compatibility.md has no section %q", section)
			continue
		}
		for _, key := range keys {
			status, ok := rows[key]
			switch {
			case !ok:
				t.Errorf("%s: Multus's %q is not in docs/compatibility.md", section, key)
			case status == "extra":
				t.Errorf("%s: %q is Multus's, not an extra of manifold's", section, key)
			case (status == "same" || status == "untested") && section == "Thick daemon keys":
				t.Errorf("%s: %q cannot be the same: manifold's node daemon takes flags, not Multus's daemon config", section, key)
			case status != "same" && status != "untested":
				// A difference, said and explained in the doc.
			case section == "Config keys" && !slices.Contains(configKeys, key):
				t.Errorf("%s: the doc says manifold reads %q as Multus does, but ParseConfig does not read it (ConfigKeys: %v)", section, key, configKeys)
			case section == "Selection keys" && !selectionKeyRead(key):
				t.Errorf("%s: the doc says manifold reads %q as Multus does, but the networks annotation's parser ignores it", section, key)
			case section == "Network-status fields" && !statusFields[key]:
				t.Errorf("%s: the doc says manifold writes %q, but NetworkStatus has no such field", section, key)
			}
		}
		for key, status := range rows {
			if !slices.Contains(keys, key) && status != "extra" {
				t.Errorf("%s: docs/compatibility.md lists %q as Multus's, which this test does not know; add it to multusV430 or mark it extra", section, key)
			}
		}
	}

	migration, err := os.ReadFile(filepath.Join("..", "docs", "migration.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, section := range []string{"Config keys", "Thick daemon keys"} {
		for _, key := range multusV430[section] {
			if !strings.Contains(string(migration), "| `"+key+"` |") {
				t.Errorf("docs/migration.md's table does not say what a takeover does with Multus's %q", key)
			}
		}
	}
}

// TestCompatibilityDocIsChecked: the checks above can fail. A config key
// that manifold does not read, called "same", is caught; so is a selection
// key the parser ignores.
func TestCompatibilityDocIsChecked(t *testing.T) {
	if slices.Contains(ConfigKeys(), "multusMasterCNI") {
		t.Error("ConfigKeys lists a key that Config has no field for")
	}
	for _, k := range []string{"clusterNetwork", "cniVersion", "capabilities", "cni.dev/valid-attachments", "multusCNIDir"} {
		if !slices.Contains(ConfigKeys(), k) {
			t.Errorf("ConfigKeys lacks %q", k)
		}
	}
	if selectionKeyRead("no-such-key") {
		t.Error("selectionKeyRead says the parser reads a key it ignores")
	}
	if !selectionKeyRead("ips") {
		t.Error("selectionKeyRead says the parser ignores ips")
	}
}

// TestCompatibilitySameRowsNameTests: a "same" row of docs/compatibility.md
// is a claim about behaviour, so it names the tests that show it ("shown by
// `TestX`"), each an end-to-end test (e2e/) or a privileged one (a
// *privileged_test.go file) that exists in the repository. A row that
// names none, or a test that is not there, fails.
func TestCompatibilitySameRowsNameTests(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "docs", "compatibility.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range sameRowProblems(string(doc), behaviourTests(t, "..")) {
		t.Error(p)
	}
}

// TestCompatibilityTestGuardFails: the guard above finds a "same" row that
// names no test, one that names a test that does not exist, and one that
// names a unit test.
func TestCompatibilityTestGuardFails(t *testing.T) {
	known := map[string]bool{"TestJSONForm": true}
	doc := "## Selection keys\n\n| key | manifold | notes |\n|---|---|---|\n" +
		"| `ips` | same | shown by `TestJSONForm` |\n" +
		"| `mac` | same | no test |\n" +
		"| `interface` | same | shown by `TestNoSuchTest` |\n" +
		"| `name` | same | shown by `TestCompatibilityDocIsChecked` |\n" +
		"| `bandwidth` | untested | |\n"
	got := sameRowProblems(doc, known)
	if len(got) != 3 || !strings.Contains(got[0], "`mac`") || !strings.Contains(got[1], "TestNoSuchTest") || !strings.Contains(got[2], "TestCompatibilityDocIsChecked") {
		t.Errorf("problems %q, want the rows of mac, interface and name", got)
	}
	if tests := behaviourTests(t, ".."); !tests["TestDropinConfigs"] || !tests["TestEmptyDefaultRoute"] || tests["TestCompatibilityDocIsChecked"] {
		t.Errorf("behaviourTests misses an e2e or privileged test, or counts a unit test")
	}
}

// testNameRE finds the tests a row names.
var testNameRE = regexp.MustCompile("`(Test[A-Za-z0-9_]+)`")

// sameRowProblems lists the "same" rows of doc that name no test, or a test
// that is not in known.
func sameRowProblems(doc string, known map[string]bool) []string {
	row := regexp.MustCompile("^\\| *`?([^|`]+?)`? *\\| *([a-z]+) *\\|")
	var out []string
	section := ""
	for _, line := range strings.Split(doc, "\n") {
		if h, ok := strings.CutPrefix(line, "## "); ok {
			section = strings.TrimSpace(h)
			continue
		}
		m := row.FindStringSubmatch(line)
		if m == nil || m[2] != "same" {
			continue
		}
		names := testNameRE.FindAllStringSubmatch(line, -1)
		if len(names) == 0 {
			out = append(out, fmt.Sprintf("%s: the \"same\" row of `%s` names no test that shows it (\"shown by `TestX`\", an e2e or privileged test); name one, add one, or call the row untested", section, m[1]))
		}
		for _, n := range names {
			if !known[n[1]] {
				out = append(out, fmt.Sprintf("%s: the row of `%s` names %s, which is no e2e or privileged test of the repository", section, m[1], n[1]))
			}
		}
	}
	return out
}

// behaviourTests are the tests that can show behaviour: every func TestX(
// of a _test.go file under root's e2e/, or of a *privileged_test.go file.
func behaviourTests(t *testing.T, root string) map[string]bool {
	t.Helper()
	decl := regexp.MustCompile(`(?m)^func (Test[A-Za-z0-9_]+)\(`)
	out := map[string]bool{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") && path != root {
			return filepath.SkipDir
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") ||
			!(strings.HasPrefix(rel, "e2e"+string(filepath.Separator)) || strings.HasSuffix(path, "privileged_test.go")) {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range decl.FindAllStringSubmatch(string(b), -1) {
			out[m[1]] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// selectionKeyRead says whether the networks annotation's parser reads key:
// it refuses an entry whose key holds a value of the wrong type (a number,
// where every key takes a string, a list or an object).
func selectionKeyRead(key string) bool {
	entry := `[{"name":"a",` + `"` + key + `":42}]`
	if key == "name" {
		entry = `[{"name":42}]`
	}
	_, err := ParseNetworksAnnotation(entry, "default")
	return err != nil
}

// compatTables reads the doc's tables: for each "## " section, each row's
// key (the first cell, without its backticks) and the word in its second.
func compatTables(t *testing.T, path string) map[string]map[string]string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("^\\| *`?([^|`]+?)`? *\\| *([a-z]+) *\\|")
	out := map[string]map[string]string{}
	section := ""
	for _, line := range strings.Split(string(data), "\n") {
		if h, ok := strings.CutPrefix(line, "## "); ok {
			section = strings.TrimSpace(h)
			out[section] = map[string]string{}
			continue
		}
		m := row.FindStringSubmatch(line)
		if section == "" || m == nil || m[1] == "key" {
			continue
		}
		if !slices.Contains(compatStatuses, m[2]) {
			t.Errorf("%s: %q is %q, want one of %v", section, m[1], m[2], compatStatuses)
		}
		if _, dup := out[section][m[1]]; dup {
			t.Errorf("%s: %q is listed twice", section, m[1])
		}
		out[section][m[1]] = m[2]
	}
	return out
}
