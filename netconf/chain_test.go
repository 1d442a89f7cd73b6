package netconf

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"

	"github.com/containernetworking/cni/libcni"
)

// writeFiles writes name → body under dir, making subdirectories.
func writeTree(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// pluginTypes lists the types of a conflist's plugins, in order.
func pluginTypes(t *testing.T, conflist []byte) []string {
	t.Helper()
	var types []string
	for _, p := range pluginArgs(t, conflist) {
		types = append(types, p["type"].(string))
	}
	return types
}

// TestChainAsLibcni: a conflist read from a file gets the .conf files of the
// subdirectory named after its network, in file-name order, after its own
// plugins: the list libcni's NetworkConfFromFile gives for the same file.
// Other extensions, subdirectories and other networks' directories are not
// read.
func TestChainAsLibcni(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{
		"10-pod.conflist":           `{"cniVersion":"1.0.0","name":"podnet","plugins":[{"type":"bridge","bridge":"cni0"}]}`,
		"podnet/20-tune.conf":       `{"cniVersion":"1.0.0","name":"x","type":"tuning","sysctl":{"net.ipv4.conf.IFNAME.arp_filter":"1"}}`,
		"podnet/10-portmap.conf":    `{"type":"portmap","capabilities":{"portMappings":true}}`,
		"podnet/30-ignored.json":    `{"type":"json-is-not-read"}`,
		"podnet/40-ignored.CONF":    `{"type":"upper-case-is-not-read"}`,
		"podnet/nested.conf/a.conf": `{"type":"nested-is-not-read"}`,
		"othernet/a.conf":           `{"type":"other-network"}`,
	})
	path := filepath.Join(dir, "10-pod.conflist")
	n, err := LoadNetworkFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"bridge", "portmap", "tuning"}
	if !reflect.DeepEqual(n.Types, want) || !reflect.DeepEqual(pluginTypes(t, n.Bytes), want) {
		t.Errorf("types %v, conflist %s; want %v", n.Types, n.Bytes, want)
	}
	lib, err := libcni.NetworkConfFromFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var libTypes []string
	for _, p := range lib.Plugins {
		libTypes = append(libTypes, p.Network.Type)
	}
	if !reflect.DeepEqual(libTypes, want) {
		t.Errorf("libcni's NetworkConfFromFile gives %v, manifold %v", libTypes, want)
	}
	if !n.Capabilities["portMappings"] {
		t.Errorf("capabilities %v lack the chained portmap's", n.Capabilities)
	}
	// The stored conflist holds the whole chain: libcni reads it back, from
	// bytes alone, with the same plugins (what the record gives DEL).
	back, err := libcni.NetworkConfFromBytes(n.Bytes)
	if err != nil || len(back.Plugins) != 3 || back.Plugins[2].Network.Type != "tuning" {
		t.Fatalf("stored conflist %s reads back as %+v, %v", n.Bytes, back, err)
	}
	if !strings.Contains(string(back.Plugins[2].Bytes), "arp_filter") {
		t.Errorf("chained plugin lost its keys: %s", back.Plugins[2].Bytes)
	}

	// FindNetworkInDir (networks in confDir, a NAD with an empty spec.config)
	// and LoadNetworkPath (a directory) chain the same way.
	for name, load := range map[string]func() (*Network, error){
		"FindNetworkInDir": func() (*Network, error) { return FindNetworkInDir(dir, "podnet") },
		"LoadNetworkPath":  func() (*Network, error) { return LoadNetworkPath(dir) },
		"empty spec.config": func() (*Network, error) {
			att, _, err := AttachmentForSelection(NetworkSelection{Name: "podnet", Namespace: "ns"}, "", &Config{ConfDir: dir})
			return &Network{Bytes: att.Config, Types: pluginTypes(t, att.Config)}, err
		},
	} {
		got, err := load()
		if err != nil || !reflect.DeepEqual(got.Types, want) {
			t.Errorf("%s: %v, %v; want types %v", name, got, err, want)
		}
	}
}

// TestChainOptOut: loadOnlyInlinedPlugins, as a boolean or a string in any
// case, turns the chain off; a value libcni refuses is an error; a single
// plugin config and a network without a directory get no chain.
func TestChainOptOut(t *testing.T) {
	for _, v := range []string{`true`, `"TRUE"`, `"true"`} {
		dir := t.TempDir()
		writeTree(t, dir, map[string]string{
			"a.conflist":    `{"cniVersion":"1.0.0","name":"net","loadOnlyInlinedPlugins":` + v + `,"plugins":[{"type":"bridge"}]}`,
			"net/t.conf":    `{"type":"tuning"}`,
			"single.conf":   `{"cniVersion":"1.0.0","name":"one","type":"ptp"}`,
			"one/t.conf":    `{"type":"tuning"}`,
			"lone.conflist": `{"cniVersion":"1.0.0","name":"lone","plugins":[{"type":"ptp"}]}`,
		})
		for file, want := range map[string][]string{"a.conflist": {"bridge"}, "single.conf": {"ptp"}, "lone.conflist": {"ptp"}} {
			n, err := LoadNetworkFile(filepath.Join(dir, file))
			if err != nil || !reflect.DeepEqual(n.Types, want) {
				t.Errorf("loadOnlyInlinedPlugins %s, %s: %+v, %v; want types %v", v, file, n, err, want)
			}
		}
	}
	for _, v := range []string{`"yes"`, `1`, `null`} {
		dir := t.TempDir()
		writeTree(t, dir, map[string]string{"a.conflist": `{"cniVersion":"1.0.0","name":"net","loadOnlyInlinedPlugins":` + v + `,"plugins":[{"type":"bridge"}]}`})
		if _, err := LoadNetworkFile(filepath.Join(dir, "a.conflist")); err == nil || !strings.Contains(err.Error(), "loadOnlyInlinedPlugins") {
			t.Errorf("loadOnlyInlinedPlugins %s: %v, want an error naming the key", v, err)
		}
	}
}

// TestChainRefusesUnsafeEntries: what the chain directory holds is checked
// as node state: a symlink (to a file or as the directory itself), a FIFO, a
// file over the size cap, a plugin type or IPAM type that is a path, a file
// with no type, and too many files each fail the network, naming the file;
// none of them hangs the call.
func TestChainRefusesUnsafeEntries(t *testing.T) {
	conflist := `{"cniVersion":"1.0.0","name":"net","plugins":[{"type":"bridge"}]}`
	tests := []struct {
		name    string
		prepare func(t *testing.T, chain string)
		mention string
	}{
		{"symlink", func(t *testing.T, chain string) {
			target := filepath.Join(t.TempDir(), "t.conf")
			writeTree(t, filepath.Dir(target), map[string]string{"t.conf": `{"type":"tuning"}`})
			if err := os.Symlink(target, filepath.Join(chain, "a.conf")); err != nil {
				t.Fatal(err)
			}
		}, "a.conf"},
		{"fifo", func(t *testing.T, chain string) {
			if err := syscall.Mkfifo(filepath.Join(chain, "a.conf"), 0o600); err != nil {
				t.Fatal(err)
			}
		}, "a.conf"},
		{"huge", func(t *testing.T, chain string) {
			writeTree(t, chain, map[string]string{"a.conf": `{"type":"tuning","pad":"` + strings.Repeat("x", MaxConfigBytes) + `"}`})
		}, "a.conf"},
		{"type is a path", func(t *testing.T, chain string) {
			writeTree(t, chain, map[string]string{"a.conf": `{"type":"../../tmp/evil"}`})
		}, "a.conf"},
		{"ipam type is a path", func(t *testing.T, chain string) {
			writeTree(t, chain, map[string]string{"a.conf": `{"type":"tuning","ipam":{"type":"/tmp/evil"}}`})
		}, "a.conf"},
		{"no type", func(t *testing.T, chain string) {
			writeTree(t, chain, map[string]string{"a.conf": `{"sysctl":{}}`})
		}, "a.conf"},
		{"not an object", func(t *testing.T, chain string) {
			writeTree(t, chain, map[string]string{"a.conf": `["tuning"]`})
		}, "a.conf"},
		{"too many", func(t *testing.T, chain string) {
			files := map[string]string{}
			for i := 0; i <= MaxChainPlugins; i++ {
				files[strings.Repeat("a", i+1)+".conf"] = `{"type":"tuning"}`
			}
			writeTree(t, chain, files)
		}, "more than"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			writeTree(t, dir, map[string]string{"a.conflist": conflist})
			chain := filepath.Join(dir, "net")
			if err := os.Mkdir(chain, 0o755); err != nil {
				t.Fatal(err)
			}
			tt.prepare(t, chain)
			n, err := LoadNetworkFile(filepath.Join(dir, "a.conflist"))
			if err == nil || !strings.Contains(err.Error(), tt.mention) {
				t.Fatalf("got %+v, %v; want an error mentioning %q", n, err, tt.mention)
			}
			// A NAD with an empty spec.config that names it fails with code 7.
			_, _, err = AttachmentForSelection(NetworkSelection{Name: "net", Namespace: "ns"}, "", &Config{ConfDir: dir})
			if err == nil {
				t.Fatal("empty spec.config: no error")
			}
			wantCode7(t, err, "ns/net", tt.mention)
		})
	}

	t.Run("directory is a symlink", func(t *testing.T) {
		dir, elsewhere := t.TempDir(), t.TempDir()
		writeTree(t, dir, map[string]string{"a.conflist": conflist})
		writeTree(t, elsewhere, map[string]string{"t.conf": `{"type":"tuning"}`})
		if err := os.Symlink(elsewhere, filepath.Join(dir, "net")); err != nil {
			t.Fatal(err)
		}
		if _, err := LoadNetworkFile(filepath.Join(dir, "a.conflist")); err == nil || !strings.Contains(err.Error(), "symlink") {
			t.Errorf("got %v, want an error saying the chain directory is a symlink", err)
		}
	})
}

// TestConfDirFIFO: a FIFO with a config's name in the conf dir is refused
// instead of blocking the call.
func TestConfDirFIFO(t *testing.T) {
	dir := t.TempDir()
	if err := syscall.Mkfifo(filepath.Join(dir, "a.conflist"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadNetworkFile(filepath.Join(dir, "a.conflist")); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("got %v, want an error saying it is not a regular file", err)
	}
}
