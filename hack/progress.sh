# Sourced by the build scripts: timed runs a (cold, minutes-long) build with a
# line on stderr every 30 s, so that a cold run shows it is alive, and says how
# long it took.
timed() {
  local what=$1; shift
  local start=$SECONDS
  echo "building $what (cold: several minutes on 2 cores)" >&2
  ( while sleep 30; do echo "  ... still building $what ($((SECONDS - start)) s)" >&2; done ) &
  local ticker=$!
  local rc=0
  "$@" || rc=$?
  kill "$ticker" 2>/dev/null; wait "$ticker" 2>/dev/null || true
  ((rc == 0)) || { echo "building $what failed" >&2; return "$rc"; }
  echo "built $what in $((SECONDS - start)) s" >&2
}
