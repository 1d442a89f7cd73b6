package delegate

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/manifold-cni/manifold/netconf"
)

// passthruPath is what FindInPath answers for netconf.PassthruType: no file
// has this path, and only passthruExec's ExecPlugin takes it.
const passthruPath = "manifold:" + netconf.PassthruType

// passthruExec runs the first plugin of an auxiliary chain
// (netconf.AuxiliaryNetwork) inside manifold, and every other plugin with
// next. The chain's plugins are chained plugins (tuning, …), which refuse
// to run without a prevResult; Multus puts its own "passthru" binary first
// for that, whose ADD answers an empty result. manifold answers it itself,
// so that no binary has to be installed for it, and the chain runs the same
// on every node.
type passthruExec struct {
	next invoke.Exec
}

// withPassthru wraps exec; a nil exec is libcni's own.
func withPassthru(exec invoke.Exec) invoke.Exec {
	if exec == nil {
		exec = &invoke.DefaultExec{RawExec: &invoke.RawExec{}, PluginDecoder: version.PluginDecoder{}}
	}
	return &passthruExec{next: exec}
}

func (p *passthruExec) FindInPath(plugin string, paths []string) (string, error) {
	if plugin == netconf.PassthruType {
		return passthruPath, nil
	}
	return p.next.FindInPath(plugin, paths)
}

func (p *passthruExec) Decode(jsonBytes []byte) (version.PluginInfo, error) {
	return p.next.Decode(jsonBytes)
}

// ExecPlugin answers ADD with an empty result of the config's cniVersion,
// VERSION with the versions libcni knows, and every other verb (DEL,
// CHECK, GC, STATUS) with success: there is nothing to undo or check.
func (p *passthruExec) ExecPlugin(ctx context.Context, pluginPath string, stdin []byte, environ []string) ([]byte, error) {
	if pluginPath != passthruPath {
		return p.next.ExecPlugin(ctx, pluginPath, stdin, environ)
	}
	switch command(environ) {
	case "ADD":
		var conf struct {
			CNIVersion string `json:"cniVersion"`
		}
		if err := json.Unmarshal(stdin, &conf); err != nil {
			return nil, fmt.Errorf("%s: decode config: %w", netconf.PassthruType, err)
		}
		return json.Marshal(map[string]any{"cniVersion": conf.CNIVersion})
	case "VERSION":
		return json.Marshal(map[string]any{"cniVersion": version.Current(), "supportedVersions": version.All.SupportedVersions()})
	}
	return nil, nil
}

// command is CNI_COMMAND in environ.
func command(environ []string) string {
	for _, kv := range environ {
		if v, ok := strings.CutPrefix(kv, "CNI_COMMAND="); ok {
			return v
		}
	}
	return ""
}
