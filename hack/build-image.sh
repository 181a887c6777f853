#!/usr/bin/env bash
# Build the hcp-ingress image for linux/amd64 and linux/arm64 with Docker Buildx
# (documented; needs a Docker engine, which CI does not have).
#
#   IMAGE=ghcr.io/hcp-ingress/hcp-ingress  image repository
#   TAG=v0.1.0                             default: v + the crate version
#   PLATFORMS=linux/amd64,linux/arm64      platforms to build
#   PUSH=1                                 push the multi-arch manifest list;
#                                          otherwise load the host's platform into
#                                          the local engine (kind load, tests)
set -euo pipefail
cd "$(dirname "$0")/.."

IMAGE="${IMAGE:-ghcr.io/hcp-ingress/hcp-ingress}"
crate_version="$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n1)"
TAG="${TAG:-v${crate_version}}"
PLATFORMS="${PLATFORMS:-linux/amd64,linux/arm64}"

command -v docker >/dev/null || { echo "build-image: docker is not installed" >&2; exit 2; }
docker buildx version >/dev/null 2>&1 || { echo "build-image: needs docker buildx" >&2; exit 2; }
docker info >/dev/null 2>&1 || { echo "build-image: no Docker engine is reachable" >&2; exit 2; }

if [ "${PUSH:-0}" = 1 ]; then
  output=(--push)
else
  # `--load` takes a single platform: the host's.
  case "$(uname -m)" in
    x86_64 | amd64) PLATFORMS=linux/amd64 ;;
    aarch64 | arm64) PLATFORMS=linux/arm64 ;;
  esac
  output=(--load)
fi

# A builder that can produce multi-platform images (the default docker driver cannot).
if ! docker buildx inspect hcp-ingress >/dev/null 2>&1; then
  docker buildx create --name hcp-ingress --driver docker-container >/dev/null
fi

docker buildx build \
  --builder hcp-ingress \
  --platform "$PLATFORMS" \
  --tag "${IMAGE}:${TAG}" \
  --label "org.opencontainers.image.version=${TAG}" \
  --label "org.opencontainers.image.revision=$(git rev-parse HEAD 2>/dev/null || echo unknown)" \
  "${output[@]}" \
  .

echo "build-image: ${IMAGE}:${TAG} (${PLATFORMS})" >&2
