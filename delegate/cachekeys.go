package delegate

import (
	"fmt"
	"path/filepath"

	"github.com/containernetworking/cni/libcni"

	"github.com/manifold-cni/manifold/netconf"
	"github.com/manifold-cni/manifold/scratch"
)

// libcni makes an attachment's container ID, network name and interface name
// into the path of its cache entry, results/<network>-<container>-<ifname>,
// and checks them only at ADD. At DEL it removes whatever file is at that
// path when it is not a valid cached result, before any plugin runs; at GC it
// DELs every cached attachment with the values the cache entry holds. So a
// value read back from a file (a libcni cache entry, manifold's or Multus's,
// or Multus's record) that holds a path would make manifold unlink a file of
// its choosing, as root. Such values never reach libcni: the attachment is
// left behind, and the DEL or GC that met it fails naming it.

// cacheKeys checks the values that libcni makes into a path.
func cacheKeys(containerID, network, ifName string) error {
	if err := scratch.ValidateContainerID(containerID); err != nil {
		return fmt.Errorf("not passed to libcni: %v (it would become part of a file path)", err)
	}
	if err := netconf.ValidateNetworkName(network); err != nil {
		return fmt.Errorf("not passed to libcni: %v (it would become part of a file path)", err)
	}
	if err := netconf.ValidateIfName(ifName); err != nil {
		return fmt.Errorf("not passed to libcni: %v (it would become part of a file path)", err)
	}
	return nil
}

// cacheEntryName names, for an error, the cache entry of a cached attachment
// under cacheDir without building its path from the values it holds.
func cacheEntryName(cacheDir string, c *libcni.NetworkAttachment) string {
	return fmt.Sprintf("the libcni cache entry in %s for network %q", filepath.Join(cacheDir, "results"), c.Network)
}

// badCacheEntry is the LeftBehindError of a cached attachment whose values
// fail cacheKeys, or nil.
func badCacheEntry(cacheDir string, c *libcni.NetworkAttachment) *LeftBehindError {
	err := cacheKeys(c.ContainerID, c.Network, c.IfName)
	if err == nil {
		return nil
	}
	return &LeftBehindError{Network: c.Network, IfName: c.IfName, ContainerID: c.ContainerID, File: cacheEntryName(cacheDir, c), Reason: err.Error()}
}
