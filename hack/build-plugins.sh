#!/usr/bin/env bash
# Builds the CNI plugins the tests and the demo call: the reference plugins from
# github.com/containernetworking/plugins, and noop, sleep and cnitool from
# github.com/containernetworking/cni, at the versions in go.mod. They land in a
# cache keyed by those versions; the directory is printed. Our own gate test
# plugin (internal/testenv/gate) is built there too.
#
# They are built as upstream's release binaries are (scripts/release.sh there):
# CGO_ENABLED=0, static. With cgo, every plugin start would also run the
# dynamic loader, which the nodes' plugins do not, and which would make every
# delegate, and so the benchmark's reference, slower than on a node.
set -euo pipefail
export CGO_ENABLED=0
source "$(dirname "$0")/progress.sh"
cd "$(dirname "$0")/.."
CACHE=${MANIFOLD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/manifold}
mkdir -p "$CACHE"
# Parallel test packages and parallel make runs each call this script; two
# builds at once would write the same files.
lock_cache "$CACHE/.build-plugins.lock"
pv=$(go list -m -f '{{.Version}}' github.com/containernetworking/plugins)
cv=$(go list -m -f '{{.Version}}' github.com/containernetworking/cni)
dir=$CACHE/cni-plugins-$pv-cni-$cv-static
if [ ! -f "$dir/.complete" ]; then
  echo "building CNI plugins $pv and test plugins $cv into $dir" >&2
  mkdir -p "$dir"
  for p in bridge macvlan ptp; do
    go build -trimpath -o "$dir/$p" "github.com/containernetworking/plugins/plugins/main/$p"
  done
  for p in host-local static; do
    go build -trimpath -o "$dir/$p" "github.com/containernetworking/plugins/plugins/ipam/$p"
  done
  for p in tuning portmap bandwidth; do
    go build -trimpath -o "$dir/$p" "github.com/containernetworking/plugins/plugins/meta/$p"
  done
  go build -trimpath -o "$dir/noop" github.com/containernetworking/cni/plugins/test/noop
  go build -trimpath -o "$dir/sleep" github.com/containernetworking/cni/plugins/test/sleep
  go build -trimpath -o "$dir/cnitool" github.com/containernetworking/cni/cnitool
  touch "$dir/.complete"
fi
# host-device (the DRA test moves a NIC into a pod with it) came after the
# rest: it is built on its own when missing, so that a cache made before it
# is completed rather than rebuilt.
if [ ! -x "$dir/host-device" ]; then
  go build -trimpath -o "$dir/host-device.tmp" github.com/containernetworking/plugins/plugins/main/host-device
  mv "$dir/host-device.tmp" "$dir/host-device"
fi
# The gate and recorder test plugins are ours and change with the tree: always
# rebuild them (cheap).
go build -trimpath -o "$dir/gate.tmp" ./internal/testenv/gate && mv "$dir/gate.tmp" "$dir/gate"
go build -trimpath -o "$dir/recorder.tmp" ./internal/testenv/recorder && mv "$dir/recorder.tmp" "$dir/recorder"
echo "$dir"
