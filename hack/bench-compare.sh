#!/usr/bin/env bash
# Builds manifold at another git revision and prints the directory that holds
# its binaries (manifold, manifold-shim, and manifold-daemon where that
# revision has one), for make bench-compare's baseline arm.
#
#   bash hack/bench-compare.sh REV   # prints e.g. /root/.cache/manifold/baseline-7692623.../bin
#
# The revision's tree is taken with git archive (no worktree, nothing in the
# checkout changes) and built with its own go.mod, as its own Makefile built
# it: static, -trimpath, -s -w. Builds are cached by full commit hash, so a
# second comparison with the same revision starts at once. It builds what
# that revision has: manifold-daemon only exists since the daemon became a
# binary of its own (before, `manifold daemon` ran in the plugin binary).
set -euo pipefail
cd "$(dirname "$0")/.."
rev=${1:?usage: hack/bench-compare.sh REV}
commit=$(git rev-parse --verify --quiet "$rev^{commit}") || {
  echo "bench-compare: $rev is not a commit in this repository" >&2
  exit 2
}
CACHE=${MANIFOLD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/manifold}
out=$CACHE/baseline-$commit
if [ ! -f "$out/.complete" ]; then
  echo "bench-compare: building $rev ($commit) into $out" >&2
  rm -rf "$out"
  mkdir -p "$out/src" "$out/bin"
  git archive "$commit" | tar -x -C "$out/src"
  short=$(git rev-parse --short "$commit")
  # Both -X targets: older trees keep the version in main, newer in flow; an
  # -X for a name a tree lacks is ignored by the linker.
  ldflags="-s -w -X main.Version=$short -X github.com/manifold-cni/manifold/flow.Version=$short"
  for cmd in manifold manifold-daemon manifold-shim; do
    [ -d "$out/src/cmd/$cmd" ] || continue
    flags=$ldflags
    [ "$cmd" = manifold-shim ] && flags="-s -w"
    (cd "$out/src" && CGO_ENABLED=0 go build -trimpath -ldflags "$flags" -o "$out/bin/$cmd" "./cmd/$cmd")
  done
  rm -rf "$out/src"
  touch "$out/.complete"
fi
echo "$out/bin"
