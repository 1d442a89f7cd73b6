#!/usr/bin/env bash
# Builds kube-apiserver and etcd from their Go modules, for the e2e tier (DESIGN §9).
#
# Each build happens in a throwaway module outside the repository's go.mod, and the
# binaries land in a cache keyed by version, so a fresh clone on the same machine
# reuses them. A cold build takes about 10 minutes on 2 cores; a warm run is instant.
#
# Prints the two binary paths, one per line.
set -euo pipefail

K8S_VERSION=${K8S_VERSION:-v1.36.3}
ETCD_VERSION=${ETCD_VERSION:-v3.6.8}
CACHE=${MANIFOLD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/manifold}
apiserver=$CACHE/kube-apiserver-$K8S_VERSION
etcd=$CACHE/etcd-$ETCD_VERSION
mkdir -p "$CACHE"

build_apiserver() (
  # A subshell, so that the EXIT trap removes the module dir however it ends.
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  # k8s.io/kubernetes points its staging modules at ./staging; pin each one to the
  # published v0.Y.Z that matches this release instead.
  local staging_version=v0.${K8S_VERSION#v1.}
  local modfile
  modfile=$(cd "$work" && GOFLAGS=-mod=mod go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/.*"GoMod": "\(.*\)",/\1/p')
  {
    echo "module manifold.local/kube-apiserver-build"
    echo "go 1.26"
    echo "require k8s.io/kubernetes $K8S_VERSION"
    sed -n 's#^\s*\(k8s.io/[a-z0-9-]*\) => ./staging/.*#replace \1 => \1 '"$staging_version"'#p' "$modfile"
  } >"$work/go.mod"
  printf 'package main\n\nimport _ "k8s.io/kubernetes/cmd/kube-apiserver"\n' >"$work/tools.go"
  (cd "$work" && go mod tidy >/dev/null 2>&1 || true)
  (cd "$work" && GOFLAGS=-mod=mod go build -trimpath -o "$apiserver.tmp" k8s.io/kubernetes/cmd/kube-apiserver)
  mv "$apiserver.tmp" "$apiserver"
)

build_etcd() (
  # A subshell, so that the EXIT trap removes the module dir however it ends.
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  printf 'module manifold.local/etcd-build\n\ngo 1.26\n' >"$work/go.mod"
  (cd "$work" && GOFLAGS=-mod=mod go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION" >/dev/null 2>&1)
  (cd "$work" && GOFLAGS=-mod=mod go build -trimpath -o "$etcd.tmp" go.etcd.io/etcd/server/v3)
  mv "$etcd.tmp" "$etcd"
)

source "$(dirname "$0")/progress.sh"
[ -x "$etcd" ] || timed "etcd $ETCD_VERSION" build_etcd
[ -x "$apiserver" ] || timed "kube-apiserver $K8S_VERSION" build_apiserver
echo "$apiserver"
echo "$etcd"
