#!/usr/bin/env bash
# Runs every fuzz target of the module for a bounded time each
# (FUZZTIME, default 10s). `go test -fuzz` takes one target per run.
set -euo pipefail
fuzztime="${FUZZTIME:-10s}"
grep -rl --include='*_test.go' '^func Fuzz' . | sort | while read -r file; do
  pkg="./$(dirname "${file#./}")"
  grep -o '^func Fuzz[A-Za-z0-9_]*' "$file" | sed 's/^func //' | while read -r target; do
    echo "fuzz: $pkg $target for $fuzztime"
    go test -run='^$' -fuzz="^${target}\$" -fuzztime="$fuzztime" "$pkg"
  done
done
