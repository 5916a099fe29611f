#!/usr/bin/env bash
# Generates a Go client from api/openapi.json with oapi-codegen (pinned in
# this directory's go.mod), compiles it and checks that no enum became an
# interface{} (see doc.go). A Go module of its own, so the main module's
# `go test ./...` does not reach it. Extra arguments go to `go test`.
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
