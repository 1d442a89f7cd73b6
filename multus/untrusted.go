package multus

import (
	"fmt"

	"github.com/manifold-cni/manifold/netconf"
)

// Multus's files are untrusted input (docs/security.md, "What Multus left on
// the node"). Multus v3 and v4 save a pod's record before any delegate runs,
// with "ifnameRequest" copied from the pod's annotation and the NAD's config
// as its author wrote it, so a pod that failed under Multus leaves whatever
// its author chose; a damaged file does the same. Each attachment read from
// them is held to the checks that manifold applies to a pod's annotation and
// to a NAD before it becomes an attachment; one that fails is reported as
// Unexplained, so that it is never run: the caller deletes everything else
// and then fails, naming it.

// checkAttachment applies those checks to one attachment. nadRules holds the
// network to the rules for networks from a NAD (netconf.CheckPluginTypes
// with the node's allowedPluginTypes); every network is refused a
// meta-plugin, whatever its origin.
func checkAttachment(att *netconf.Attachment, nadRules bool, opts Options) error {
	// libcni makes the interface name part of the path of the attachment's
	// cache entry, results/<network>-<container>-<ifname>, which it removes
	// at DEL without a check of its own.
	if err := netconf.ValidateIfName(att.IfName); err != nil {
		return fmt.Errorf("not run: %v (it would become part of a file path)", err)
	}
	// The network name and the plugin types are checked by the parse, as
	// for a NAD: a plain binary name, a name libcni accepts.
	n, err := netconf.ParseNetwork(att.Config, att.Network)
	if err != nil {
		return fmt.Errorf("not run: %v", err)
	}
	var allowed []string
	if nadRules {
		allowed = opts.AllowedPluginTypes
	}
	if err := netconf.CheckPluginTypes(att.DisplayName(), n, allowed); err != nil {
		return fmt.Errorf("not run: %v", err)
	}
	return nil
}
