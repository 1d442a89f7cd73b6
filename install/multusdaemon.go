package install

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// A thick Multus keeps its settings in its daemon's ConfigMap, not in the
// shim's file on the node: the daemon lays every key of daemon-config.json
// over the shim's config on each call. Taking such a node over, the
// installer reads that one ConfigMap by name (deployments/rbac.yaml grants
// get on it and nothing else) and carries its keys as from a thin config
// (multuskeys.go).
const (
	// DefaultMultusDaemonConfig is the ConfigMap of Multus's own thick
	// DaemonSet (its deployments/multus-daemonset-thick.yml).
	DefaultMultusDaemonConfig = "kube-system/multus-daemon-config"
	// multusDaemonConfigKey is the ConfigMap's key that Multus's DaemonSet
	// mounts as the daemon's --config.
	multusDaemonConfigKey = "daemon-config.json"
	// multusDaemonCopyName is the copy of it kept in the credentials dir
	// once read, so that the installer carries the same keys after Multus's
	// ConfigMap is deleted (the last step of docs/migration.md).
	multusDaemonCopyName = "multus-daemon-config.json"
)

// multusDaemonRef is --multus-daemon-config as a namespace and a name; ok is
// false when it is empty, which turns the read off.
func (o *Options) multusDaemonRef() (namespace, name string, ok bool) {
	namespace, name, _ = strings.Cut(o.MultusDaemonConfig, "/")
	return namespace, name, o.MultusDaemonConfig != ""
}

// validateMultusDaemonRef checks --multus-daemon-config: empty, or
// namespace/name, each a name the API server accepts.
func (o *Options) validateMultusDaemonRef() error {
	if o.MultusDaemonConfig == "" {
		return nil
	}
	namespace, name, found := strings.Cut(o.MultusDaemonConfig, "/")
	if !found || len(validation.IsDNS1123Label(namespace)) > 0 || len(validation.IsDNS1123Subdomain(name)) > 0 {
		return fmt.Errorf("flag --multus-daemon-config %q must be namespace/name of a ConfigMap, or empty", o.MultusDaemonConfig)
	}
	return nil
}

// multusDaemonConfig is the thick Multus daemon's config: read from its
// ConfigMap once per run, else from the copy an earlier read left.
//
// required is set when the node's conf dir holds a thick Multus's shim
// config: without the daemon's config the takeover would drop every
// setting of the node's Multus, so not finding it is an error, which names
// the ways out. Otherwise Multus's daemon may have removed its config, as
// it does when it stops, before this installer ran: the ConfigMap, when
// there is one, is still that node's Multus's settings. Not finding it
// then means no thick Multus, said once, and not asked again in this run.
func (in *installer) multusDaemonConfig(required bool) (map[string]any, string, error) {
	if in.multusDaemon != nil {
		return in.multusDaemon, in.multusDaemonFrom, nil
	}
	namespace, name, ok := in.o.multusDaemonRef()
	if !ok || (!required && in.multusDaemonAbsent) {
		return nil, "", nil
	}
	where := fmt.Sprintf("ConfigMap %s/%s", namespace, name)
	copyPath := filepath.Join(in.o.credDir(), multusDaemonCopyName)
	data, apiErr := in.readMultusDaemonConfigMap(namespace, name)
	if apiErr == nil {
		conf, err := decodeMultusDaemonConfig(data)
		if err != nil {
			return nil, "", fmt.Errorf("%s, key %s: %w", where, multusDaemonConfigKey, err)
		}
		if !sameContent(copyPath, data) {
			if err := WriteFileAtomic(copyPath, data, 0o600); err != nil {
				return nil, "", fmt.Errorf("keep a copy of Multus's daemon config: %w", err)
			}
		}
		in.multusDaemon, in.multusDaemonFrom = conf, where
		in.log.Info("read the thick Multus daemon's config", "from", where, "key", multusDaemonConfigKey, "copy", copyPath)
		return conf, where, nil
	}
	saved, err := readCapped(copyPath)
	switch {
	case err == nil:
	case !required:
		in.multusDaemonAbsent = true
		in.log.Info("no thick Multus daemon's config to carry over", "from", where, "reason", apiErr)
		return nil, "", nil
	default:
		if !errors.Is(err, os.ErrNotExist) {
			apiErr = errors.Join(apiErr, err)
		}
		return nil, "", fmt.Errorf("this node runs a thick Multus, whose settings are in its daemon's %s (key %s), and the installer cannot read them: %w; "+
			"grant the installer get on it (deployments/rbac.yaml), point --multus-daemon-config at the right one, or give --multus-daemon-config= to take the node over without them",
			where, multusDaemonConfigKey, apiErr)
	}
	conf, err := decodeMultusDaemonConfig(saved)
	if err != nil {
		return nil, "", fmt.Errorf("the copy %s of Multus's daemon config: %w", copyPath, err)
	}
	from := "the copy " + copyPath + " of " + where
	in.log.Warn("cannot read the thick Multus daemon's config; using the copy kept when it was read", "from", where, "copy", copyPath, "error", apiErr)
	in.multusDaemon, in.multusDaemonFrom = conf, from
	return conf, from, nil
}

// readMultusDaemonConfigMap gets the one ConfigMap, as the installer's
// ServiceAccount, and returns its daemon-config.json.
func (in *installer) readMultusDaemonConfigMap(namespace, name string) ([]byte, error) {
	newClient := in.apiClient
	if in.o.newClient != nil {
		newClient = in.o.newClient
	}
	client, err := newClient()
	if err != nil {
		return nil, fmt.Errorf("make an API client: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), uninstallCheckTimeout)
	defer cancel()
	cm, err := client.CoreV1().ConfigMaps(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	data, ok := cm.Data[multusDaemonConfigKey]
	if !ok {
		return nil, fmt.Errorf("it has no key %s", multusDaemonConfigKey)
	}
	return []byte(data), nil
}

// decodeMultusDaemonConfig reads daemon-config.json: one JSON object.
func decodeMultusDaemonConfig(data []byte) (map[string]any, error) {
	var conf map[string]any
	if err := json.Unmarshal(bytes.TrimSpace(data), &conf); err != nil || conf == nil {
		return nil, errors.New("not a JSON object")
	}
	return conf, nil
}

// MultusSocketFileName is the file in the credentials dir in which the
// installer names Multus's socket when it takes over a thick Multus: the
// node daemon, with --multus-socket=auto, serves Multus's daemon API there
// (docs/thick-mode.md), for the clients of Multus's daemon (the
// multus-dynamic-networks-controller) and any multus-shim config left.
const MultusSocketFileName = "multus-socket"

// multusSocketPath is the host path of a thick Multus's socket: its shim
// config's daemonSocketDir, else Multus's default, /run/multus/, with
// multus.sock in it.
func multusSocketPath(m *multusConfig) string {
	dir, _ := m.plugin["daemonSocketDir"].(string)
	if dir == "" || !filepath.IsAbs(dir) {
		dir = "/run/multus/"
	}
	return filepath.Join(dir, "multus.sock")
}

// noteMultusSocket writes MultusSocketFileName for a thick Multus taken
// over; a node with no thick Multus gets none. The file is kept when Multus
// is gone: the controller still calls that socket.
func (in *installer) noteMultusSocket() error {
	m := in.multus
	if m == nil || !m.shim {
		return nil
	}
	path := filepath.Join(in.o.credDir(), MultusSocketFileName)
	data := []byte(multusSocketPath(m) + "\n")
	if sameContent(path, data) {
		return nil
	}
	if err := WriteFileAtomic(path, data, 0o644); err != nil {
		return fmt.Errorf("name Multus's socket for the node daemon: %w", err)
	}
	in.log.Info("took over a thick Multus: the node daemon serves Multus's daemon API on its socket", "socket", multusSocketPath(m), "file", path)
	return nil
}
