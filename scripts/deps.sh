#!/usr/bin/env bash
# Installs what the tests and `make run` need and are missing: redis-server
# and redis-cli (Debian package redis-server). Uses apt-get directly as root,
# through sudo when it works without a password, and otherwise prints the
# exact command to run.
set -euo pipefail

missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || missing+=(redis-cli)
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "deps: missing ${missing[*]}; installing the Debian package redis-server" >&2
if [ "$(id -u)" -eq 0 ]; then
  apt=(apt-get)
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  apt=(sudo -n apt-get)
else
  echo "deps: cannot install packages as $(id -un). Run:" >&2
  echo "    sudo apt-get update && sudo apt-get install -y redis-server" >&2
  exit 1
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "deps: apt-get not found; install redis-server (7.0 or later) with your package manager" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
"${apt[@]}" update -qq
"${apt[@]}" install -y -qq redis-server >/dev/null
redis-server --version
