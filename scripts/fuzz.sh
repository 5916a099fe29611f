#!/usr/bin/env bash
# Runs every fuzz target of the module for a bounded time each
# (FUZZTIME, default 10s).
#
# `go test -fuzz` takes one target per run and links the instrumented test
# binary again for each, so each package's binary is built once here
# (`go test -c -fuzz=.`) and run once per target from the package's
# directory, with the flags `go test -fuzz` passes: the corpus in
# testdata/fuzz/ is read and a failing input is written there, and the
# generated corpus is kept where `go test` keeps it ($GOCACHE/fuzz/PKG).
#
# Two settings keep a short run useful and its verdict about the code:
#   - an input that widens coverage is minimized for at most
#     FUZZMINIMIZETIME (default 2s) instead of Go's 60 s, which took a
#     whole 10 s window in FuzzDecode (internal/archive) and fuzzed nothing;
#   - Go's fuzz coordinator before Go 1.27 can fail a target with a bare
#     "context deadline exceeded" at the end of -fuzztime, having found
#     nothing (golang/go#75804). Such a failure counts only when it wrote
#     a failing input; otherwise the target's corpus is run again without
#     fuzzing and that run decides.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime="${FUZZTIME:-10s}"
minimizetime="${FUZZMINIMIZETIME:-2s}"
cache="$(go env GOCACHE)/fuzz"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

inputs() { # inputs DIR TARGET: how many inputs testdata/fuzz/TARGET holds
  if [ -d "$1/testdata/fuzz/$2" ]; then find "$1/testdata/fuzz/$2" -type f | wc -l; else echo 0; fi
}

# fuzz DIR BIN PKG TARGET
fuzz() {
  local dir="$1" bin="$2" pkg="$3" target="$4" before rc
  echo "fuzz: $dir $target for $fuzztime"
  before="$(inputs "$dir" "$target")"
  set +e
  (cd "$dir" && "$bin" -test.run='^$' -test.fuzz="^${target}\$" -test.fuzztime="$fuzztime" \
    -test.fuzzminimizetime="$minimizetime" -test.fuzzcachedir="$cache/$pkg" \
    -test.paniconexit0 -test.timeout=10m) 2>&1 | tee "$work/out"
  rc="${PIPESTATUS[0]}"
  set -e
  if [ "$rc" -eq 0 ]; then
    return 0
  fi
  if [ "$(inputs "$dir" "$target")" -eq "$before" ] && grep -qx '    context deadline exceeded' "$work/out" &&
    ! grep -q 'Failing input written' "$work/out"; then
    echo "fuzz: $target: Go's coordinator reported its own deadline and wrote no failing input (golang/go#75804); running the corpus again without fuzzing"
    (cd "$dir" && "$bin" -test.run="^${target}\$" -test.paniconexit0 -test.timeout=10m)
    return
  fi
  return "$rc"
}

grep -rl --include='*_test.go' '^func Fuzz' . | xargs -n1 dirname | sort -u | while read -r dir; do
  pkg="$(go list "$dir")"
  bin="$work/$(echo "$pkg" | tr / _).test"
  started=$SECONDS
  go test -c -fuzz=. -o "$bin" "$dir"
  echo "fuzz: built $pkg ($((SECONDS - started))s)"
  grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go | sed 's/^func //' | sort | while read -r target; do
    fuzz "$dir" "$bin" "$pkg" "$target"
  done
done
