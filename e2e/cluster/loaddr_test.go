package cluster

import (
	"net"
	"testing"

	"github.com/manifold-cni/manifold/internal/testenv"
	"github.com/vishvananda/netlink"
)

// onLo reports whether ip/32 is an address of lo, and its label.
func onLo(t *testing.T, ip net.IP) (bool, string) {
	t.Helper()
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		t.Fatal(err)
	}
	addrs, err := netlink.AddrList(lo, netlink.FAMILY_V4)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if ones, _ := a.Mask.Size(); a.IP.Equal(ip) && ones == 32 {
			return true, a.Label
		}
	}
	return false, ""
}

// TestLoopbackClaim: ServeAPIToPods's address on lo is removed at the end
// only if it was the package's: one it added, or one a killed run of it
// left (its label says so). One that was there already is used and left.
func TestLoopbackClaim(t *testing.T) {
	testenv.RequirePrivileged(t)
	ip := net.IPv4(127, 31, 41, 59).To4() // in lo's own 127/8: routes nothing new
	if there, _ := onLo(t, ip); there {
		t.Fatalf("%s/32 is on lo before the test; remove it first", ip)
	}
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { netlink.AddrDel(lo, &netlink.Addr{IPNet: &net.IPNet{IP: ip, Mask: net.CIDRMask(32, 32)}}) })
	for _, c := range []struct {
		name      string
		before    string // "": no address; else the label of one there before
		wantOwned bool
	}{
		{"none there: added and removed", "", true},
		{"someone else's: used and left", "lo", false},
		{"a killed run's: taken and removed", loLabel, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.before != "" {
				if err := netlink.AddrAdd(lo, &netlink.Addr{IPNet: &net.IPNet{IP: ip, Mask: net.CIDRMask(32, 32)}, Label: c.before}); err != nil {
					t.Fatal(err)
				}
			}
			addr, owned, err := claimLoopback(ip)
			if err != nil {
				t.Fatal(err)
			}
			if owned != c.wantOwned {
				t.Errorf("claimLoopback owns the address: %v, want %v", owned, c.wantOwned)
			}
			if there, label := onLo(t, ip); !there || (c.before == "" && label != loLabel) {
				t.Errorf("after claimLoopback: on lo %v with label %q, want it there (labelled %q if added)", there, label, loLabel)
			}
			if err := releaseLoopback(addr, owned); err != nil {
				t.Fatal(err)
			}
			if there, _ := onLo(t, ip); there != !c.wantOwned {
				t.Errorf("after releaseLoopback: on lo %v, want %v", there, !c.wantOwned)
			}
			netlink.AddrDel(lo, &netlink.Addr{IPNet: &net.IPNet{IP: ip, Mask: net.CIDRMask(32, 32)}})
		})
	}
}
