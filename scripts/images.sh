#!/usr/bin/env bash
# Builds the container images from deploy/docker/ without pulling anything:
# static Go binaries are built on the host and copied into `FROM scratch`
# images with the host's CA bundle; the Redis image gets Debian's
# redis-server binary and the shared libraries it links.
#
# Names (the integration suites read the same variables):
#   CORREX_IMAGE_PREFIX  default correx/   (e.g. registry.example.com/correx/)
#   CORREX_IMAGE_TAG     default dev
#   -> ${PREFIX}ingest:${TAG} ${PREFIX}projector:${TAG} ${PREFIX}query:${TAG}
#   KAFKA_IMAGE          default ${PREFIX}kafkabroker:${TAG}
#   REDIS_IMAGE          default ${PREFIX}redis:${TAG}
#   -> ${PREFIX}versitygw:${TAG}, the integration suites' S3-compatible server
#      (the archive scenario), built from the Go module proxy at the version
#      scripts/deps.sh installs
# Set KAFKA_IMAGE or REDIS_IMAGE to another image (apache/kafka:4.1.0,
# redpandadata/redpanda:v25.2.1, redis:8) to use it instead: this script then
# does not build that image and the suites start the one named.
#
# Needs docker, go, ldd, redis-server (scripts/deps.sh installs it) and the
# CA bundle /etc/ssl/certs/ca-certificates.crt (Debian package ca-certificates).
set -euo pipefail
cd "$(dirname "$0")/.."

prefix="${CORREX_IMAGE_PREFIX:-correx/}"
tag="${CORREX_IMAGE_TAG:-dev}"
kafka_image="${KAFKA_IMAGE:-${prefix}kafkabroker:${tag}}"
redis_image="${REDIS_IMAGE:-${prefix}redis:${tag}}"
out="${CORREX_IMAGE_BUILD_DIR:-build/images}"
ca=/etc/ssl/certs/ca-certificates.crt

if ! docker info >/dev/null 2>&1; then
  echo "images: the Docker daemon is not reachable (docker info failed)" >&2
  exit 1
fi
if [ ! -s "$ca" ]; then
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "images: installing the Debian package ca-certificates for $ca" >&2
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq ca-certificates >/dev/null
  else
    echo "images: $ca is missing; run: sudo apt-get install -y ca-certificates" >&2
    exit 1
  fi
fi

# Without the buildx plugin the docker CLI refuses BuildKit builds; the
# classic builder handles these Dockerfiles (COPY only) just as well.
if ! docker buildx version >/dev/null 2>&1; then
  export DOCKER_BUILDKIT=0
fi
build() { # build IMAGE DOCKERFILE CONTEXT
  local started=$SECONDS log
  log="$(mktemp)"
  if ! docker build -t "$1" -f "$2" "$3" >"$log" 2>&1; then
    cat "$log" >&2
    rm -f "$log"
    echo "images: building $1 failed" >&2
    return 1
  fi
  rm -f "$log"
  echo "images: built $1 ($((SECONDS - started))s)"
}

started=$SECONDS
services=(ingest projector query)
binaries=("${services[@]}")
case "$kafka_image" in
  "${prefix}kafkabroker:${tag}") binaries+=(kafkabroker) ;;
  *) echo "images: KAFKA_IMAGE=$kafka_image is not built here (pull or build it yourself)" ;;
esac

mkdir -p "$out/bin"
pkgs=()
for b in "${binaries[@]}"; do pkgs+=("./cmd/$b"); done
CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$out/bin/" "${pkgs[@]}"
echo "images: built ${binaries[*]} ($((SECONDS - started))s)"

# context NAME: a build context with the binary, the CA bundle and an empty
# data directory. cp -p keeps modification times, so an unchanged file does
# not invalidate Docker's layer cache.
context() {
  local dir="$out/$1"
  mkdir -p "$dir/data"
  cp -p "$ca" "$dir/ca-certificates.crt"
  cp -p "$out/bin/$1" "$dir/$1"
  echo "$dir"
}
for s in "${binaries[@]}"; do
  case "$s" in
    kafkabroker) image="$kafka_image" ;;
    *) image="${prefix}${s}:${tag}" ;;
  esac
  build "$image" "deploy/docker/$s.Dockerfile" "$(context "$s")"
done

# versitygw, statically linked, with an empty bucket correx-archive.
versitygw_version="$(sed -n 's/^versitygw_version=//p' scripts/deps.sh)"
dir="$out/versitygw"
mkdir -p "$dir/data/correx-archive"
s3_started=$SECONDS
# The static build scripts/deps.sh installed, when it is this version, is
# copied (versitygw takes about 80 s to build); otherwise it is built here.
installed="$(go env GOPATH)/bin/versitygw"
if [ -x "$installed" ] && go version -m "$installed" 2>/dev/null | grep -q "mod[[:space:]]*github.com/versity/versitygw[[:space:]]*${versitygw_version}[[:space:]]" &&
   go version -m "$installed" | grep -q "CGO_ENABLED=0"; then
  cp -p "$installed" "$dir/versitygw"
  echo "images: versitygw ${versitygw_version} copied from $installed"
else
  GOBIN="$(cd "$dir" && pwd)" CGO_ENABLED=0 go install -trimpath -ldflags='-s -w' \
    "github.com/versity/versitygw/cmd/versitygw@${versitygw_version}"
  echo "images: built versitygw ${versitygw_version} ($((SECONDS - s3_started))s)"
fi
build "${prefix}versitygw:${tag}" deploy/docker/versitygw.Dockerfile "$dir"

case "$redis_image" in
  "${prefix}redis:${tag}")
    if ! command -v redis-server >/dev/null 2>&1; then
      scripts/deps.sh
    fi
    dir="$out/redis"
    rm -rf "$dir/rootfs"
    mkdir -p "$dir/rootfs/usr/bin" "$dir/data"
    # The binary itself: /usr/bin/redis-server is a symlink on Debian; copy
    # what it points to under the name redis-server (it picks its mode from
    # argv[0]).
    cp -pL "$(command -v redis-server)" "$dir/rootfs/usr/bin/redis-server"
    # Every library ldd resolves ("name => /path (addr)") and the loader
    # ("/lib64/ld-linux-x86-64.so.2 (addr)"), dereferenced, at its path.
    ldd "$(command -v redis-server)" | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}' |
      while read -r lib; do
        mkdir -p "$dir/rootfs$(dirname "$lib")"
        cp -pL "$lib" "$dir/rootfs$lib"
      done
    build "$redis_image" deploy/docker/redis.Dockerfile "$dir"
    ;;
  *) echo "images: REDIS_IMAGE=$redis_image is not built here (pull or build it yourself)" ;;
esac
echo "images: done in $((SECONDS - started))s"
