package netconf

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"unicode"

	"github.com/containernetworking/cni/pkg/version"
)

// AnnotResourceName names a NAD's device-plugin resource ("intel.com/sriov"),
// or in Multus's form a DRA claim of the pod (a name with no "/";
// docs/devices.md).
const AnnotResourceName = "k8s.v1.cni.cncf.io/resourceName"

// qualifiedNameRE is the name part of an extended resource ("sriov_vf" in
// "intel.com/sriov_vf"), as the API server allows it.
var qualifiedNameRE = regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`)

// NADDevices is what a NAD's annotations say its networks draw a device
// from: the device-plugin resource or DRA claim of AnnotResourceName, the
// DRA claim of AnnotResourceClaim, and the plugin keys of AnnotDeviceKeys
// ("" for none).
type NADDevices struct {
	Resource   string
	Claim      string
	DeviceKeys string
}

// NADDevicesOf reads the three annotations of a NAD.
func NADDevicesOf(annotations map[string]string) NADDevices {
	return NADDevices{
		Resource:   strings.TrimSpace(annotations[AnnotResourceName]),
		Claim:      strings.TrimSpace(annotations[AnnotResourceClaim]),
		DeviceKeys: strings.TrimSpace(annotations[AnnotDeviceKeys]),
	}
}

// Check is ADD's check of a NAD's device annotations, for its network
// (named as in errors): the resource well formed, the device's source named
// once, the claim and the device keys parsed. It returns the device keys
// (nil for none); every error is a CNI error with code 7. The admission
// webhook and `manifold validate` call it too (package admission).
func (d NADDevices) Check(network string) (map[string]string, error) {
	if d.Claim != "" && d.Resource != "" {
		return nil, Invalid("network %s: its NAD has both %s %q and %s %q; name the device's source once", network, AnnotResourceName, d.Resource, AnnotResourceClaim, d.Claim)
	}
	if d.Resource != "" {
		if err := checkResourceName(d.Resource); err != nil {
			return nil, Invalid("network %s: %v", network, err)
		}
	}
	if d.Claim != "" {
		if _, err := ParseClaimRef(d.Claim); err != nil {
			return nil, Invalid("network %s: %v", network, err)
		}
	}
	if d.DeviceKeys == "" {
		return nil, nil
	}
	keys, err := ParseDeviceKeys(d.DeviceKeys)
	if err != nil {
		return nil, Invalid("network %s: %v", network, err)
	}
	return keys, nil
}

// maxAttributeLen is the longest string value a DRA device attribute may
// have (resource.k8s.io's StringValue).
const maxAttributeLen = 64

// checkResourceName checks AnnotResourceName: a device plugin's extended
// resource is "<DNS subdomain>/<name>", the name at most 63 characters of
// letters, digits, '-', '_' and '.'; a name without a "/" is a DRA claim of
// the pod (Multus v4.3.0's form: a Kubernetes object name) or the value of
// the k8s.cni.cncf.io/resourceName attribute of the pod's DRA devices (the
// SR-IOV DRA driver's form, "sriov_nic_1": any string of at most 64
// characters). Anything else names no device the pod could ever have been
// given.
func checkResourceName(v string) error {
	domain, name, qualified := strings.Cut(v, "/")
	if !qualified {
		if checkSubdomain(AnnotResourceName, v) == nil {
			return nil
		}
		if len(v) <= maxAttributeLen && !strings.ContainsFunc(v, func(r rune) bool { return unicode.IsSpace(r) || !unicode.IsPrint(r) }) {
			return nil
		}
		return fmt.Errorf("%q %q is neither a DRA claim's name (a DNS-1123 subdomain) nor a DRA device attribute's value (at most %d printable characters, no white space)", AnnotResourceName, truncate(v, 80), maxAttributeLen)
	}
	if len(domain) > maxSubdomainLen || !dnsSubdomainRE.MatchString(domain) ||
		len(name) > maxLabelLen || !qualifiedNameRE.MatchString(name) {
		return fmt.Errorf("%q %q is not a device plugin's resource (<domain>/<name>: a DNS subdomain, then at most %d characters of letters, digits, '-', '_' and '.') nor a DRA claim's name", AnnotResourceName, truncate(v, 80), maxLabelLen)
	}
	return nil
}

// NetworkOfNAD is ADD's reading of a NAD's spec.config: parsed as a conf or
// a conflist, in a cniVersion manifold supports, and held to the rules for
// networks from a NAD
// (CheckPluginTypes with allowed). An empty spec.config is looked up by the
// NAD's name in confDirs, in order. nad is "namespace/name"; every error is a CNI error
// with code 7 that names it.
func NetworkOfNAD(nad, name, config string, confDirs []string, allowed []string) (*Network, error) {
	n, err := networkForNAD(nad, name, config, confDirs)
	if err != nil {
		return nil, err
	}
	// libcni reads a delegate's result only in these versions: a network in
	// another fails at its first delegate, after a half-done ADD.
	if !slices.Contains(version.All.SupportedVersions(), n.RunVersion()) {
		return nil, Invalid("network %s: cniVersion %q is not one manifold supports (%s)", nad, truncate(n.CNIVersion, 32), strings.Join(version.All.SupportedVersions(), ", "))
	}
	if err := CheckPluginTypes(nad, n, allowed); err != nil {
		return nil, err
	}
	return n, nil
}
