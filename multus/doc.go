// Package multus reads, lists and removes what Multus CNI leaves on a node for
// each pod, so that manifold can DEL, CHECK and GC the pods that Multus attached
// when it takes over a live node (issue 19). It never runs a plugin: it turns
// Multus's files into manifold's own vocabulary ([]netconf.Attachment plus the
// runtime's CNI_ARGS), and the caller runs the DELs.
//
// # What Multus writes (learned from its source and from files Multus v4.3.0 wrote)
//
// Multus's cniDir (default /var/lib/cni/multus, the same for the thin plugin and
// the thick daemon) holds two kinds of files.
//
// The record, cniDir/<containerID>. Every Multus from v3.0 to v4.x writes it with
// a plain, non-atomic write, before the first delegate's ADD, and removes it at
// the end of DEL whether or not the DELs succeeded. It is the JSON encoding of a
// Go []*DelegateNetConf: a list with one object per network, in attachment
// order. The keys this package reads:
//
//   - "Bytes": the delegate's config as Multus handed it to libcni, as a JSON
//     string holding base64 (Go's encoding of []byte). A JSON string with the
//     config as text, or a plain JSON object, is accepted too.
//   - "Conf", "ConfList": Multus's typed copies (cni types.NetConf and
//     NetConfList); only name and cniVersion are read from them, as a fallback.
//   - "Name" (v3.x later releases and v4.x): "namespace/name" for a network from a
//     NetworkAttachmentDefinition, else the CNI network name.
//   - "ifnameRequest", "macRequest", "ipRequest" (a single string in early v3
//     releases, a list later), "infinibandGUIDRequest", "deviceID", "default-route".
//   - "CNINetworkConfigList" (v4.x releases built on libcni's subdirectory
//     chains, e.g. v4.3.0): libcni's NetworkConfigList, with the original file
//     bytes in "Bytes" and each plugin's raw bytes in "Plugins"[i]."Bytes". Only
//     conflists loaded from a file fill it (clusterNetwork or defaultNetworks
//     given as a file or a directory, or a config found by name in confDir), and
//     for exactly those entries the record's "Bytes" is NOT the original: Multus
//     re-encoded the typed ConfList, which keeps only the fields its types know
//     (the bridge name, the host-local ranges, calico's datastore settings are
//     gone). Later upstream releases rebuild "Bytes" from this field on read.
//
// Multus has no version field in the record. The interface names are not in it
// either, unless requested: Multus derives them on every call, the first entry
// getting CNI_IFNAME and entry i > 0 getting "net<i>".
//
// The libcni result cache, cniDir/results/<network>-<containerID>-<ifname>: one
// file per delegate that libcni ADDed successfully (later v3.x and all v4.x
// pass cniDir to libcni as its cache dir; early v3 used none), in libcni's "cniCacheV1" format: "config" (base64 of
// the exact config that ran), "ifName", "networkName", "netns", "cniArgs" (the
// full CNI_ARGS as pairs; Multus puts its own IgnoreUnknown and K8S_POD_* keys
// first and then the runtime's CNI_ARGS, so keys repeat, then MAC= and IP=),
// "capabilityArgs" and "result". libcni removes an entry when that delegate's
// DEL succeeds. Result-only files of libcni before v0.8 (no "kind") are not read
// but are removed with the rest.
//
// Not handled: Multus v1/v2 records (a list of raw plugin configs, with no
// "Bytes") are refused with ErrUnknownFormat. Early v3 releases saved a record
// only for pods with no NetworkAttachmentDefinition networks and used no cache in
// cniDir, so for their other pods there is nothing here to read.
//
// # Choosing each attachment's config
//
//  1. The cache entry for the same network name and interface name: it is
//     exactly what ran.
//  2. Else, when "CNINetworkConfigList" is filled, the conflist rebuilt from it
//     (its list-level keys, each plugin's raw bytes), with the per-attachment
//     keys Multus added to "Bytes" after building it (a plugin's "deviceID",
//     "pciBusID" and "args"."cni") carried over.
//  3. Else the record's "Bytes". It is flagged Lossy when it is, as JSON, equal
//     to the entry's typed "ConfList": Multus produces that only by re-encoding,
//     so the plugins' own fields may be gone.
//
// An entry for which none of these gives a config that netconf.ParseNetwork
// accepts is returned in Record.Unexplained with the reason, never dropped.
package multus
