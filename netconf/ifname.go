package netconf

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
)

// MaxIfNameLen is the kernel's limit for an interface name (IFNAMSIZ less the NUL).
const MaxIfNameLen = 15

// ValidateIfName checks a name the way the kernel's dev_valid_name does, so a bad
// name is refused before any plugin runs instead of half-way through an ADD.
func ValidateIfName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("interface name is empty")
	case len(name) > MaxIfNameLen:
		return fmt.Errorf("interface name %q is %d characters, more than %d", name, len(name), MaxIfNameLen)
	case name == "." || name == "..":
		return fmt.Errorf("interface name %q is not allowed", name)
	}
	for _, r := range name {
		if r == '/' || r == ':' || unicode.IsSpace(r) || r < 0x20 || r == 0x7f {
			return fmt.Errorf("interface name %q contains %q, which is not allowed", name, r)
		}
	}
	// The kernel tests bytes, and its isspace() counts 0xa0 as a space, so a
	// UTF-8 name such as "à" (c3 a0) is refused there even though no rune of it
	// is a space.
	if i := strings.IndexByte(name, 0xa0); i >= 0 {
		return fmt.Errorf("interface name %q contains the byte 0xa0 at %d, which the kernel takes for a space", name, i)
	}
	return nil
}

// AssignIfNames fills in IfName for every attachment, following DESIGN §5: the
// default network (position 0) gets podIfName, an attachment at position i keeps
// the name it asked for or else gets "net<i>". Two attachments with the same name
// are an error that names the second one.
func AssignIfNames(atts []Attachment, podIfName string) error {
	if err := ValidateIfName(podIfName); err != nil {
		return fmt.Errorf("CNI_IFNAME: %w", err)
	}
	taken := make(map[string]string, len(atts))
	for i := range atts {
		a := &atts[i]
		switch {
		case i == 0:
			// The default-network annotation may carry an "interface"; the runtime
			// chose CNI_IFNAME, so a different name is refused, not ignored.
			if a.IfName != "" && a.IfName != podIfName {
				return fmt.Errorf("network %s: the default network always gets CNI_IFNAME %q; it cannot ask for interface %q", a.DisplayName(), podIfName, a.IfName)
			}
			a.IfName = podIfName
		case a.Auxiliary:
			// It makes no interface, so it never takes a name a pod's
			// network asked for: net<i>, as Multus names it, or the next
			// free net<k> (docs/configuration.md).
			a.IfName = freeNetName(atts, i)
		case a.IfName == "":
			a.IfName = "net" + strconv.Itoa(i)
		}
		if err := ValidateIfName(a.IfName); err != nil {
			return fmt.Errorf("network %s: %w", a.DisplayName(), err)
		}
		if prev, dup := taken[a.IfName]; dup {
			return fmt.Errorf("network %s: interface name %q is already taken by %s", a.DisplayName(), a.IfName, prev)
		}
		// The default network is named by its role: which network it is
		// depends on the node's config, and the message should read the same
		// wherever it is checked (package admission).
		if i == 0 {
			taken[a.IfName] = "the default network (CNI_IFNAME)"
		} else {
			taken[a.IfName] = "network " + a.DisplayName()
		}
	}
	return nil
}

// freeNetName is net<k> for the first k >= i that no attachment of atts uses
// or will be given.
func freeNetName(atts []Attachment, i int) string {
	for k := i; ; k++ {
		name := "net" + strconv.Itoa(k)
		used := false
		for j := range atts {
			if j == i {
				continue
			}
			if atts[j].IfName == name || (atts[j].IfName == "" && j != 0 && name == "net"+strconv.Itoa(j)) {
				used = true
				break
			}
		}
		if !used {
			return name
		}
	}
}
