package delegate

import (
	"bytes"
	"fmt"
	"sync"

	"github.com/containernetworking/cni/libcni"

	"github.com/manifold-cni/manifold/netconf"
)

// confList parses an attachment's stored conflist for libcni.
//
// The lists parsed are kept, keyed by the config's bytes, and shared: one
// call parsed each of its attachments' configs two or three times (to plan
// the early starts, to run the delegates, and on DEL to match the libcni
// cache), and the daemon's pods draw on a few NADs, whose configs are the
// same bytes from one pod to the next (docs/performance-history.md, change
// 24). Nothing that takes a list changes it: libcni's calls build each
// plugin's config anew from it, and manifold's only read it.
func confList(att *netconf.Attachment) (*libcni.NetworkConfigList, error) {
	if list := parsed.get(att.Config); list != nil {
		return list, nil
	}
	// A copy: the list keeps the bytes it was parsed from, and it outlives
	// this attachment.
	list, err := libcni.NetworkConfFromBytes(bytes.Clone(att.Config))
	if err != nil {
		return nil, fmt.Errorf("parse config of network %s: %w", att.DisplayName(), err)
	}
	if len(list.Plugins) == 0 {
		return nil, fmt.Errorf("parse config of network %s: no plugins", att.DisplayName())
	}
	parsed.put(att.Config, list)
	return list, nil
}

// Bounds of the parsed lists kept, in bytes of config: all of them
// together, and one. A parsed list takes about four times its config's bytes
// (1,291 for a macvlan and tuning conflist of 321), and its key once more: at
// most about 1.3 MiB. When a list would take the total past maxParsedBytes,
// every list kept is let go, and the keeping starts again; a larger config
// is parsed every time.
const (
	maxParsedBytes  = 256 << 10
	maxParsedConfig = 16 << 10
)

// parsed holds the lists that confList parsed.
var parsed = &parsedLists{}

// parsedLists maps configs to their parsed lists, within the bounds above.
type parsedLists struct {
	mu    sync.Mutex
	lists map[string]*libcni.NetworkConfigList
	bytes int // of the keys
}

func (p *parsedLists) get(config []byte) *libcni.NetworkConfigList {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lists[string(config)]
}

func (p *parsedLists) put(config []byte, list *libcni.NetworkConfigList) {
	if len(config) > maxParsedConfig {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.lists == nil || p.bytes+len(config) > maxParsedBytes {
		p.lists, p.bytes = map[string]*libcni.NetworkConfigList{}, 0
	}
	if _, ok := p.lists[string(config)]; !ok {
		p.lists[string(config)] = list
		p.bytes += len(config)
	}
}
