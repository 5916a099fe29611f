#!/usr/bin/env bash
# Installs what the tests and `make run` need and are missing: redis-server
# and redis-cli (Debian package redis-server), python3 for the Python
# client example's test, and chromium (Debian package
# chromium) for the console's browser tests, and versitygw (an S3-compatible
# gateway over a directory, built from the Go module proxy) for the archive's
# tests against a real S3 server. Uses apt-get directly as root,
# through sudo when it works without a password, and otherwise prints the
# exact command to run.
set -euo pipefail

# versitygw, from the Go module proxy into $(go env GOPATH)/bin, where
# internal/s3test looks for it (about 80 s to build). It is built static
# (CGO_ENABLED=0, -trimpath), as the versitygw image needs it, so that
# scripts/images.sh copies this binary instead of building it again.
versitygw_version=v1.8.0
if ! command -v versitygw >/dev/null 2>&1 && [ ! -x "$(go env GOPATH)/bin/versitygw" ]; then
  echo "deps: missing versitygw; go install github.com/versity/versitygw/cmd/versitygw@${versitygw_version}" >&2
  CGO_ENABLED=0 go install -trimpath -ldflags='-s -w' "github.com/versity/versitygw/cmd/versitygw@${versitygw_version}"
fi

packages=()
missing=()
if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1; then
  packages+=(redis-server)
  missing+=("redis-server/redis-cli")
fi
if ! command -v python3 >/dev/null 2>&1; then
  packages+=(python3)
  missing+=(python3)
fi
if [ "${CORREX_SKIP_BROWSER:-}" != "1" ] && ! command -v chromium >/dev/null 2>&1; then
  packages+=(chromium)
  missing+=(chromium)
fi
if [ ${#packages[@]} -eq 0 ]; then
  exit 0
fi

echo "deps: missing ${missing[*]}; installing the Debian packages ${packages[*]}" >&2
if [ "$(id -u)" -eq 0 ]; then
  apt=(apt-get)
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  apt=(sudo -n apt-get)
else
  echo "deps: cannot install packages as $(id -un). Run:" >&2
  echo "    sudo apt-get update && sudo apt-get install -y ${packages[*]}" >&2
  exit 1
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "deps: apt-get not found; install ${packages[*]} with your package manager" \
    "(redis-server 7.0 or later; chromium for the browser tests, or set CORREX_SKIP_BROWSER=1)" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
"${apt[@]}" update -qq
"${apt[@]}" install -y -qq "${packages[@]}" >/dev/null
for p in "${packages[@]}"; do
  case "$p" in
    redis-server) redis-server --version ;;
    chromium) chromium --version ;;
  esac
done
