#!/usr/bin/env bash
# Builds the control plane from its Go modules, for the e2e tier (DESIGN §9):
# etcd, and kube-apiserver, kube-scheduler, kube-controller-manager and kubectl
# from one k8s.io/kubernetes version.
#
# Each build happens in a throwaway module outside the repository's go.mod, and the
# binaries land in a cache keyed by version, so a fresh clone on the same machine
# reuses them. The four Kubernetes programs are built by one `go build`, so
# they share the compiled packages (on a machine whose cache already has
# kube-apiserver, only the missing ones are built).
#
# Measured on 2 cores that other builds and tests were loading (load average
# 9 to 66), with the Go module cache warm:
#   - cold (empty Go build cache, niced): etcd 389 s, then the four Kubernetes
#     programs 2805 s; the whole run took 53 minutes and 1870 CPU-seconds,
#     which 2 idle cores would do in about 16 minutes. kube-apiserver alone
#     had taken 26 minutes cold at load 9, before this script built the
#     other three.
#   - kube-scheduler, kube-controller-manager and kubectl added to a cache that
#     already holds kube-apiserver and the kubelet: 330 s (390 CPU-seconds).
#   - warm (all cached): 0.03 s.
#
# Prints five paths, one per line: kube-apiserver, etcd, kube-scheduler,
# kube-controller-manager, kubectl (the Makefile and e2e/controlplane read
# them by position, so keep the first two first).
set -euo pipefail

K8S_VERSION=${K8S_VERSION:-v1.36.3}
ETCD_VERSION=${ETCD_VERSION:-v3.6.8}
CACHE=${MANIFOLD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/manifold}
etcd=$CACHE/etcd-$ETCD_VERSION
kube_cmds=(kube-apiserver kube-scheduler kube-controller-manager kubectl)
mkdir -p "$CACHE"

source "$(dirname "$0")/progress.sh"
# Parallel test packages and parallel make runs each call this script; two
# builds at once would write the same files.
lock_cache "$CACHE/.build-control-plane.lock"

# build_kube builds the Kubernetes programs named in its arguments.
build_kube() (
  # A subshell, so that the EXIT trap removes the module dir however it ends.
  work=$(mktemp -d)
  out=$CACHE/.kube-$K8S_VERSION.tmp
  trap 'rm -rf "$work" "$out"' EXIT
  # k8s.io/kubernetes points its staging modules at ./staging; pin each one to the
  # published v0.Y.Z that matches this release instead.
  local staging_version=v0.${K8S_VERSION#v1.}
  local modfile
  modfile=$(cd "$work" && GOFLAGS=-mod=mod go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/.*"GoMod": "\(.*\)",/\1/p')
  {
    echo "module manifold.local/kube-build"
    echo "go 1.26"
    echo "require k8s.io/kubernetes $K8S_VERSION"
    sed -n 's#^\s*\(k8s.io/[a-z0-9-]*\) => ./staging/.*#replace \1 => \1 '"$staging_version"'#p' "$modfile"
  } >"$work/go.mod"
  local pkgs=() cmd
  {
    printf 'package main\n\nimport (\n'
    for cmd in "$@"; do
      pkgs+=("k8s.io/kubernetes/cmd/$cmd")
      printf '\t_ "k8s.io/kubernetes/cmd/%s"\n' "$cmd"
    done
    printf ')\n'
  } >"$work/tools.go"
  (cd "$work" && go mod tidy >/dev/null 2>&1 || true)
  rm -rf "$out"; mkdir -p "$out"
  (cd "$work" && GOFLAGS=-mod=mod go build -trimpath -o "$out/" "${pkgs[@]}")
  for cmd in "$@"; do
    mv "$out/$cmd" "$CACHE/$cmd-$K8S_VERSION"
  done
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

[ -x "$etcd" ] || timed "etcd $ETCD_VERSION" build_etcd
missing=()
for cmd in "${kube_cmds[@]}"; do
  [ -x "$CACHE/$cmd-$K8S_VERSION" ] || missing+=("$cmd")
done
((${#missing[@]} == 0)) || timed "${missing[*]} $K8S_VERSION" build_kube "${missing[@]}"
echo "$CACHE/kube-apiserver-$K8S_VERSION"
echo "$etcd"
for cmd in kube-scheduler kube-controller-manager kubectl; do
  echo "$CACHE/$cmd-$K8S_VERSION"
done
