package cluster

import (
	"errors"
	"fmt"
	"net"
	"os"

	"github.com/vishvananda/netlink"
)

// loLabel marks the addresses that this package puts on the host's lo, so
// that a run can tell its own (one that a killed run left behind) from an
// address that someone else put there.
const loLabel = "lo:manifoldtest"

// claimLoopback makes ip/32 an address of lo. It reports whether the address
// is this package's to remove: true when it added the address, or when the
// address has loLabel (a killed run's); false when the address was already
// there under another label, which is then used and left alone.
func claimLoopback(ip net.IP) (addr *netlink.Addr, owned bool, err error) {
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return nil, false, err
	}
	addrs, err := netlink.AddrList(lo, netlink.FAMILY_V4)
	if err != nil {
		return nil, false, fmt.Errorf("addresses of lo: %w", err)
	}
	for _, a := range addrs {
		if ones, _ := a.Mask.Size(); a.IP.Equal(ip) && ones == 32 {
			return &a, a.Label == loLabel, nil
		}
	}
	addr = &netlink.Addr{IPNet: &net.IPNet{IP: ip, Mask: net.CIDRMask(32, 32)}, Label: loLabel}
	if err := netlink.AddrAdd(lo, addr); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, false, fmt.Errorf("put %s on lo: %w", ip, err)
	}
	return addr, true, nil
}

// releaseLoopback removes an address of lo that claimLoopback owned; it
// leaves one that it did not.
func releaseLoopback(addr *netlink.Addr, owned bool) error {
	if addr == nil || !owned {
		return nil
	}
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return err
	}
	if err := netlink.AddrDel(lo, addr); err != nil {
		return fmt.Errorf("remove %s from lo: %w", addr.IPNet, err)
	}
	return nil
}
