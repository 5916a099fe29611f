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
# The targets run FUZZJOBS at a time (default: one per core), each with as
# many fuzzing workers as leaves the cores busy and no more (-parallel):
# every target still gets FUZZTIME of fuzzing and about the same executions,
# and the whole run takes a FUZZJOBS-th of the time one target at a time
# took. Each target's output is printed once it ends, in one piece.
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
cores="$(nproc)"
jobs="${FUZZJOBS:-$cores}"
if ! [[ "$jobs" =~ ^[1-9][0-9]*$ ]]; then
  echo "fuzz: FUZZJOBS=$jobs: want a positive whole number of targets to run at once" >&2
  exit 2
fi
workers=$((cores / jobs > 0 ? cores / jobs : 1))
cache="$(go env GOCACHE)/fuzz"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

inputs() { # inputs DIR TARGET: how many inputs testdata/fuzz/TARGET holds
  if [ -d "$1/testdata/fuzz/$2" ]; then find "$1/testdata/fuzz/$2" -type f | wc -l; else echo 0; fi
}

# fuzz DIR BIN PKG TARGET OUT: fuzzes TARGET, its output into OUT
fuzz() {
  local dir="$1" bin="$2" pkg="$3" target="$4" out="$5" before rc
  echo "fuzz: $dir $target for $fuzztime with $workers workers" >"$out"
  before="$(inputs "$dir" "$target")"
  set +e
  (cd "$dir" && "$bin" -test.run='^$' -test.fuzz="^${target}\$" -test.fuzztime="$fuzztime" \
    -test.fuzzminimizetime="$minimizetime" -test.fuzzcachedir="$cache/$pkg" -test.parallel="$workers" \
    -test.paniconexit0 -test.timeout=10m) >>"$out" 2>&1
  rc=$?
  set -e
  if [ "$rc" -eq 0 ]; then
    return 0
  fi
  if [ "$(inputs "$dir" "$target")" -eq "$before" ] && grep -qx '    context deadline exceeded' "$out" &&
    ! grep -q 'Failing input written' "$out"; then
    echo "fuzz: $target: Go's coordinator reported its own deadline and wrote no failing input (golang/go#75804); running the corpus again without fuzzing" >>"$out"
    (cd "$dir" && "$bin" -test.run="^${target}\$" -test.paniconexit0 -test.timeout=10m) >>"$out" 2>&1
    return
  fi
  return "$rc"
}

# The targets' list, one "DIR BIN PKG TARGET" a line, with every package's
# fuzzing binary built first (the builds use every core themselves).

grep -rl --include='*_test.go' '^func Fuzz' . | xargs -n1 dirname | sort -u | while read -r dir; do
  pkg="$(go list "$dir")"
  bin="$work/$(echo "$pkg" | tr / _).test"
  started=$SECONDS
  go test -c -fuzz=. -o "$bin" "$dir"
  echo "fuzz: built $pkg ($((SECONDS - started))s)" >&2
  grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go | sed 's/^func //' | sort | while read -r target; do
    echo "$dir $bin $pkg $target"
  done
done >"$work/targets"

# Run them, jobs at a time; a failure is reported with its output, and the
# run fails once every started target has ended.
started=$SECONDS
failed=0
n=0
running=0
finish() { # finish: waits for one target (it prints its own output) and counts a failure
  local rc=0
  wait -n || rc=$?
  running=$((running - 1))
  if [ "$rc" -ne 0 ]; then failed=$((failed + 1)); fi
}
while read -r dir bin pkg target; do
  if [ "$running" -ge "$jobs" ]; then finish; fi
  n=$((n + 1))
  out="$work/$n.out"
  (
    rc=0
    fuzz "$dir" "$bin" "$pkg" "$target" "$out" || rc=$?
    if [ "$rc" -ne 0 ]; then echo "fuzz: $target FAILED (exit $rc)" >>"$out"; fi
    cat "$out"
    exit "$rc"
  ) &
  running=$((running + 1))
done <"$work/targets"
while [ "$running" -gt 0 ]; do finish; done
echo "fuzz: $n targets, $jobs at a time, in $((SECONDS - started))s; $failed failed"
[ "$failed" -eq 0 ]
