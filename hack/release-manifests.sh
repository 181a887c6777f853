#!/usr/bin/env bash
# Build the clusterctl release assets of hcp-ingress:
#   $OUT/addon-components.yaml  (config/default, kustomized)
#   $OUT/metadata.yaml          (copy of metadata.yaml)
#
# Usage: hack/release-manifests.sh
#   OUT=dir            output folder (default: out)
#   RELEASE_TAG=v0.1.1 image tag of the default image (default: the crate version)
#   IMAGE_REPO=...     image repository of the default image (default: ghcr.io/hcp-ingress/hcp-ingress)
#
# The output keeps the clusterctl variables (`${HCP_INGRESS_IMAGE:=...}`,
# ...) for `clusterctl init --addon hcp-ingress` to substitute. Needs
# `kubectl` (kustomize built in) or a standalone `kustomize`.
set -euo pipefail
cd "$(dirname "$0")/.."

OUT="${OUT:-out}"
IMAGE_REPO="${IMAGE_REPO:-ghcr.io/hcp-ingress/hcp-ingress}"
crate_version="$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n1)"
RELEASE_TAG="${RELEASE_TAG:-v${crate_version}}"
DEFAULT_IMAGE="ghcr.io/hcp-ingress/hcp-ingress:v0.1.0"   # what config/manager/manager.yaml says

if [[ ! "$RELEASE_TAG" =~ ^v([0-9]+)\.([0-9]+)\.([0-9]+)(-[0-9A-Za-z.-]+)?$ ]]; then
  echo "release-manifests: RELEASE_TAG=$RELEASE_TAG is not a semantic version (vMAJOR.MINOR.PATCH)" >&2
  exit 2
fi
major="${BASH_REMATCH[1]}" minor="${BASH_REMATCH[2]}"

# clusterctl refuses a release whose series is not in metadata.yaml.
if ! awk -v major="$major" -v minor="$minor" '
    /^[[:space:]]*-?[[:space:]]*major:/ { m = $NF }
    /^[[:space:]]*-?[[:space:]]*minor:/ { if (m == major && $NF == minor) found = 1 }
    END { exit !found }' metadata.yaml; then
  echo "release-manifests: metadata.yaml has no releaseSeries for ${major}.${minor} (RELEASE_TAG=$RELEASE_TAG)" >&2
  exit 2
fi

if command -v kubectl >/dev/null 2>&1; then
  kustomize=(kubectl kustomize)
elif command -v kustomize >/dev/null 2>&1; then
  kustomize=(kustomize build)
else
  echo "release-manifests: needs kubectl (with kustomize) or kustomize on PATH" >&2
  exit 2
fi

mkdir -p "$OUT"
tmp="$(mktemp)"
trap 'rm -f "$tmp"' EXIT
"${kustomize[@]}" config/default >"$tmp"
# Point the default of ${HCP_INGRESS_IMAGE:=...} at this release.
sed "s|${DEFAULT_IMAGE}|${IMAGE_REPO}:${RELEASE_TAG}|g" "$tmp" >"$OUT/addon-components.yaml"
cp metadata.yaml "$OUT/metadata.yaml"

echo "release-manifests: wrote $OUT/addon-components.yaml and $OUT/metadata.yaml (default image ${IMAGE_REPO}:${RELEASE_TAG})" >&2
