package multus

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/manifold-cni/manifold/netconf"
)

// explain turns the record's entries into attachments, each with the best config
// there is (see the package doc), and reports those it cannot.
func explain(rec *Record, entries []rawEntry, cache []*cacheEntry, path string, opts Options) {
	ifNames := make([]string, len(entries))
	claimed := map[string]bool{}
	for i, e := range entries {
		switch {
		case e.IfnameRequest != "":
			ifNames[i] = e.IfnameRequest
		case i > 0:
			ifNames[i] = fmt.Sprintf("net%d", i)
		default:
			continue // the default network: CNI_IFNAME, found below
		}
		claimed[ifNames[i]] = true
	}
	for i := range entries {
		e := &entries[i]
		recBytes, bytesErr := configBytes(e.Bytes)
		if _, err := ipRequests(e.IPRequest); err != nil {
			rec.Warnings = append(rec.Warnings, fmt.Sprintf("entry %d of %s: %v; ignored", i, path, err))
		}
		network := networkName(recBytes, e)
		if ifNames[i] == "" {
			ifNames[i] = defaultIfName(cache, network, claimed, opts.IfName)
		}
		att, origin, reasons := choose(e, recBytes, bytesErr, network, ifNames[i], cache, path, opts)
		if e.decodeErr != nil {
			att, reasons = nil, []string{fmt.Sprintf("entry is not a Multus delegate: %v", e.decodeErr)}
		}
		if att != nil {
			if err := checkAttachment(att, e.nad() != "", opts); err != nil {
				att, reasons = nil, []string{err.Error()}
			}
		}
		if att == nil {
			name := e.nad()
			if name == "" {
				name = network
			}
			rec.Unexplained = append(rec.Unexplained, Unexplained{Index: i, Network: name, IfName: ifNames[i], File: path, Reason: strings.Join(reasons, "; ")})
			continue
		}
		att.IsDefault = i == 0
		rec.Attachments = append(rec.Attachments, *att)
		rec.Origins = append(rec.Origins, origin)
		for _, r := range reasons {
			rec.Warnings = append(rec.Warnings, fmt.Sprintf("network %s (interface %q): %s", att.DisplayName(), att.IfName, r))
		}
		if origin.Lossy {
			rec.Warnings = append(rec.Warnings, fmt.Sprintf("network %s (interface %q): the config in %s looks like Multus's re-encoding, which drops the plugins' own fields, and no cache entry has the original", att.DisplayName(), att.IfName, path))
		}
	}
	// A cache entry no record entry claims is something attached all the same:
	// it goes last, so a reverse-order DEL removes it first.
	var rest []*cacheEntry
	for _, c := range cache {
		if !c.used {
			rest = append(rest, c)
		}
	}
	if len(rest) > 0 {
		extra := &Record{}
		fromCacheOnly(extra, rest, "", opts) // none of them is the default network
		for i := range extra.Attachments {
			rec.Warnings = append(rec.Warnings, fmt.Sprintf("cache entry %s matches no entry of the record; deleting it too", extra.Origins[i].File))
		}
		rec.Attachments = append(rec.Attachments, extra.Attachments...)
		rec.Origins = append(rec.Origins, extra.Origins...)
		rec.Unexplained = append(rec.Unexplained, extra.Unexplained...)
	}
}

// networkName is the CNI network name of an entry, as libcni caches it.
func networkName(recBytes []byte, e *rawEntry) string {
	var v struct {
		Name string `json:"name"`
	}
	if recBytes != nil && json.Unmarshal(recBytes, &v) == nil && v.Name != "" {
		return v.Name
	}
	if n := e.typedName(); n != "" {
		return n
	}
	if nad := e.nad(); nad != "" {
		return nad[strings.LastIndex(nad, "/")+1:]
	}
	return ""
}

// choose picks the config for one entry. It returns nil and the reasons when no
// source gives a config that parses; with an attachment, the reasons are the
// better sources that failed, for the log.
func choose(e *rawEntry, recBytes []byte, bytesErr error, network, ifName string, cache []*cacheEntry, path string, opts Options) (*netconf.Attachment, Origin, []string) {
	var reasons []string
	nameHint := ""
	if nad := e.nad(); nad != "" {
		nameHint = nad[strings.LastIndex(nad, "/")+1:]
	}
	c := findCache(cache, network, ifName)
	if c != nil {
		c.used = true
		n, err := parse(c.Config, nameHint, opts)
		if err == nil {
			att := fromRecordEntry(e, n, ifName)
			att.CNIArgs, att.RuntimeConfig = attachmentArgs(c), c.CapabilityArgs
			return att, Origin{Source: FromCache, File: c.file}, reasons
		}
		reasons = append(reasons, fmt.Sprintf("cache entry %s: %v", c.file, err))
	}
	withCache := func(att *netconf.Attachment) *netconf.Attachment {
		if c != nil {
			att.CNIArgs, att.RuntimeConfig = attachmentArgs(c), c.CapabilityArgs
		}
		return att
	}
	if e.CNINetworkConfigList.filled() {
		b, err := e.fromConfigList(recBytes)
		if err == nil {
			var n *netconf.Network
			if n, err = parse(b, nameHint, opts); err == nil {
				return withCache(fromRecordEntry(e, n, ifName)), Origin{Source: FromConfigList, File: path}, reasons
			}
		}
		reasons = append(reasons, fmt.Sprintf("CNINetworkConfigList: %v", err))
	}
	switch {
	case bytesErr != nil:
		reasons = append(reasons, fmt.Sprintf("Bytes: %v", bytesErr))
	case recBytes == nil:
		reasons = append(reasons, "Bytes is empty")
	default:
		n, err := parse(recBytes, nameHint, opts)
		if err == nil {
			lossy := e.lossyBytes(recBytes)
			return withCache(fromRecordEntry(e, n, ifName)), Origin{Source: FromRecord, File: path, Lossy: lossy}, reasons
		}
		reasons = append(reasons, fmt.Sprintf("Bytes: %v", err))
	}
	if c == nil {
		reasons = append(reasons, fmt.Sprintf("no cache entry for network %q and interface %q", network, ifName))
	}
	return nil, Origin{}, reasons
}

// parse normalises a config to a conflist the way manifold does, filling in a
// missing cniVersion when the caller gave one (as Multus did at DEL).
func parse(b []byte, nameHint string, opts Options) (*netconf.Network, error) {
	var top map[string]json.RawMessage
	if json.Unmarshal(b, &top) == nil && isNull(top["cniVersion"]) {
		// netconf takes a NAD's missing cniVersion as libcni does (0.1.0),
		// but Multus ran its delegates with its own config's cniVersion:
		// without that, the version the entry was attached with is unknown.
		if opts.CNIVersion == "" {
			return nil, fmt.Errorf("config has no cniVersion, and no cniVersion of Multus's config was given to fill in")
		}
		top["cniVersion"], _ = json.Marshal(opts.CNIVersion)
		if nb, err := json.Marshal(top); err == nil {
			b = nb
		}
	}
	return netconf.ParseNetwork(b, nameHint)
}

// fromRecordEntry is the attachment for a record entry with config n, and the
// per-attachment settings the record holds (used when no cache entry has the
// exact ones): MAC= and IP= in CNI_ARGS and runtimeConfig, as Multus sent them.
func fromRecordEntry(e *rawEntry, n *netconf.Network, ifName string) *netconf.Attachment {
	att := netconf.NewAttachment(n, e.nad())
	att.IfName = ifName
	ips, _ := ipRequests(e.IPRequest)
	rc := map[string]any{}
	if e.MacRequest != "" {
		att.CNIArgs = append(att.CNIArgs, [2]string{argMAC, e.MacRequest})
		rc["mac"] = e.MacRequest
	}
	if len(ips) > 0 {
		att.CNIArgs = append(att.CNIArgs, [2]string{argIP, strings.Join(ips, ",")})
		rc["ips"] = ips
	}
	if e.InfinibandGUIDRequest != "" {
		rc["infinibandGUID"] = e.InfinibandGUIDRequest
	}
	if e.DeviceID != "" {
		rc["deviceID"] = e.DeviceID
	}
	if len(rc) > 0 {
		att.RuntimeConfig = rc
	}
	att.DefaultRoute = append([]string(nil), e.GatewayRequest...)
	if len(att.DefaultRoute) == 0 {
		att.DefaultRoute = nil
	}
	return &att
}

// attachmentFromCache is the attachment for a cache entry that no record entry
// explains.
func attachmentFromCache(c *cacheEntry, nad, nameHint string, opts Options) (netconf.Attachment, error) {
	n, err := parse(c.Config, nameHint, opts)
	if err != nil {
		return netconf.Attachment{}, fmt.Errorf("cache entry %s: %w", c.file, err)
	}
	att := netconf.NewAttachment(n, nad)
	att.IfName = c.IfName
	att.CNIArgs, att.RuntimeConfig = attachmentArgs(c), c.CapabilityArgs
	return att, nil
}
