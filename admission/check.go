// Package admission checks Kubernetes objects as they are written: a
// NetworkAttachmentDefinition, a pod's annotations, and the pod template of
// a workload, with the very functions ADD calls (package netconf), so that
// the webhook, `manifold validate` and ADD never disagree (docs/validation.md).
// No check reads another object: a NAD may be created after its pods.
package admission

import (
	"errors"
	"fmt"
	"strings"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/manifold-cni/manifold/netconf"
)

// Problem is one rule an object breaks: the object ("Deployment ns/web"),
// the field ("spec.template.metadata.annotations[k8s.v1.cni.cncf.io/networks]"),
// its value (cut to maxValue bytes) and the rule, in the words of ADD's
// code-7 error.
type Problem struct {
	Object string `json:"object"`
	Field  string `json:"field"`
	Value  string `json:"value"`
	Rule   string `json:"rule"`
}

func (p Problem) String() string {
	return fmt.Sprintf("%s: %s %q: %s", p.Object, p.Field, p.Value, p.Rule)
}

// maxValue bounds the value a Problem quotes.
const maxValue = 200

// Options are the node's settings that ADD's checks depend on.
type Options struct {
	// AllowedPluginTypes is the nodes' allowedPluginTypes (nil: any type
	// but a meta-plugin).
	AllowedPluginTypes []string
	// SystemNamespace is the nodes' multusNamespace, where the
	// default-network annotation's NAD lives unless it names a namespace
	// (netconf.DefaultSystemNamespace when empty).
	SystemNamespace string
}

func (o Options) systemNamespace() string {
	if o.SystemNamespace == "" {
		return netconf.DefaultSystemNamespace
	}
	return o.SystemNamespace
}

// rule is the message of a CNI error (its code-7 text), or the error's text.
func rule(err error) string {
	var e *types.Error
	if errors.As(err, &e) {
		return e.Msg
	}
	return err.Error()
}

func cut(v string) string {
	if len(v) > maxValue {
		return v[:maxValue] + "..."
	}
	return v
}

// CheckNAD checks a NAD as ADD reads it for a pod's network: spec.config
// (netconf.NetworkOfNAD, with o.AllowedPluginTypes; an empty one names a
// file on the node, which only the node can check) and the device
// annotations (netconf.NADDevices.Check). object names the NAD in problems.
func CheckNAD(object, namespace, name string, annotations map[string]string, config string, o Options) []Problem {
	nad := namespace + "/" + name
	var out []Problem
	if strings.TrimSpace(config) != "" {
		if _, err := netconf.NetworkOfNAD(nad, name, config, nil, o.AllowedPluginTypes); err != nil {
			out = append(out, Problem{Object: object, Field: "spec.config", Value: cut(config), Rule: rule(err)})
		}
	}
	if _, err := netconf.NADDevicesOf(annotations).Check(nad); err != nil {
		out = append(out, Problem{Object: object, Field: "metadata.annotations", Value: cut(deviceAnnotations(annotations)), Rule: rule(err)})
	}
	return out
}

// deviceAnnotations quotes the device annotations a NAD has, for a Problem.
func deviceAnnotations(a map[string]string) string {
	var parts []string
	for _, k := range []string{netconf.AnnotResourceName, netconf.AnnotResourceClaim, netconf.AnnotDeviceKeys} {
		if v, ok := a[k]; ok {
			parts = append(parts, k+"="+v)
		}
	}
	return strings.Join(parts, " ")
}

// CheckPodAnnotations checks the annotations of a pod, or of a workload's
// pod template, as ADD parses them (netconf.ParsePodRequest): both forms of
// the networks annotation, the default-network annotation, and the
// interface names they ask for (netconf.PodRequest.CheckIfNames, for the
// runtimes' netconf.RuntimeIfName). prefix is the path of the annotations
// ("metadata.annotations", "spec.template.metadata.annotations").
func CheckPodAnnotations(object, prefix, namespace string, annotations map[string]string, o Options) []Problem {
	if namespace == "" {
		namespace = "default"
	}
	field := func(k string) string { return prefix + "[" + k + "]" }
	req := netconf.ParsePodRequest(annotations, namespace, o.systemNamespace())
	var out []Problem
	if req.OverrideErr != nil {
		out = append(out, Problem{Object: object, Field: field(netconf.AnnotDefaultNetwork), Value: cut(annotations[netconf.AnnotDefaultNetwork]), Rule: rule(req.OverrideErr)})
	}
	if req.NetworksErr != nil {
		out = append(out, Problem{Object: object, Field: field(netconf.AnnotNetworks), Value: cut(annotations[netconf.AnnotNetworks]), Rule: rule(req.NetworksErr)})
	}
	if len(out) > 0 {
		return out
	}
	for i := range req.Networks {
		// ParseNetworksAnnotation validates each selection; ADD validates it
		// again with its NAD (AttachmentForSelection), which the webhook
		// cannot read. The same call, without the NAD:
		if err := req.Networks[i].Validate(); err != nil {
			out = append(out, Problem{Object: object, Field: field(netconf.AnnotNetworks), Value: cut(annotations[netconf.AnnotNetworks]), Rule: rule(err)})
		}
	}
	if err := req.CheckIfNames(netconf.RuntimeIfName); err != nil {
		k := netconf.AnnotNetworks
		// AssignIfNames's only complaint about position 0, the override.
		if strings.Contains(rule(err), "the default network always gets CNI_IFNAME") {
			k = netconf.AnnotDefaultNetwork
		}
		out = append(out, Problem{Object: object, Field: field(k), Value: cut(annotations[k]), Rule: rule(err)})
	}
	return out
}
