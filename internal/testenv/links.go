package testenv

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"testing"

	"github.com/vishvananda/netlink"
)

// UniqueName returns prefix plus random hex, at most 15 characters, so parallel
// tests and leftovers of a crashed run never collide.
func UniqueName(prefix string) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	name := prefix + hex.EncodeToString(b)
	if len(name) > 15 {
		name = name[:15]
	}
	return name
}

// VethParent creates a veth pair in the host namespace, up, to serve as a macvlan
// parent (this kernel has no dummy links). Both ends are deleted when the test ends.
func VethParent(t testing.TB) string {
	t.Helper()
	name := UniqueName("mfp")
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}, PeerName: name + "x"}
	if len(veth.PeerName) > 15 {
		veth.PeerName = UniqueName("mfq")
	}
	if err := netlink.LinkAdd(veth); err != nil {
		t.Fatalf("create veth %s: %v", name, err)
	}
	t.Cleanup(func() { DeleteLink(name) })
	for _, n := range []string{name, veth.PeerName} {
		l, err := netlink.LinkByName(n)
		if err != nil {
			t.Fatal(err)
		}
		if err := netlink.LinkSetUp(l); err != nil {
			t.Fatal(err)
		}
	}
	return name
}

// DeleteLink removes a host link if it exists.
func DeleteLink(name string) {
	if l, err := netlink.LinkByName(name); err == nil {
		_ = netlink.LinkDel(l)
	}
}

// HostLinkExists reports whether a link of that name is in the host namespace.
func HostLinkExists(name string) bool {
	_, err := netlink.LinkByName(name)
	return err == nil
}

// BridgePorts lists the links enslaved to a host bridge.
func BridgePorts(t testing.TB, bridge string) []string {
	t.Helper()
	ports, err := HostBridgePorts(bridge)
	if err != nil {
		t.Fatal(err)
	}
	return ports
}

// HostBridgePorts lists the links enslaved to a host bridge (none when there
// is no such bridge).
func HostBridgePorts(bridge string) ([]string, error) {
	br, err := netlink.LinkByName(bridge)
	if err != nil {
		return nil, nil
	}
	links, err := LinkList()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, l := range links {
		if l.Attrs().MasterIndex == br.Attrs().Index {
			out = append(out, l.Attrs().Name)
		}
	}
	return out, nil
}

// LinkList is netlink.LinkList in the current namespace, asked again when
// the kernel interrupted the dump because links changed meanwhile (other
// tests on the machine make and remove links all the time): a check must
// not fail, or pass, on a partial list.
func LinkList() ([]netlink.Link, error) {
	for attempt := 1; ; attempt++ {
		links, err := netlink.LinkList()
		if !errors.Is(err, netlink.ErrDumpInterrupted) || attempt == 10 {
			return links, err
		}
	}
}
