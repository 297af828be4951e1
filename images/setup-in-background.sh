# Sourced by scripts/demo and scripts/test: sets up the Docker engine and the node:24-bookworm
# sandbox image in the background while the code compiles (the image's build mostly downloads
# and unpacks, the compiler works the CPUs). Its output goes to a log, shown once it is done.
#   setup_start [extra command]   start it (the extra command runs after the image, e.g. apt)
#   setup_wait                    wait for it; exit 1 with its log when it failed
# Nothing outlives the script: on exit it is waited for, and its log removed.
setup_log=$(mktemp "${TMPDIR:-/tmp}/sandbench-setup.XXXXXX")
setup_pid=
setup_start() {
  echo "setting up the Docker engine and the sandbox image while the code compiles (log: $setup_log)" >&2
  (
    images/ensure-docker.sh
    images/node24-bookworm/build-offline.sh node:24-bookworm
    if [ $# -gt 0 ]; then "$@"; fi
  ) >"$setup_log" 2>&1 &
  setup_pid=$!
  trap 'setup_cleanup' EXIT
}
setup_cleanup() {
  if [ -n "$setup_pid" ]; then wait "$setup_pid" 2>/dev/null || true; fi
  rm -f "$setup_log"
}
setup_wait() {
  local status=0
  wait "$setup_pid" || status=$?
  setup_pid=
  cat "$setup_log" >&2
  if [ "$status" -ne 0 ]; then
    echo "error: setting up the Docker engine or the sandbox image failed (status $status); its output is above" >&2
    exit 1
  fi
}
