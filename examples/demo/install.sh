#!/bin/sh
# Installs the demo CLI for the current user from a release origin laid out as the reference's
# (<origin>/releases/v<version>/<file>): the compiled release for this machine when the release
# has one (a single executable, Linux x64), else the npm tarball, each checked against
# SHA256SUMS; then the kernel's virtual environment. DEMO_INSTALL_METHOD=npm|compiled chooses.
#   usage: DEMO_DOWNLOAD_BASE_URL=http://127.0.0.1:18741 sh install.sh VERSION
set -eu
version=${1:?usage: install.sh VERSION}
base=${DEMO_DOWNLOAD_BASE_URL:?set DEMO_DOWNLOAD_BASE_URL to the release origin}
release="$base/releases/v$version"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
curl -fsS "$release/SHA256SUMS" -o "$tmp/SHA256SUMS"
fetch() {
  curl -fsS "$release/$1" -o "$tmp/$1"
  (cd "$tmp" && grep "  $1\$" SHA256SUMS | sha256sum -c --quiet -)
}
archive="demo-$version-linux-x64.tar.gz"
method=${DEMO_INSTALL_METHOD:-}
if [ -z "$method" ]; then
  method=npm
  if [ "$(uname -m)" = x86_64 ] && grep -q "  $archive\$" "$tmp/SHA256SUMS"; then method=compiled; fi
fi
echo "demo $version: the $method release"
case $method in
compiled)
  # Laid out as npm lays the package out (the kernel and benches where they would be), the
  # entry point the executable.
  fetch "$archive"
  mkdir -p "$HOME/.local/lib/node_modules" "$HOME/.local/bin"
  rm -rf "$HOME/.local/lib/node_modules/demo-cli"
  tar -xzf "$tmp/$archive" -C "$HOME/.local/lib/node_modules"
  ln -sf ../lib/node_modules/demo-cli/bin/demo "$HOME/.local/bin/demo"
  ;;
npm)
  fetch "demo-cli-$version.tgz"
  npm install --global --offline --no-audit --no-fund --loglevel=error "$tmp/demo-cli-$version.tgz" >/dev/null
  ;;
*)
  echo "install.sh: DEMO_INSTALL_METHOD is npm or compiled, not $method" >&2
  exit 2
  ;;
esac
python3 -m venv --without-pip "$HOME/.demo/kernel-venv"
echo "installed demo $version"
