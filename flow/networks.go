package flow

import (
	"context"
	"strconv"
	"strings"

	"github.com/manifold-cni/manifold/k8sclient"
	"github.com/manifold-cni/manifold/netconf"
)

// nadSource looks up NetworkAttachmentDefinitions. It is nil when manifold runs
// with no API server.
type nadSource interface {
	// NAD returns what manifold uses of namespace/name, and found=false when
	// the NAD does not exist.
	NAD(ctx context.Context, namespace, name string) (def nadDef, found bool, err error)
}

// resolveRef resolves a clusterNetwork or defaultNetworks entry (DESIGN §2): a NAD
// of that name in the system namespace; else a config in confDir with that name;
// a value with a "/" is a file or directory path.
func resolveRef(ctx context.Context, conf *netconf.Config, nads nadSource, key, ref string) (netconf.Attachment, error) {
	ref, byName := refName(ref)
	if !byName {
		n, err := netconf.LoadNetworkPath(ref)
		if err != nil {
			return netconf.Attachment{}, netconf.Invalid("key %q: %v", key, err)
		}
		return netconf.NewAttachment(n, ""), nil
	}
	if nads != nil {
		def, found, err := nads.NAD(ctx, conf.MultusNamespace, ref)
		if err != nil {
			return netconf.Attachment{}, err
		}
		if found {
			sel := netconf.NetworkSelection{Name: ref, Namespace: conf.MultusNamespace}
			att, _, err := netconf.AttachmentForSelection(sel, def.config, conf)
			if err != nil {
				return netconf.Attachment{}, err
			}
			if err := def.drawFrom(&att); err != nil {
				return netconf.Attachment{}, err
			}
			return att, nil
		}
	}
	n, dir, err := netconf.FindNetworkInDirs(conf.ConfDirs(), ref)
	if err != nil {
		return netconf.Attachment{}, netconf.Invalid("key %q: look up network %q in %s: %v", key, ref, dir, err)
	}
	if n == nil {
		return netconf.Attachment{}, netconf.Invalid("key %q: network %q is neither a NAD in namespace %s nor a config in %s", key, ref, conf.MultusNamespace, strings.Join(conf.ConfDirs(), " or "))
	}
	return netconf.NewAttachment(n, ""), nil
}

// staticNetworks is the part of a pod's delegate list that needs no pod: the
// default network (clusterNetwork, or the inline delegates) and, for pods outside
// the system namespaces, defaultNetworks.
func staticNetworks(ctx context.Context, conf *netconf.Config, nads nadSource, pod netconf.PodRef) ([]netconf.Attachment, error) {
	var atts []netconf.Attachment
	if conf.ClusterNetwork != "" {
		att, err := resolveRef(ctx, conf, nads, "clusterNetwork", conf.ClusterNetwork)
		if err != nil {
			return nil, err
		}
		atts = append(atts, att)
	} else {
		for i, raw := range conf.Delegates {
			n, err := netconf.ParseNetwork(raw, "")
			if err != nil {
				return nil, netconf.Invalid("key \"delegates\"[%d]: %v", i, err)
			}
			atts = append(atts, netconf.NewAttachment(n, ""))
		}
	}
	if !getsDefaultNetworks(conf, pod.Namespace) {
		return atts, nil
	}
	for i, ref := range conf.DefaultNetworks {
		att, err := resolveRef(ctx, conf, nads, "defaultNetworks["+strconv.Itoa(i)+"]", ref)
		if err != nil {
			return nil, err
		}
		atts = append(atts, att)
	}
	return atts, nil
}

// defaultNetwork is the node's default network as the config names it
// (clusterNetwork, or delegates[0]), before any pod's override: what STATUS,
// GC and a DEL with nothing recorded work with.
func defaultNetwork(ctx context.Context, conf *netconf.Config, nads nadSource) (netconf.Attachment, error) {
	if conf.ClusterNetwork != "" {
		return resolveRef(ctx, conf, nads, "clusterNetwork", conf.ClusterNetwork)
	}
	if len(conf.Delegates) == 0 {
		return netconf.Attachment{}, netconf.Invalid("neither \"clusterNetwork\" nor \"delegates\" is set")
	}
	n, err := netconf.ParseNetwork(conf.Delegates[0], "")
	if err != nil {
		return netconf.Attachment{}, netconf.Invalid("key \"delegates\"[0]: %v", err)
	}
	return netconf.NewAttachment(n, ""), nil
}

// nodeNADs is the NAD source of the verbs that have no pod (STATUS, GC, a DEL
// with nothing recorded): nil when no kubeconfig is configured, or when no
// entry in refs names a network (a path needs no API). Each NAD is read at
// most once per call, when it is looked up.
func (p *Plugin) nodeNADs(conf *netconf.Config, refs ...string) (nadSource, error) {
	if !k8sclient.Configured(conf.Kubeconfig) {
		return nil, nil
	}
	byName := false
	for _, ref := range refs {
		if name, ok := refName(ref); ok && name != "" {
			byName = true
		}
	}
	if !byName {
		return nil, nil
	}
	api, err := p.newAPI(conf)
	if err != nil {
		return nil, netconf.Invalid("%v", err)
	}
	return newNADCache(api, p.nadMemory, conf.Kubeconfig), nil
}

// refName trims a clusterNetwork or defaultNetworks entry and reports whether it
// names a network (a NAD, or a config in confDir) rather than a path.
func refName(ref string) (string, bool) {
	ref = strings.TrimSpace(ref)
	return ref, !strings.Contains(ref, "/")
}

// getsDefaultNetworks reports whether a pod in podNamespace gets defaultNetworks:
// pods in the system namespaces do not ("" is a pod the runtime did not name).
func getsDefaultNetworks(conf *netconf.Config, podNamespace string) bool {
	return podNamespace == "" || !conf.IsSystemNamespace(podNamespace)
}

// staticNADKeys are the NADs that staticNetworks will look up: the clusterNetwork
// and defaultNetworks entries given by name, in multusNamespace. They do not
// depend on the pod, so ADD reads them while it reads the pod.
func staticNADKeys(conf *netconf.Config, podNamespace string) []nadKey {
	var keys []nadKey
	add := func(ref string) {
		if name, byName := refName(ref); byName && name != "" {
			keys = append(keys, nadKey{conf.MultusNamespace, name})
		}
	}
	add(conf.ClusterNetwork)
	if getsDefaultNetworks(conf, podNamespace) {
		for _, ref := range conf.DefaultNetworks {
			add(ref)
		}
	}
	return keys
}
