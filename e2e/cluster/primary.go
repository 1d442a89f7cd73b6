package cluster

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/vishvananda/netlink"

	"github.com/manifold-cni/manifold/internal/testenv"
)

// The cluster's primary CNI: a bridge on cni0 with host-local IPAM, the
// config a simple network plugin (flannel's, kubenet's) installs. Its
// cniVersion is 1.1.0, so that containerd sends STATUS and the node's
// readiness follows the CNI's.
const (
	PrimaryFile    = "10-bridge.conflist"
	PrimaryNetwork = "cbr0"
	PrimaryBridge  = "cni0"
	PrimarySubnet  = "10.244.0.0/24"
)

// PrimaryConfig is the primary's conflist.
func PrimaryConfig() string {
	return `{
  "cniVersion": "1.1.0",
  "name": "` + PrimaryNetwork + `",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "` + PrimaryBridge + `",
      "isGateway": true,
      "ipMasq": false,
      "ipam": {"type": "host-local", "subnet": "` + PrimarySubnet + `", "routes": [{"dst": "0.0.0.0/0"}]}
    }
  ]
}
`
}

// InstallPrimaryPlugins puts the reference CNI plugins into /opt/cni/bin, as a
// node's containernetworking-plugins package does: hard links to the built
// ones where the file system allows, copies elsewhere.
func InstallPrimaryPlugins() error {
	src, err := testenv.FindPlugins()
	if err != nil {
		return err
	}
	entries, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		from, to := filepath.Join(src, e.Name()), filepath.Join(BinDir, e.Name())
		if err := os.Link(from, to); err == nil {
			continue
		}
		if err := copyFile(from, to, 0o755); err != nil {
			return fmt.Errorf("install plugin %s: %w", e.Name(), err)
		}
	}
	return nil
}

// WritePrimary writes the primary's conflist into /etc/cni/net.d, as its
// DaemonSet would: atomically, under name.
func WritePrimary(name, config string) error {
	tmp := filepath.Join(ConfDir, "."+name+".tmp")
	if err := os.WriteFile(tmp, []byte(config), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(ConfDir, name))
}

func copyFile(from, to string, mode os.FileMode) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// networkStateDirs are host-local's lease dirs (its default dataDir) of the
// networks the cluster's pods use, and the bridges they make.
var (
	ownNetworks = []string{PrimaryNetwork}
	ownBridges  = []string{PrimaryBridge}
)

// OwnNetwork registers a network (host-local leases in
// /var/lib/cni/networks/<name>) and its bridge (may be empty) that the tests
// make, for Stop to remove.
func OwnNetwork(name, bridge string) {
	ownNetworks = append(ownNetworks, name)
	if bridge != "" {
		ownBridges = append(ownBridges, bridge)
	}
}

// removeNetworkState removes the leases, the bridges and containerd's libcni
// cache entries of the cluster's networks, and the pods' way to the API
// server (ServeAPIToPods).
func removeNetworkState() {
	stopAPIToPods()
	for _, n := range ownNetworks {
		os.RemoveAll(filepath.Join("/var/lib/cni/networks", n))
	}
	results, _ := os.ReadDir("/var/lib/cni/results")
	for _, r := range results {
		if strings.HasPrefix(r.Name(), ManifoldNetwork+"-") || strings.HasPrefix(r.Name(), PrimaryNetwork+"-") {
			os.Remove(filepath.Join("/var/lib/cni/results", r.Name()))
		}
	}
	for _, b := range ownBridges {
		if l, err := netlink.LinkByName(b); err == nil {
			netlink.LinkDel(l)
		} else if !errors.As(err, new(netlink.LinkNotFoundError)) {
			fmt.Fprintf(os.Stderr, "cluster: look up bridge %s: %v\n", b, err)
		}
	}
}
