package e2e

// What a scenario checks: the pod netns, the network-status annotation, the
// events, and that nothing is left behind.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"

	"github.com/manifold-cni/manifold/internal/testenv"
)

// link is what a test sees of one interface in the pod netns.
type link struct {
	name    string
	mac     string
	mtu     int
	promisc bool
	addrs   []*net.IPNet // IPv4 only
}

// links lists the interfaces in a netns other than lo.
func links(t *testing.T, netns ns.NetNS) map[string]link {
	t.Helper()
	out := map[string]link{}
	err := netns.Do(func(ns.NetNS) error {
		list, err := testenv.LinkList()
		if err != nil {
			return err
		}
		for _, l := range list {
			a := l.Attrs()
			if a.Name == "lo" {
				continue
			}
			addrs, err := netlink.AddrList(l, netlink.FAMILY_V4)
			if err != nil {
				return err
			}
			k := link{name: a.Name, mac: a.HardwareAddr.String(), mtu: a.MTU, promisc: a.Promisc != 0}
			for _, ad := range addrs {
				k.addrs = append(k.addrs, ad.IPNet)
			}
			out[a.Name] = k
		}
		return nil
	})
	if err != nil {
		t.Fatalf("list links in %s: %v", netns.Path(), err)
	}
	return out
}

// linkNames lists every link in a netns, lo included, sorted.
func linkNames(t *testing.T, netns ns.NetNS) []string {
	t.Helper()
	var out []string
	err := netns.Do(func(ns.NetNS) error {
		list, err := testenv.LinkList()
		if err != nil {
			return err
		}
		for _, l := range list {
			out = append(out, l.Attrs().Name)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("list links in %s: %v", netns.Path(), err)
	}
	sort.Strings(out)
	return out
}

// routes lists the IPv4 routes of the main table in a netns as
// "<dst> via <gw> dev <if>" ("default" for 0.0.0.0/0, "-" for no gateway).
func routes(t *testing.T, netns ns.NetNS) []string {
	t.Helper()
	var out []string
	err := netns.Do(func(ns.NetNS) error {
		list, err := netlink.RouteList(nil, netlink.FAMILY_V4)
		if err != nil {
			return err
		}
		for _, r := range list {
			l, err := netlink.LinkByIndex(r.LinkIndex)
			if err != nil {
				return err
			}
			dst := "default"
			if r.Dst != nil && !(r.Dst.IP.IsUnspecified() && maskBits(r.Dst) == 0) {
				dst = r.Dst.String()
			}
			gw := "-"
			if r.Gw != nil {
				gw = r.Gw.String()
			}
			out = append(out, fmt.Sprintf("%s via %s dev %s", dst, gw, l.Attrs().Name))
		}
		return nil
	})
	if err != nil {
		t.Fatalf("list routes in %s: %v", netns.Path(), err)
	}
	return out
}

func maskBits(n *net.IPNet) int {
	ones, _ := n.Mask.Size()
	return ones
}

// defaultRoutes keeps the default routes of a route list.
func defaultRoutes(rs []string) []string {
	var out []string
	for _, r := range rs {
		if strings.HasPrefix(r, "default ") {
			out = append(out, r)
		}
	}
	return out
}

// networkStatus is one entry of the network-status annotation, with every
// field the format defines. It is decoded strictly: an unknown key fails.
type networkStatus struct {
	Name         string          `json:"name"`
	Interface    string          `json:"interface"`
	IPs          []string        `json:"ips"`
	MAC          string          `json:"mac"`
	MTU          int             `json:"mtu"`
	Default      *bool           `json:"default"`
	DNS          json.RawMessage `json:"dns"`
	Gateway      []string        `json:"gateway"`
	DefaultRoute []string        `json:"default-route"`
	DeviceInfo   json.RawMessage `json:"device-info"`
}

// status reads and parses the pod's network-status annotation; ok is false
// when the pod has none.
func (e *env) status(p *corev1.Pod) (list []networkStatus, ok bool) {
	e.t.Helper()
	raw, ok := e.getPod(p).Annotations[annotNetworkStatus]
	if !ok {
		return nil, false
	}
	dec := json.NewDecoder(bytes.NewReader([]byte(raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&list); err != nil {
		e.t.Fatalf("parse network-status of pod %s/%s: %v\n%s", p.Namespace, p.Name, err, raw)
	}
	return list, true
}

// waitForStatus waits, within reportWait (in thick mode the daemon writes
// the status just after it answers), for the pod's network-status, and
// returns it; it fails the test, and returns nil, if none came.
func (e *env) waitForStatus(p *corev1.Pod) []networkStatus {
	e.t.Helper()
	for deadline := time.Now().Add(reportWait); ; time.Sleep(20 * time.Millisecond) {
		if st, ok := e.status(p); ok {
			return st
		}
		if time.Now().After(deadline) {
			e.t.Errorf("pod %s/%s has no network-status after %s", p.Namespace, p.Name, reportWait)
			return nil
		}
	}
}

// events lists the events on a pod (this incarnation, by UID), oldest first.
func (e *env) events(p *corev1.Pod) []corev1.Event {
	e.t.Helper()
	list, err := e.k8s.CoreV1().Events(p.Namespace).List(e.ctx(), listByName(p.Name))
	if err != nil {
		e.t.Fatalf("list events of pod %s/%s: %v", p.Namespace, p.Name, err)
	}
	var out []corev1.Event
	for _, ev := range list.Items {
		if ev.InvolvedObject.UID == p.UID || p.UID == "" {
			out = append(out, ev)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].CreationTimestamp.Before(&out[j].CreationTimestamp) })
	return out
}

// eventsOf keeps the events of one type and reason.
func eventsOf(evs []corev1.Event, typ, reason string) []corev1.Event {
	var out []corev1.Event
	for _, ev := range evs {
		if ev.Type == typ && ev.Reason == reason {
			out = append(out, ev)
		}
	}
	return out
}

// want describes one attachment a scenario expects.
type want struct {
	name   string // network-status name: "ns/nad", or the CNI name of a file network
	ifname string
	subnet subnet // the address must be in it ...
	ip     string // ... or be exactly this CIDR, when set
	mac    string // exact MAC, when set
	// gateway is the attachment's default gateways in the status (nil: none).
	gateway []string
	// defaultRoute is the status's default-route (nil: not requested).
	defaultRoute []string
	// dns is the nameservers the status must carry, with search dnsSearch
	// (nil: "dns": {}, as Multus writes it for a result with none).
	dns []string
}

// checkAttached checks a sandbox after a successful ADD: exactly the wanted
// interfaces in the netns, each with one address in its subnet; the pod's
// network-status entry for each, field by field and in order; and one Normal
// AddedInterface event per attachment. want[0] is the default network.
func (e *env) checkAttached(sb *sandbox, res *types100.Result, wants []want) {
	t := e.t
	t.Helper()
	got := links(t, sb.netns)
	var gotNames, wantNames []string
	for n := range got {
		gotNames = append(gotNames, n)
	}
	for _, w := range wants {
		wantNames = append(wantNames, w.ifname)
	}
	sort.Strings(gotNames)
	sort.Strings(wantNames)
	if !slices.Equal(gotNames, wantNames) {
		t.Errorf("interfaces in the pod netns = %v, want %v", gotNames, wantNames)
	}
	for _, w := range wants {
		l, ok := got[w.ifname]
		if !ok {
			continue
		}
		if len(l.addrs) != 1 {
			t.Errorf("%s has addresses %v, want exactly one", w.ifname, l.addrs)
			continue
		}
		if w.ip != "" && l.addrs[0].String() != w.ip {
			t.Errorf("%s address = %s, want %s", w.ifname, l.addrs[0], w.ip)
		}
		if w.ip == "" && !w.subnet.Contains(l.addrs[0].IP) {
			t.Errorf("%s address = %s, want one in %s", w.ifname, l.addrs[0], w.subnet)
		}
		if w.mac != "" && l.mac != w.mac {
			t.Errorf("%s MAC = %s, want %s", w.ifname, l.mac, w.mac)
		}
	}

	// The runtime gets the default network's result.
	if res != nil {
		if len(res.IPs) != 1 || res.IPs[0].Address.String() != got[wants[0].ifname].addrString() {
			t.Errorf("result IPs = %v, want the address of %s (%s)", res.IPs, wants[0].ifname, got[wants[0].ifname].addrString())
		}
		if !slices.ContainsFunc(res.Interfaces, func(i *types100.Interface) bool { return i.Name == wants[0].ifname && i.Sandbox != "" }) {
			t.Errorf("result interfaces %v lack sandbox interface %s", res.Interfaces, wants[0].ifname)
		}
	}

	st, ok := e.status(sb.k8s)
	if !ok {
		t.Errorf("pod %s/%s has no %s annotation", sb.k8s.Namespace, sb.k8s.Name, annotNetworkStatus)
	} else {
		if len(st) != len(wants) {
			t.Errorf("network-status has %d entries, want %d: %+v", len(st), len(wants), st)
		}
		for i := 0; i < len(st) && i < len(wants); i++ {
			e.checkStatusEntry(i, st[i], wants[i], got[wants[i].ifname])
		}
	}

	evs := e.events(sb.k8s)
	added := eventsOf(evs, corev1.EventTypeNormal, "AddedInterface")
	var gotMsgs, wantMsgs []string
	for _, ev := range added {
		gotMsgs = append(gotMsgs, ev.Message)
		if ev.InvolvedObject.Kind != "Pod" || ev.InvolvedObject.Name != sb.k8s.Name || ev.InvolvedObject.UID != sb.k8s.UID {
			t.Errorf("event %q involves %+v, want pod %s (uid %s)", ev.Message, ev.InvolvedObject, sb.k8s.Name, sb.k8s.UID)
		}
	}
	for _, w := range wants {
		wantMsgs = append(wantMsgs, fmt.Sprintf("Add %s [%s] from %s", w.ifname, got[w.ifname].addrString(), w.name))
	}
	sort.Strings(gotMsgs)
	sort.Strings(wantMsgs)
	if !slices.Equal(gotMsgs, wantMsgs) {
		t.Errorf("AddedInterface events = %q, want %q", gotMsgs, wantMsgs)
	}
	if w := eventsOf(evs, corev1.EventTypeWarning, "ErrorAddingInterface"); len(w) != 0 {
		t.Errorf("unexpected Warning events: %v", w[0].Message)
	}
}

func (l link) addrString() string {
	if len(l.addrs) == 0 {
		return "<none>"
	}
	return l.addrs[0].String()
}

func (e *env) checkStatusEntry(i int, st networkStatus, w want, l link) {
	t := e.t
	t.Helper()
	if st.Name != w.name {
		t.Errorf("network-status[%d].name = %q, want %q", i, st.Name, w.name)
	}
	if st.Interface != w.ifname {
		t.Errorf("network-status[%d].interface = %q, want %q", i, st.Interface, w.ifname)
	}
	var ips []string
	for _, a := range l.addrs {
		ips = append(ips, a.IP.String())
	}
	if !slices.Equal(st.IPs, ips) {
		t.Errorf("network-status[%d].ips = %v, want %v (the addresses of %s, no prefix length)", i, st.IPs, ips, w.ifname)
	}
	if st.MAC != l.mac {
		t.Errorf("network-status[%d].mac = %q, want %q (the MAC of %s)", i, st.MAC, l.mac, w.ifname)
	}
	// No reference plugin reports an MTU in its result; if one is written, it
	// must be the interface's.
	if st.MTU != 0 && st.MTU != l.mtu {
		t.Errorf("network-status[%d].mtu = %d, want %d (the MTU of %s)", i, st.MTU, l.mtu, w.ifname)
	}
	if st.Default == nil {
		t.Errorf("network-status[%d].default is missing; it is always written", i)
	} else if *st.Default != (i == 0) {
		t.Errorf("network-status[%d].default = %v, want %v", i, *st.Default, i == 0)
	}
	if !slices.Equal(st.Gateway, w.gateway) {
		t.Errorf("network-status[%d].gateway = %v, want %v", i, st.Gateway, w.gateway)
	}
	if !slices.Equal(st.DefaultRoute, w.defaultRoute) {
		t.Errorf("network-status[%d].default-route = %v, want %v", i, st.DefaultRoute, w.defaultRoute)
	}
	if w.dns == nil && string(st.DNS) != "{}" {
		t.Errorf("network-status[%d].dns = %s, want {} (as Multus writes it)", i, st.DNS)
	}
	if w.dns != nil {
		var dns types.DNS
		if err := json.Unmarshal(st.DNS, &dns); err != nil {
			t.Errorf("network-status[%d].dns = %s: %v", i, st.DNS, err)
		} else if !slices.Equal(dns.Nameservers, w.dns) || !slices.Equal(dns.Search, []string{dnsSearch}) || dns.Domain != "" || len(dns.Options) != 0 {
			t.Errorf("network-status[%d].dns = %s, want nameservers %v and search [%s]", i, st.DNS, w.dns, dnsSearch)
		}
	}
	if len(st.DeviceInfo) != 0 {
		t.Errorf("network-status[%d].device-info = %s, want none (no device plugin here)", i, st.DeviceInfo)
	}
}

// checkNothingLeft checks that nothing of a sandbox remains: only lo in its
// netns, no host-local lease, no tuning backup and no file in cniDir that
// names its container ID, and no port on the env's bridge.
func (e *env) checkNothingLeft(sb *sandbox) {
	t := e.t
	t.Helper()
	if got := linkNames(t, sb.netns); !slices.Equal(got, []string{"lo"}) {
		t.Errorf("links in the pod netns = %v, want only lo", got)
	}
	if got := filesMentioning(t, e.leaseDir, sb.ContainerID, true); len(got) != 0 {
		t.Errorf("host-local leases of the sandbox = %v, want none", got)
	}
	if got := filesMentioning(t, e.tuningDir, sb.ContainerID, false); len(got) != 0 {
		t.Errorf("tuning backups of the sandbox = %v, want none", got)
	}
	if got := filesMentioning(t, e.cniDir, sb.ContainerID, false); len(got) != 0 {
		t.Errorf("files for the sandbox left in cniDir = %v, want none", got)
	}
	if got := testenv.BridgePorts(t, e.bridge); len(got) != 0 {
		t.Errorf("ports on bridge %s = %v, want none", e.bridge, got)
	}
}

// filesMentioning lists the files under dir whose path (or, with content, whose
// content) holds id.
func filesMentioning(t *testing.T, dir, id string, content bool) []string {
	t.Helper()
	var out []string
	_ = filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return nil
		}
		if strings.Contains(p, id) {
			out = append(out, p)
			return nil
		}
		if content {
			if b, err := os.ReadFile(p); err == nil && bytes.Contains(b, []byte(id)) {
				out = append(out, p)
			}
		}
		return nil
	})
	return out
}

// checkRefused checks a failed ADD: nothing attached or left behind, and a
// Warning event on the pod (when there is one) that holds every one of subs.
func (e *env) checkRefused(sb *sandbox, subs ...string) {
	t := e.t
	t.Helper()
	e.checkNothingLeft(sb)
	if sb.k8s == nil {
		return
	}
	evs := e.events(sb.k8s)
	// A missing NAD's reason is Multus's NoNetworkFound.
	warns := append(eventsOf(evs, corev1.EventTypeWarning, "ErrorAddingInterface"), eventsOf(evs, corev1.EventTypeWarning, "NoNetworkFound")...)
	if len(warns) != 1 {
		t.Errorf("Warning ErrorAddingInterface or NoNetworkFound events = %d, want 1 (all events: %v)", len(warns), eventMessages(evs))
	} else {
		for _, s := range subs {
			if !strings.Contains(warns[0].Message, s) {
				t.Errorf("Warning event %q does not name %q", warns[0].Message, s)
			}
		}
	}
	if added := eventsOf(evs, corev1.EventTypeNormal, "AddedInterface"); len(added) != 0 {
		t.Errorf("AddedInterface events after a failed ADD: %v", eventMessages(added))
	}
	if _, ok := e.status(sb.k8s); ok {
		t.Errorf("pod %s/%s has a network-status after a failed ADD", sb.k8s.Namespace, sb.k8s.Name)
	}
}

func eventMessages(evs []corev1.Event) []string {
	var out []string
	for _, ev := range evs {
		out = append(out, ev.Type+" "+ev.Reason+": "+ev.Message)
	}
	return out
}
