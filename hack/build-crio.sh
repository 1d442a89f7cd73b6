#!/usr/bin/env bash
# Builds CRI-O, the second real runtime of the runtime tier (issue 35): crio
# and pinns, from the cri-o Go module, into a cache keyed by version like
# hack/build-node.sh's containerd. conmon and runc come from Debian (.ci/run).
#
# The module is copied out of the Go module cache into a temp dir because two
# things must change before it builds: go-criu v8.1.0, which it requires, is
# refused by the module proxy (v8.2.0 is served, and builds), and pinns is a C
# program built with make in place. The tags are CRI-O's own minus seccomp
# (no libseccomp headers needed; docs/runtimes.md says so) and minus the
# graph drivers that need cgo headers; the tier uses vfs storage. Cold, on 2
# cores, crio takes minutes (2 on an idle machine, 36 beside the other tool
# builds); a warm run is instant.
#
# Prints one path: the directory holding crio and pinns.
set -euo pipefail

CRIO_VERSION=${CRIO_VERSION:-v1.35.2}
CACHE=${MANIFOLD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/manifold}
crio_dir=$CACHE/crio-$CRIO_VERSION
mkdir -p "$CACHE"

# module_copy copies the cri-o module out of the Go module cache into $1 and
# makes it writable.
module_copy() {
  local src
  src=$(cd "$1" && GOFLAGS=-mod=mod go mod download -json "github.com/cri-o/cri-o@$CRIO_VERSION" | sed -n 's/.*"Dir": "\(.*\)",/\1/p') || return
  [ -d "$src" ] || { echo "go mod download gave no directory for cri-o $CRIO_VERSION" >&2; return 1; }
  cp -r "$src" "$1/cri-o" && chmod -R u+w "$1/cri-o"
}

# Each build is a subshell that stops at its first failure (errexit does not
# hold in a function that timed calls as "$@" || ...) and removes its copy
# however it ends; each binary lands under a .tmp name and is then renamed.
build_crio() (
  work=$(mktemp -d)
  trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
  module_copy "$work" &&
    cd "$work/cri-o" &&
    go mod edit -replace github.com/checkpoint-restore/go-criu/v8=github.com/checkpoint-restore/go-criu/v8@v8.2.0 &&
    CGO_ENABLED=1 GOFLAGS=-mod=mod go build -trimpath -o "$crio_dir/crio.tmp" \
      -tags "containers_image_openpgp exclude_graphdriver_btrfs exclude_graphdriver_devicemapper containers_image_ostree_stub" \
      ./cmd/crio &&
    mv "$crio_dir/crio.tmp" "$crio_dir/crio"
)

# pinns is a static C program; its Makefile writes bin/pinns.
build_pinns() (
  work=$(mktemp -d)
  trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
  module_copy "$work" &&
    make -s -C "$work/cri-o/pinns" >/dev/null &&
    cp "$work/cri-o/bin/pinns" "$crio_dir/pinns.tmp" &&
    mv "$crio_dir/pinns.tmp" "$crio_dir/pinns"
)

source "$(dirname "$0")/progress.sh"
lock_cache "$CACHE/.build-crio.lock"

mkdir -p "$crio_dir"
[ -x "$crio_dir/crio" ] || timed "crio $CRIO_VERSION" build_crio
[ -x "$crio_dir/pinns" ] || timed "pinns $CRIO_VERSION" build_pinns
echo "$crio_dir"
