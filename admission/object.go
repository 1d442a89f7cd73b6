package admission

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/manifold-cni/manifold/k8sclient"
)

// meta is what the checks read of an object's metadata.
type meta struct {
	Name         string            `json:"name"`
	GenerateName string            `json:"generateName"`
	Namespace    string            `json:"namespace"`
	Annotations  map[string]string `json:"annotations"`
}

type template struct {
	Metadata meta `json:"metadata"`
}

// object is the part of any manifest the checks read; which fields count
// depends on the kind.
type object struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   meta   `json:"metadata"`
	Spec       struct {
		Config      json.RawMessage `json:"config"`
		Template    *template       `json:"template"`
		JobTemplate *struct {
			Spec struct {
				Template *template `json:"template"`
			} `json:"spec"`
		} `json:"jobTemplate"`
	} `json:"spec"`
	Template *template         `json:"template"`
	Items    []json.RawMessage `json:"items"`
}

// Kinds lists the kinds CheckObject checks, by group ("" for core).
var Kinds = map[string][]string{
	"":                 {"Pod", "PodTemplate", "ReplicationController"},
	"apps":             {"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet"},
	"batch":            {"Job", "CronJob"},
	k8sclient.NADGroup: {k8sclient.NADKind},
}

// Checked reports whether CheckObject checks objects of group and kind.
func Checked(group, kind string) bool {
	for _, k := range Kinds[group] {
		if k == kind {
			return true
		}
	}
	return false
}

func groupOf(apiVersion string) string {
	if g, _, ok := strings.Cut(apiVersion, "/"); ok {
		return g
	}
	return ""
}

// CheckObject checks one object in JSON: a NAD, a pod, a workload's pod
// template (Kinds), or each item of a List. Other kinds have no problem.
// namespace stands in for an object that names none (the request's, or
// "default"). It fails only when data is not a JSON object.
func CheckObject(data []byte, namespace string, o Options) ([]Problem, error) {
	var obj object
	if err := json.Unmarshal(data, &obj); err != nil {
		return nil, fmt.Errorf("not a Kubernetes object: %w", err)
	}
	ns := obj.Metadata.Namespace
	if ns == "" {
		ns = namespace
	}
	name := obj.Metadata.Name
	if name == "" && obj.Metadata.GenerateName != "" {
		name = obj.Metadata.GenerateName + "*"
	}
	id := obj.Kind + " " + name
	if ns != "" {
		id = obj.Kind + " " + ns + "/" + name
	}
	group := groupOf(obj.APIVersion)
	if strings.HasSuffix(obj.Kind, "List") && obj.Items != nil {
		var out []Problem
		for i, item := range obj.Items {
			ps, err := CheckObject(item, namespace, o)
			if err != nil {
				return nil, fmt.Errorf("items[%d]: %w", i, err)
			}
			for _, p := range ps {
				p.Field = fmt.Sprintf("items[%d].%s", i, p.Field)
				out = append(out, p)
			}
		}
		return out, nil
	}
	if !Checked(group, obj.Kind) {
		return nil, nil
	}
	switch obj.Kind {
	case k8sclient.NADKind:
		var config string
		if len(obj.Spec.Config) > 0 && string(obj.Spec.Config) != "null" {
			if err := json.Unmarshal(obj.Spec.Config, &config); err != nil {
				return []Problem{{Object: id, Field: "spec.config", Value: cut(string(obj.Spec.Config)), Rule: "spec.config is not a string holding the network's CNI config as JSON"}}, nil
			}
		}
		return CheckNAD(id, ns, obj.Metadata.Name, obj.Metadata.Annotations, config, o), nil
	case "Pod":
		return CheckPodAnnotations(id, "metadata.annotations", ns, obj.Metadata.Annotations, o), nil
	case "PodTemplate":
		if obj.Template == nil {
			return nil, nil
		}
		return CheckPodAnnotations(id, "template.metadata.annotations", ns, obj.Template.Metadata.Annotations, o), nil
	case "CronJob":
		if obj.Spec.JobTemplate == nil || obj.Spec.JobTemplate.Spec.Template == nil {
			return nil, nil
		}
		return CheckPodAnnotations(id, "spec.jobTemplate.spec.template.metadata.annotations", ns, obj.Spec.JobTemplate.Spec.Template.Metadata.Annotations, o), nil
	default:
		if obj.Spec.Template == nil {
			return nil, nil
		}
		return CheckPodAnnotations(id, "spec.template.metadata.annotations", ns, obj.Spec.Template.Metadata.Annotations, o), nil
	}
}
