package daemon

import (
	"fmt"
	"strconv"
)

// hotplugMode is --hotplug: who changes a running pod's networks when its
// networks annotation changes (docs/hotplug.md, "One owner").
type hotplugMode string

const (
	// hotplugBuiltin: the daemon's own pod watch (the default). /delegate
	// is refused.
	hotplugBuiltin hotplugMode = "builtin"
	// hotplugExternal: a controller of the cluster's (the
	// multus-dynamic-networks-controller) calls /delegate on the Multus
	// socket; the daemon runs no pod watch.
	hotplugExternal hotplugMode = "external"
	// hotplugOff: no hot-plug at all.
	hotplugOff hotplugMode = "off"
)

// String and Set make a flag.Value; IsBoolFlag keeps `--hotplug`,
// `--hotplug=true` and `--hotplug=false` meaning what they meant when the
// flag was a bool (builtin, builtin, off).
func (m *hotplugMode) String() string { return string(*m) }

func (m *hotplugMode) Set(s string) error {
	switch hotplugMode(s) {
	case hotplugBuiltin, hotplugExternal, hotplugOff:
		*m = hotplugMode(s)
		return nil
	}
	if b, err := strconv.ParseBool(s); err == nil {
		*m = hotplugOff
		if b {
			*m = hotplugBuiltin
		}
		return nil
	}
	return fmt.Errorf("%q is not builtin, external or off", s)
}

func (m *hotplugMode) IsBoolFlag() bool { return true }

// owner names who hot-plugs, for a refusal's message.
func (m hotplugMode) owner() string {
	switch m {
	case hotplugBuiltin:
		return "the daemon's own pod watch"
	case hotplugExternal:
		return "an external controller, through /delegate"
	}
	return "nobody: hot-plug is off"
}
