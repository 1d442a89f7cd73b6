package netconf

import (
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"strings"
	"unicode"
)

// Kubernetes name rules (DNS-1123), written out here so that netconf needs no
// apimachinery. A label is one DNS component; a subdomain is labels joined by dots.
var (
	dnsLabelRE     = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	dnsSubdomainRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
)

const (
	maxLabelLen     = 63
	maxSubdomainLen = 253
	maxDeviceIDLen  = 256
)

// Validate checks every field of a selection, as DESIGN §4 asks. Errors name the
// field (by its annotation key) and the bad value. ParseNetworksAnnotation calls
// it; AttachmentForSelection calls it again, because callers may also build a
// selection by hand.
//
// The NAD name is checked as a DNS-1123 subdomain, not a label: the API server
// accepts dots in custom-resource names, and Multus's JSON form takes such names,
// so refusing them would break working pods. Either rule rejects "..", "/" and
// upper case, which is what keeps a name from becoming a path.
func (s *NetworkSelection) Validate() error {
	if err := checkSubdomain("name", s.Name); err != nil {
		return err
	}
	if err := checkLabel("namespace", s.Namespace); err != nil {
		return err
	}
	if s.InterfaceRequest != "" {
		if err := ValidateIfName(s.InterfaceRequest); err != nil {
			return fmt.Errorf("%q: %w", "interface", err)
		}
	}
	for _, ip := range s.IPs {
		if err := checkIPOrCIDR(ip); err != nil {
			return fmt.Errorf("%q: %w", "ips", err)
		}
	}
	if s.MAC != "" {
		if err := checkMAC(s.MAC); err != nil {
			return err
		}
	}
	if s.InfinibandGUID != "" {
		if hw, err := net.ParseMAC(s.InfinibandGUID); err != nil || len(hw) != 8 {
			return fmt.Errorf("%q %q is not an 8-byte GUID (like c2:11:22:33:44:55:66:77)", "infiniband-guid", truncate(s.InfinibandGUID, 64))
		}
	}
	for i, p := range s.PortMappings {
		if err := p.validate(); err != nil {
			return fmt.Errorf("%q[%d]: %w", "portMappings", i, err)
		}
	}
	if s.Bandwidth != nil {
		if err := s.Bandwidth.validate(); err != nil {
			return fmt.Errorf("%q: %w", "bandwidth", err)
		}
	}
	if err := checkDeviceID(s.DeviceID); err != nil {
		return err
	}
	if err := checkGateways(s.DefaultRoute); err != nil {
		return fmt.Errorf("%q: %w", "default-route", err)
	}
	if s.IPAMClaimReference != "" {
		if err := checkSubdomain("ipam-claim-reference", s.IPAMClaimReference); err != nil {
			return err
		}
		// The claim decides the addresses; two sources of truth would disagree.
		if len(s.IPs) > 0 {
			return fmt.Errorf("%q %q and %q cannot be used together", "ipam-claim-reference", s.IPAMClaimReference, "ips")
		}
	}
	return nil
}

func checkLabel(key, v string) error {
	if len(v) > maxLabelLen || !dnsLabelRE.MatchString(v) {
		return fmt.Errorf("%q %q is not a valid DNS-1123 label (at most %d characters of a-z, 0-9 and '-', starting and ending with a letter or digit)", key, truncate(v, 80), maxLabelLen)
	}
	return nil
}

func checkSubdomain(key, v string) error {
	if len(v) > maxSubdomainLen || !dnsSubdomainRE.MatchString(v) {
		return fmt.Errorf("%q %q is not a valid Kubernetes object name (a DNS-1123 subdomain: at most %d characters of a-z, 0-9, '-' and '.', each dot-separated part starting and ending with a letter or digit)", key, truncate(v, 80), maxSubdomainLen)
	}
	return nil
}

// checkIPOrCIDR accepts "10.1.1.5", "10.1.1.5/24", "2001:db8::5" and
// "2001:db8::5/64". Zones ("fe80::1%eth0") are refused: no plugin takes them.
func checkIPOrCIDR(s string) error {
	if strings.Contains(s, "/") {
		if _, err := netip.ParsePrefix(s); err != nil || strings.Contains(s, "%") {
			return fmt.Errorf("%q is not an IP address or CIDR", truncate(s, 64))
		}
		return nil
	}
	if a, err := netip.ParseAddr(s); err != nil || a.Zone() != "" {
		return fmt.Errorf("%q is not an IP address or CIDR", truncate(s, 64))
	}
	return nil
}

// checkMAC wants a 6-byte unicast address that is not all zeros: the kernel
// refuses anything else on an Ethernet device, and refusing here gives the pod a
// message that names the annotation instead of a plugin's EADDRNOTAVAIL.
func checkMAC(s string) error {
	hw, err := net.ParseMAC(s)
	if err != nil || len(hw) != 6 {
		return fmt.Errorf("%q %q is not a 6-byte MAC address", "mac", truncate(s, 64))
	}
	if hw[0]&1 == 1 {
		return fmt.Errorf("%q %q is a multicast address, which cannot be set on an interface", "mac", s)
	}
	if string(hw) == "\x00\x00\x00\x00\x00\x00" {
		return fmt.Errorf("%q %q is all zeros, which cannot be set on an interface", "mac", s)
	}
	return nil
}

// checkDeviceID bounds a device ID (a PCI address, a vDPA name, ...) without
// guessing its format, which depends on the device plugin.
func checkDeviceID(s string) error {
	if len(s) > maxDeviceIDLen {
		return fmt.Errorf("%q is %d characters, more than %d", "deviceID", len(s), maxDeviceIDLen)
	}
	for _, r := range s {
		if unicode.IsSpace(r) || !unicode.IsPrint(r) {
			return fmt.Errorf("%q %q contains %q, which is not allowed", "deviceID", truncate(s, 64), r)
		}
	}
	return nil
}

// checkGateways wants plain IPs, at most one per family: a pod has one default
// route per family, and DESIGN §6 refuses a second one anyway.
func checkGateways(gws []string) error {
	var v4, v6 string
	for _, g := range gws {
		a, err := netip.ParseAddr(g)
		if err != nil || a.Zone() != "" {
			return fmt.Errorf("gateway %q is not an IP address", truncate(g, 64))
		}
		slot := &v6
		if a.Unmap().Is4() {
			slot = &v4
		}
		if *slot != "" {
			return fmt.Errorf("gateways %q and %q are of the same IP family; a pod has one default route per family", *slot, g)
		}
		*slot = g
	}
	// An empty list is the multi-net spec's "this network's own default
	// routes": which ones those are is known after its ADD (delegate's
	// applyDefaultRoute).
	return nil
}

func (p PortMapping) validate() error {
	if p.HostPort < 1 || p.HostPort > 65535 {
		return fmt.Errorf("%q %d is not a port (1-65535)", "hostPort", p.HostPort)
	}
	if p.ContainerPort < 1 || p.ContainerPort > 65535 {
		return fmt.Errorf("%q %d is not a port (1-65535)", "containerPort", p.ContainerPort)
	}
	switch strings.ToLower(p.Protocol) {
	case "", "tcp", "udp", "sctp":
	default:
		return fmt.Errorf("%q %q is not TCP, UDP or SCTP", "protocol", truncate(p.Protocol, 32))
	}
	if p.HostIP != "" {
		if a, err := netip.ParseAddr(p.HostIP); err != nil || a.Zone() != "" {
			return fmt.Errorf("%q %q is not an IP address", "hostIP", truncate(p.HostIP, 64))
		}
	}
	return nil
}

func (b Bandwidth) validate() error {
	for _, f := range []struct {
		key string
		v   int64
	}{
		{"ingressRate", b.IngressRate}, {"ingressBurst", b.IngressBurst},
		{"egressRate", b.EgressRate}, {"egressBurst", b.EgressBurst},
	} {
		if f.v < 0 {
			return fmt.Errorf("%q %d is negative", f.key, f.v)
		}
	}
	return nil
}
