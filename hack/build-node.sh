#!/usr/bin/env bash
# Builds a node's runtime side from Go modules, for the runtime tier and the real
# node (issue 23): containerd, ctr and containerd-shim-runc-v2, and the kubelet.
#
# Each build lands in a cache keyed by version, like hack/build-control-plane.sh,
# so a fresh clone on the same machine reuses it. Cold (empty Go caches too), on
# 2 cores of a busy machine, containerd took 4.6 minutes and the kubelet 6.5; a
# warm run is instant. Progress goes to stderr.
#
# Prints two paths, one per line: the directory holding containerd, ctr and
# containerd-shim-runc-v2, then the kubelet binary.
set -euo pipefail

CONTAINERD_VERSION=${CONTAINERD_VERSION:-v2.4.2}
K8S_VERSION=${K8S_VERSION:-v1.36.3}
CACHE=${MANIFOLD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/manifold}
containerd_dir=$CACHE/containerd-$CONTAINERD_VERSION
kubelet=$CACHE/kubelet-$K8S_VERSION
mkdir -p "$CACHE"

build_containerd() {
  local tmp=$containerd_dir.tmp
  rm -rf "$tmp"; mkdir -p "$tmp"
  # no_btrfs: the btrfs snapshotter needs cgo headers; the tier uses native.
  GOBIN=$tmp CGO_ENABLED=0 GOFLAGS=-mod=mod go install -trimpath -tags no_btrfs \
    "github.com/containerd/containerd/v2/cmd/containerd@$CONTAINERD_VERSION" \
    "github.com/containerd/containerd/v2/cmd/ctr@$CONTAINERD_VERSION" \
    "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2@$CONTAINERD_VERSION"
  rm -rf "$containerd_dir"
  mv "$tmp" "$containerd_dir"
}

build_kubelet() (
  # A subshell, so that the EXIT trap removes the module dir however it ends.
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  # The same throwaway module as kube-apiserver's: k8s.io/kubernetes points its
  # staging modules at ./staging, so pin each one to the matching v0.Y.Z.
  local staging_version=v0.${K8S_VERSION#v1.}
  local modfile
  modfile=$(cd "$work" && GOFLAGS=-mod=mod go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/.*"GoMod": "\(.*\)",/\1/p')
  {
    echo "module manifold.local/kubelet-build"
    echo "go 1.26"
    echo "require k8s.io/kubernetes $K8S_VERSION"
    sed -n 's#^\s*\(k8s.io/[a-z0-9-]*\) => ./staging/.*#replace \1 => \1 '"$staging_version"'#p' "$modfile"
  } >"$work/go.mod"
  printf 'package main\n\nimport _ "k8s.io/kubernetes/cmd/kubelet"\n' >"$work/tools.go"
  (cd "$work" && go mod tidy >/dev/null 2>&1 || true)
  (cd "$work" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -o "$kubelet.tmp" k8s.io/kubernetes/cmd/kubelet)
  mv "$kubelet.tmp" "$kubelet"
)

source "$(dirname "$0")/progress.sh"
# Parallel test packages and parallel make runs each call this script; two
# builds at once would write the same files.
lock_cache "$CACHE/.build-node.lock"

[ -x "$containerd_dir/containerd-shim-runc-v2" ] || timed "containerd $CONTAINERD_VERSION" build_containerd
[ -x "$kubelet" ] || timed "kubelet $K8S_VERSION" build_kubelet
echo "$containerd_dir"
echo "$kubelet"
