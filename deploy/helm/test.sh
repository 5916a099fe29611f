#!/usr/bin/env bash
# Tests of the Helm chart: lint and render it with the Helm pinned in this
# directory's go.mod and check the manifests (see README.md, "Tests"). This is a
# Go module of its own, so the main module's `go test ./...` does not reach it.
# The first run builds Helm into the Go build cache (a few minutes); later runs
# reuse it. Extra arguments go to `go test`, e.g. ./test.sh -count=1 -v
set -euo pipefail
cd "$(dirname "$0")"

unformatted="$(gofmt -l .)"
if [ -n "$unformatted" ]; then
	echo "gofmt needed:"
	echo "$unformatted"
	exit 1
fi
go vet ./...
go test "$@" ./...
