package testenv

import (
	"crypto/rand"
	"encoding/hex"
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
	br, err := netlink.LinkByName(bridge)
	if err != nil {
		return nil
	}
	links, err := netlink.LinkList()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range links {
		if l.Attrs().MasterIndex == br.Attrs().Index {
			out = append(out, l.Attrs().Name)
		}
	}
	return out
}
