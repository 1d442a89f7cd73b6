package delegate

import (
	"encoding/json"
	"net"

	"github.com/manifold-cni/manifold/netconf"
)

// waves splits a pod's attachments, by position, into the groups that Add
// runs one after the other. In order (concurrent false), each attachment is
// a group of its own. With concurrentAttachments, the extra networks that are
// independent of each other form groups whose delegates run at once
// (docs/configuration.md):
//   - the default network (position 0) always runs first, alone: the others
//     may build on it, and it is the one whose result the runtime gets;
//   - an attachment that is not independent (orderedAttachment) runs alone,
//     after everything before it and before everything after it, as in
//     order;
//   - the independent attachments between two such ones run together.
//
// So any two attachments that run at the same time are both independent,
// and everything else keeps its order relative to every other attachment.
func waves(atts []netconf.Attachment, concurrent bool) [][]int {
	var out [][]int
	var wave []int
	for i := range atts {
		if !concurrent || i == 0 || orderedAttachment(atts, i) {
			if len(wave) > 0 {
				out = append(out, wave)
				wave = nil
			}
			out = append(out, []int{i})
			continue
		}
		wave = append(wave, i)
	}
	if len(wave) > 0 {
		out = append(out, wave)
	}
	return out
}

// orderedAttachment reports whether extra attachment i must keep its turn:
//   - it carries a default route, from the annotation's default-route or as a
//     0.0.0.0/0 or ::/0 route anywhere in its config: two of those at once
//     would race for the pod's one default route, where in order the same
//     one wins every time;
//   - its config or its runtime settings name the pod interface of another
//     extra attachment (a master, a link to tune, a device): that interface
//     must exist first, or not yet, exactly as in order. The default
//     network's interface is not counted: it is attached before any wave.
//
// A string that merely equals such a name counts too (a network called
// "net2", say): the test errs on the side of order.
func orderedAttachment(atts []netconf.Attachment, i int) bool {
	a := &atts[i]
	if a.WantsDefaultRoute() || a.Auxiliary {
		// The auxiliary chain runs after everything else, as Multus runs it.
		return true
	}
	others := map[string]bool{}
	for j := 1; j < len(atts); j++ {
		if j != i {
			others[atts[j].IfName] = true
		}
	}
	var conf, rc any
	if err := json.Unmarshal(a.Config, &conf); err != nil {
		return true // Add fails it anyway, in its turn
	}
	if a.RuntimeConfig != nil {
		b, err := json.Marshal(a.RuntimeConfig)
		if err != nil || json.Unmarshal(b, &rc) != nil {
			return true
		}
	}
	return namesOrDefaultRoute(conf, others) || namesOrDefaultRoute(rc, others)
}

// namesOrDefaultRoute walks a decoded JSON value: true when a key or a string
// is one of names, or an object has a "dst" that is a default route.
func namesOrDefaultRoute(v any, names map[string]bool) bool {
	switch v := v.(type) {
	case string:
		return names[v]
	case []any:
		for _, e := range v {
			if namesOrDefaultRoute(e, names) {
				return true
			}
		}
	case map[string]any:
		if dst, ok := v["dst"].(string); ok && isDefaultRoute(dst) {
			return true
		}
		for k, e := range v {
			if names[k] || namesOrDefaultRoute(e, names) {
				return true
			}
		}
	}
	return false
}

// isDefaultRoute reports whether a route's dst is 0.0.0.0/0 or ::/0.
func isDefaultRoute(dst string) bool {
	_, n, err := net.ParseCIDR(dst)
	if err != nil {
		return false
	}
	ones, _ := n.Mask.Size()
	return ones == 0
}
