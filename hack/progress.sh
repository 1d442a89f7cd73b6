# Sourced by the build scripts. timed runs a (cold, minutes-long) build with a
# line on stderr every 30 s, so that a cold run shows it is alive, and says how
# long it took.
timed() {
  local what=$1; shift
  local start=$SECONDS
  echo "building $what (cold: several minutes on 2 cores)" >&2
  # 9>&-: the ticker and its sleep must not hold the cache lock (lock_cache)
  # after the build ends.
  ( while sleep 30; do echo "  ... still building $what ($((SECONDS - start)) s)" >&2; done ) 9>&- &
  local ticker=$!
  local rc=0
  "$@" || rc=$?
  kill "$ticker" 2>/dev/null; wait "$ticker" 2>/dev/null || true
  ((rc == 0)) || { echo "building $what failed" >&2; return "$rc"; }
  echo "built $what in $((SECONDS - start)) s" >&2
}

# lock_cache takes an exclusive flock on the file $1 for the rest of the
# script (the descriptor is closed when the script exits, however it exits),
# saying on stderr when it has to wait for another build.
lock_cache() {
  exec 9>"$1"
  if ! flock -n 9; then
    echo "waiting for another build to release $1" >&2
    flock 9
  fi
}
