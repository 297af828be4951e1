#!/usr/bin/env bash
# Makes sure a Docker engine answers, one that can bound each sandbox's disk (`disk_gb`).
# Installs docker.io and starts dockerd when none does.
#
# dockerd is started with no bridge and no iptables rules (sandboxes get no network of their own),
# with live-restore (sandboxes survive a restart of the engine), and in a session of its own
# (setsid), so it outlives the shell or CI step that started it. Its data root is a file system
# that bounds a container's disk (`--storage-opt size`), made in a sparse image file and mounted
# loop: XFS with project quotas (`pquota`) under overlay2, where the kernel has XFS quotas (a
# write past the bound fails with ENOSPC); else btrfs with simple quotas (Linux 6.7+) under the
# btrfs driver (a write past the bound fails with EDQUOT, "Disk quota exceeded"). Simple quotas
# count what a container writes, not the image it shares, and stay exact when containers are
# removed; btrfs's full quota groups lose count there (the kernel marks them inconsistent and
# stops enforcing), so they are not used. Where neither can be made (no loop device, neither file
# system), dockerd starts on a plain data root and the controller warns that disk_gb is not
# enforced.
#
# Idempotent. An engine this script started (its pid file below, or the command line of the
# earlier version of this script) whose data root cannot bound a disk is restarted on the new
# file system, unless containers exist in it; an engine started otherwise is left alone.
# Images live in the data root: after a switch they are missing and must be built again
# (scripts/test, scripts/demo and .ci/run run images/node24-bookworm/build-offline.sh next).
#
# Where things are (environment, for a second engine beside the main one):
#   SANDBENCH_DOCKER_SOCKET     the engine's socket (/var/run/docker.sock)
#   SANDBENCH_DOCKER_STATE      the image file, its mount point and this script's pid file
#                               (/var/lib/sandbench)
#   SANDBENCH_DOCKER_EXEC_ROOT  dockerd's --exec-root (dockerd's default)
#   SANDBENCH_DOCKER_PIDFILE    dockerd's --pidfile (/var/run/docker.pid)
#   SANDBENCH_DOCKER_LOG        dockerd's output (/var/log/sandbench-dockerd.log)
#   SANDBENCH_DOCKER_PLAIN_ROOT the data root where no such file system can be made
#                               (/var/lib/docker)
#   SANDBENCH_DOCKER_FS_GB      the image file's size (default: 3/4 of the free space, at most 200)
set -euo pipefail

socket=${SANDBENCH_DOCKER_SOCKET:-/var/run/docker.sock}
state=${SANDBENCH_DOCKER_STATE:-/var/lib/sandbench}
exec_root=${SANDBENCH_DOCKER_EXEC_ROOT:-}
pidfile=${SANDBENCH_DOCKER_PIDFILE:-/var/run/docker.pid}
log=${SANDBENCH_DOCKER_LOG:-/var/log/sandbench-dockerd.log}
plain_root=${SANDBENCH_DOCKER_PLAIN_ROOT:-/var/lib/docker}
bounded_root=$state/docker
ours=$state/dockerd.pid
export DOCKER_HOST=unix://$socket
# The flags of every dockerd this script starts (the earlier version started it with these alone).
flags=(--bridge=none --iptables=false --ip6tables=false --live-restore)

say() { echo "ensure-docker: $*" >&2; }
answers() { docker info >/dev/null 2>&1; }

# The storage driver that bounds a container's disk on the file system holding folder $1:
# overlay2 on XFS mounted with project quotas, btrfs on btrfs with simple quotas; fails on any
# other.
bounding_driver() {
  local fs uuid
  fs=$(findmnt -n -o FSTYPE,OPTIONS -T "$1" 2>/dev/null) || return 1
  if [[ $fs == xfs\ * && $fs =~ [[:space:],](prjquota|pquota)(,|$) ]]; then echo overlay2; return 0; fi
  uuid=$(findmnt -n -o UUID -T "$1" 2>/dev/null) || return 1
  if [[ $fs == btrfs\ * && $(cat "/sys/fs/btrfs/$uuid/qgroups/mode" 2>/dev/null) == squota ]]; then
    echo btrfs
    return 0
  fi
  return 1
}

# Turns on btrfs simple quotas on the file system mounted at $1 (btrfs-progs 6.7 knows
# `quota enable --simple`; older ones do not, then the ioctl is made directly).
simple_quotas() {
  btrfs quota enable --simple "$1" 2>/dev/null && return 0
  python3 - "$1" <<'PY'
import fcntl, os, struct, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
# BTRFS_IOC_QUOTA_CTL: _IOWR(0x94, 40, {u64 cmd; u64 status}); cmd 4: enable simple quotas.
fcntl.ioctl(fd, (3 << 30) | (16 << 16) | (0x94 << 8) | 40, struct.pack("QQ", 4, 0))
PY
}

# Whether the running engine can bound a container's disk: overlay2 on XFS with project quotas,
# or btrfs.
engine_bounds() {
  local driver root
  read -r driver root < <(docker info --format '{{.Driver}} {{.DockerRootDir}}')
  [ -n "$driver" ] && [ "$(bounding_driver "$root" || true)" = "$driver" ]
}

# The pid of the dockerd of this socket (from its pid file), if it runs.
engine_pid() {
  local pid
  pid=$(cat "$pidfile" 2>/dev/null) || return 1
  [[ $pid =~ ^[0-9]+$ ]] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = dockerd ] && echo "$pid"
}

# Whether dockerd $1 is one this script started: the pid it recorded, or the command line of its
# earlier version (the four flags alone, besides where dockerd keeps its files).
started_here() {
  local pid=$1 args=() a rest=()
  [ "$(cat "$ours" 2>/dev/null)" = "$pid" ] && return 0
  mapfile -d '' args <"/proc/$pid/cmdline" || return 1
  for a in "${args[@]:1}"; do
    case $a in --host=* | -H | unix://* | --pidfile=* | --exec-root=* | --data-root=* | --storage-driver=*) ;; *) rest+=("$a") ;; esac
  done
  [ "${rest[*]}" = "${flags[*]}" ]
}

# Makes the image file $state/docker.$1 (xfs or btrfs), sparse, installing its mkfs if missing.
make_image() {
  local fs=$1 pkg free_gb size_gb out
  pkg=$([ "$fs" = xfs ] && echo xfsprogs || echo btrfs-progs)
  if ! command -v "mkfs.$fs" >/dev/null 2>&1; then
    say "installing $pkg"
    export DEBIAN_FRONTEND=noninteractive
    { apt-get update -qq && apt-get install -y -qq "$pkg" >/dev/null; } || return 1
  fi
  free_gb=$(($(df -B1 --output=avail "$state" | tail -n 1) / 1000000000))
  size_gb=${SANDBENCH_DOCKER_FS_GB:-$((free_gb * 3 / 4 < 200 ? free_gb * 3 / 4 : 200))}
  if [ "$size_gb" -lt 4 ]; then
    say "only $free_gb GB free under $state: no room for the engine's file system"
    return 1
  fi
  say "making a $size_gb GB $fs file system (a sparse file) in $state/docker.$fs"
  truncate -s "${size_gb}G" "$state/docker.$fs.new"
  if ! out=$("mkfs.$fs" -q "$state/docker.$fs.new" 2>&1); then
    say "mkfs.$fs failed: $out"
    rm -f "$state/docker.$fs.new"
    return 1
  fi
  if [ "$fs" = btrfs ]; then
    mkdir -p "$bounded_root"
    if ! { mount -o loop "$state/docker.$fs.new" "$bounded_root" && out=$(simple_quotas "$bounded_root" 2>&1); }; then
      say "cannot turn on btrfs simple quotas (Linux 6.7 or later): ${out:-mount failed}"
      umount "$bounded_root" 2>/dev/null || true
      rm -f "$state/docker.$fs.new"
      return 1
    fi
    umount "$bounded_root"
  fi
  mv "$state/docker.$fs.new" "$state/docker.$fs"
}

# Mounts the image file of $1 (xfs with project quotas, or btrfs) loop on the bounded data root.
mount_image() {
  local fs=$1 options=loop
  [ "$fs" = xfs ] && options=loop,pquota
  if ! mount -o "$options" "$state/docker.$fs" "$bounded_root" 2>/dev/null; then
    say "cannot mount $state/docker.$fs ($fs, -o $options) on $bounded_root"
    return 1
  fi
  bounding_driver "$bounded_root" >/dev/null && return 0
  say "$bounded_root is mounted without quotas"
  umount "$bounded_root"
  return 1
}

# Makes (once) and mounts the bounded data root: XFS with project quotas where the kernel has XFS
# quotas, else btrfs. Sets `driver`; fails saying why.
mount_bounded() {
  local fs
  mkdir -p "$bounded_root"
  chmod 0700 "$state"
  if mountpoint -q "$bounded_root"; then
    driver=$(bounding_driver "$bounded_root") && return 0
    say "$bounded_root is mounted, without quotas"
    return 1
  fi
  for fs in xfs btrfs; do
    if [ -f "$state/docker.$fs" ]; then
      mount_image "$fs" || return 1
      driver=$(bounding_driver "$bounded_root")
      return 0
    fi
  done
  for fs in xfs btrfs; do
    if make_image "$fs" && mount_image "$fs"; then
      driver=$(bounding_driver "$bounded_root")
      return 0
    fi
    rm -f "$state/docker.$fs"
  done
  return 1
}

# Stops dockerd $1 (and the containerd it ran) and waits for it to go.
stop_engine() {
  local pid=$1 containerd
  containerd=$(cat "${exec_root:-/var/run/docker}/containerd/containerd.pid" 2>/dev/null || true)
  kill -TERM "$pid"
  for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
  if kill -0 "$pid" 2>/dev/null; then say "dockerd ($pid) did not stop within 60 s"; exit 1; fi
  if [[ $containerd =~ ^[0-9]+$ ]] && [ "$(cat "/proc/$containerd/comm" 2>/dev/null)" = containerd ]; then
    kill -TERM "$containerd" 2>/dev/null || true
    for _ in $(seq 1 30); do kill -0 "$containerd" 2>/dev/null || break; sleep 1; done
  fi
}

mkdir -p "$state"
# An engine answers: keep it, or restart one of ours on the bounded data root.
if answers; then
  if engine_bounds; then exit 0; fi
  root=$(docker info --format '{{.DockerRootDir}}')
  pid=$(engine_pid || true)
  if [ -z "$pid" ] || ! started_here "$pid"; then
    say "the engine at $socket (not started by this script) keeps its data root $root where a container's disk cannot be bounded: disk_gb is not enforced there"
    exit 0
  fi
  count=$(docker ps -aq | wc -l)
  if [ "$count" -ne 0 ]; then
    say "the engine keeps its data root $root where a container's disk cannot be bounded (disk_gb is not enforced); it holds $count container(s), so it is left running: run this script again when they are gone"
    exit 0
  fi
  if ! mount_bounded; then
    say "cannot make a file system that bounds a container's disk; the engine keeps its data root $root, where disk_gb is not enforced"
    exit 0
  fi
  say "restarting dockerd ($pid) with its data root on $bounded_root ($driver)"
  stop_engine "$pid"
fi

if ! command -v dockerd >/dev/null 2>&1; then
  say "installing docker.io"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq docker.io >/dev/null
fi
if ! answers; then
  args=(--host="unix://$socket" --pidfile="$pidfile" "${flags[@]}")
  [ -n "$exec_root" ] && args+=(--exec-root="$exec_root")
  if mount_bounded; then
    args+=(--data-root="$bounded_root" --storage-driver="$driver")
    say "starting dockerd (data root $bounded_root, $driver)"
  else
    say "cannot make a file system that bounds a container's disk; dockerd keeps its data root in $plain_root, where disk_gb is not enforced"
    args+=(--data-root="$plain_root")
  fi
  mkdir -p "$(dirname "$log")"
  setsid nohup dockerd "${args[@]}" >>"$log" 2>&1 </dev/null &
  for _ in $(seq 1 60); do
    if answers; then break; fi
    sleep 1
  done
  pid=$(engine_pid || true)
  [ -n "$pid" ] && echo "$pid" >"$ours"
fi
answers || { say "dockerd did not answer; see $log"; exit 1; }
