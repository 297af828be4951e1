#!/bin/sh
# Installs the demo CLI for the current user from a release origin: downloads the npm tarball,
# checks it against SHA256SUMS, installs it globally under the user's npm prefix, and creates
# the kernel's virtual environment.
#   usage: DEMO_DOWNLOAD_BASE_URL=http://127.0.0.1:18741 sh install.sh VERSION
set -eu
version=${1:?usage: install.sh VERSION}
base=${DEMO_DOWNLOAD_BASE_URL:?set DEMO_DOWNLOAD_BASE_URL to the release origin}
tarball="demo-cli-$version.tgz"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
curl -fsS "$base/SHA256SUMS" -o "$tmp/SHA256SUMS"
curl -fsS "$base/$tarball" -o "$tmp/$tarball"
(cd "$tmp" && grep "  $tarball\$" SHA256SUMS | sha256sum -c --quiet -)
npm install --global --offline --no-audit --no-fund --loglevel=error "$tmp/$tarball" >/dev/null
python3 -m venv --without-pip "$HOME/.demo/kernel-venv"
echo "installed demo $version"
