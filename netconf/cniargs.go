package netconf

import (
	"fmt"
	"strings"
)

// CNI_ARGS keys that container runtimes send for Kubernetes pods.
const (
	ArgPodNamespace   = "K8S_POD_NAMESPACE"
	ArgPodName        = "K8S_POD_NAME"
	ArgPodUID         = "K8S_POD_UID"
	ArgPodInfraID     = "K8S_POD_INFRA_CONTAINER_ID"
	argIgnoreUnknown  = "IgnoreUnknown"
	maxCNIArgsEntries = 256
)

// PodRef names the pod that a CNI call is for. It is empty when the runtime did not
// say (a plain CNI call with no Kubernetes behind it).
type PodRef struct {
	Namespace, Name, UID string
}

// String is "namespace/name", or "" when unknown.
func (p PodRef) String() string {
	if p.Name == "" {
		return ""
	}
	return p.Namespace + "/" + p.Name
}

// ParseCNIArgs splits CNI_ARGS ("K=V;K=V") into pairs, keeping their order.
func ParseCNIArgs(s string) ([][2]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	parts := strings.Split(s, ";")
	if len(parts) > maxCNIArgsEntries {
		return nil, fmt.Errorf("CNI_ARGS has %d entries, more than %d", len(parts), maxCNIArgsEntries)
	}
	out := make([][2]string, 0, len(parts))
	for _, p := range parts {
		if p == "" {
			continue
		}
		k, v, ok := strings.Cut(p, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("CNI_ARGS entry %q is not KEY=VALUE", truncate(p, 60))
		}
		out = append(out, [2]string{k, v})
	}
	return out, nil
}

// PodFromArgs reads the pod's namespace, name and UID from parsed CNI_ARGS.
func PodFromArgs(args [][2]string) PodRef {
	var p PodRef
	for _, kv := range args {
		switch kv[0] {
		case ArgPodNamespace:
			p.Namespace = kv[1]
		case ArgPodName:
			p.Name = kv[1]
		case ArgPodUID:
			p.UID = kv[1]
		}
	}
	return p
}

// DelegateArgs builds the CNI_ARGS for one delegate: IgnoreUnknown=1 first, so a
// plugin that does not know IP= or MAC= does not fail on them, then the runtime's
// own keys, then the attachment's extras (which replace a runtime key of the same
// name).
func DelegateArgs(runtime, extra [][2]string) [][2]string {
	out := make([][2]string, 0, len(runtime)+len(extra)+1)
	out = append(out, [2]string{argIgnoreUnknown, "1"})
	overridden := make(map[string]bool, len(extra))
	for _, kv := range extra {
		overridden[kv[0]] = true
	}
	for _, kv := range runtime {
		if kv[0] == argIgnoreUnknown || overridden[kv[0]] {
			continue
		}
		out = append(out, kv)
	}
	return append(out, extra...)
}
