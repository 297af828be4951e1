#!/usr/bin/env bash
# Makes sure a Docker engine answers. Installs docker.io and starts dockerd when none does.
# dockerd is started with no bridge and no iptables rules (sandboxes get no network of their own),
# with live-restore (sandboxes survive a restart of the engine), and in a session of its own
# (setsid), so it outlives the shell or CI step that started it.
set -euo pipefail
if docker info >/dev/null 2>&1; then exit 0; fi
if ! command -v dockerd >/dev/null 2>&1; then
  echo "ensure-docker: installing docker.io" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq docker.io >/dev/null
fi
if ! docker info >/dev/null 2>&1; then
  echo "ensure-docker: starting dockerd" >&2
  mkdir -p /var/log
  setsid nohup dockerd --bridge=none --iptables=false --ip6tables=false --live-restore \
    >/var/log/sandbench-dockerd.log 2>&1 </dev/null &
  for _ in $(seq 1 60); do
    if docker info >/dev/null 2>&1; then break; fi
    sleep 1
  done
fi
docker info >/dev/null 2>&1 || { echo "ensure-docker: dockerd did not answer; see /var/log/sandbench-dockerd.log" >&2; exit 1; }
