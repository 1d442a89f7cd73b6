package testenv

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/version"
)

// MultusEntry is one network as Multus attached it (issue 19): the config it ran,
// and what its record says about it.
type MultusEntry struct {
	Conf string // a conf or a conflist, as Multus handed it to libcni
	Name string // the record's "Name": "namespace/name" for a NAD
	// ifName, when set, is an interface name the pod requested
	// (ifnameRequest); else eth0 for the first entry and net<i> after it.
	IfName string
	MAC    string
	IPs    []string
	// reencoded: the record's Bytes is Multus's re-encoding of its typed
	// ConfList, which drops the plugins' own fields (clusterNetwork or
	// defaultNetworks given as a conflist file or a dir). withConfigList adds
	// CNINetworkConfigList, as v4.3.0 does.
	Reencoded, WithConfigList bool
	// garbage makes the record's Bytes unreadable and drops the cache entry:
	// an entry that neither source explains.
	Garbage bool
}

func (e MultusEntry) isList() bool {
	var m map[string]json.RawMessage
	_ = json.Unmarshal([]byte(e.Conf), &m)
	return m["plugins"] != nil
}

// MultusAttach does what Multus's ADD does for pod: each entry through libcni
// with dir as its cache dir, the plugins from binDir, with Multus's interface
// names and CNI_ARGS, and then (Multus writes it first; the order does not
// matter here) its record, in its format (../shared/fixtures/multus-v4.3.0).
func MultusAttach(t testing.TB, binDir, dir string, pod *Pod, entries []MultusEntry) {
	t.Helper()
	ctx := context.Background()
	exec := &invoke.DefaultExec{RawExec: &invoke.RawExec{Stderr: os.Stderr}, PluginDecoder: version.PluginDecoder{}}
	cni := libcni.NewCNIConfigWithCacheDir([]string{binDir}, dir, exec)
	var record []map[string]any
	for i, e := range entries {
		ifName := e.IfName
		switch {
		case ifName != "":
		case i == 0:
			ifName = "eth0"
		default:
			ifName = fmt.Sprintf("net%d", i)
		}
		args := [][2]string{{"IgnoreUnknown", "true"}}
		args = append(args, pod.Args...)
		args = append(args, [2]string{"IgnoreUnknown", "1"})
		args = append(args, pod.Args...)
		caps := map[string]any{}
		if e.MAC != "" {
			args = append(args, [2]string{"MAC", e.MAC})
			caps["mac"] = e.MAC
		}
		if len(e.IPs) > 0 {
			args = append(args, [2]string{"IP", strings.Join(e.IPs, ",")})
			caps["ips"] = e.IPs
		}
		rt := &libcni.RuntimeConf{ContainerID: pod.ContainerID, NetNS: pod.NetNS, IfName: ifName, Args: args, CapabilityArgs: caps}
		var top map[string]any
		if err := json.Unmarshal([]byte(e.Conf), &top); err != nil {
			t.Fatal(err)
		}
		if e.isList() {
			list := Conf(t, []byte(e.Conf))
			if _, err := cni.AddNetworkList(ctx, list, rt); err != nil {
				t.Fatalf("Multus's ADD of %s: %v", e.Name, err)
			}
		} else {
			// Multus attaches a single conf as such, and libcni caches it so;
			// the test must leave on disk what Multus leaves.
			//lint:ignore SA1019 the deprecated form is the one Multus used
			c, err := libcni.ConfFromBytes([]byte(e.Conf))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := cni.AddNetwork(ctx, c, rt); err != nil {
				t.Fatalf("Multus's ADD of %s: %v", e.Name, err)
			}
		}
		record = append(record, recordEntry(t, e, top))
		if e.Garbage {
			if err := os.Remove(filepath.Join(dir, "results", top["name"].(string)+"-"+pod.ContainerID+"-"+ifName)); err != nil {
				t.Fatal(err)
			}
		}
	}
	b, err := json.Marshal(record)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, pod.ContainerID), b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// recordEntry is one element of Multus's record (Go's encoding of its
// DelegateNetConf), as the fixtures in ../shared/fixtures/multus-v4.3.0 show.
func recordEntry(t testing.TB, e MultusEntry, top map[string]any) map[string]any {
	typedPlugin := func(p map[string]any) map[string]any {
		out := map[string]any{"type": p["type"], "ipam": map[string]any{}}
		if ipam, ok := p["ipam"].(map[string]any); ok && ipam["type"] != nil {
			out["ipam"] = map[string]any{"type": ipam["type"]}
		}
		if p["capabilities"] != nil {
			out["capabilities"] = p["capabilities"]
		}
		return out
	}
	rec := map[string]any{"Name": e.Name, "IsFilterV4Gateway": false, "IsFilterV6Gateway": false,
		"CNINetworkConfigList": map[string]any{"Name": "", "CNIVersion": "", "DisableCheck": false, "DisableGC": false, "LoadOnlyInlinedPlugins": false, "Plugins": nil, "Bytes": nil}}
	bytes := []byte(e.Conf)
	if e.isList() {
		var plugins []any
		var raw []string
		for _, p := range top["plugins"].([]any) {
			plugins = append(plugins, typedPlugin(p.(map[string]any)))
			pb, _ := json.Marshal(p)
			raw = append(raw, base64.StdEncoding.EncodeToString(pb))
		}
		typed := map[string]any{"cniVersion": top["cniVersion"], "name": top["name"], "plugins": plugins}
		rec["Conf"] = map[string]any{"cniVersion": top["cniVersion"], "name": top["name"], "ipam": map[string]any{}}
		rec["ConfList"] = typed
		if e.Reencoded {
			bytes, _ = json.Marshal(typed)
		}
		if e.WithConfigList {
			var ps []any
			for i, p := range plugins {
				ps = append(ps, map[string]any{"Network": p, "Bytes": raw[i]})
			}
			rec["CNINetworkConfigList"] = map[string]any{"Name": top["name"], "CNIVersion": top["cniVersion"], "DisableCheck": false,
				"DisableGC": false, "LoadOnlyInlinedPlugins": false, "Plugins": ps, "Bytes": base64.StdEncoding.EncodeToString([]byte(e.Conf))}
		}
	} else {
		c := typedPlugin(top)
		c["cniVersion"], c["name"] = top["cniVersion"], top["name"]
		rec["Conf"] = c
		rec["ConfList"] = map[string]any{}
	}
	if e.Garbage {
		bytes = []byte("this is not a config")
	}
	rec["Bytes"] = base64.StdEncoding.EncodeToString(bytes)
	if e.IfName != "" {
		rec["ifnameRequest"] = e.IfName
	}
	if e.MAC != "" {
		rec["macRequest"] = e.MAC
	}
	if len(e.IPs) > 0 {
		rec["ipRequest"] = e.IPs
	}
	return rec
}
