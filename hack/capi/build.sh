#!/usr/bin/env bash
# Builds Cluster API's own binaries from the Go module proxy, once per
# version, into a cache beside kube-apiserver's:
#   clusterctl  (sigs.k8s.io/cluster-api/cmd/clusterctl)
#   capi-manager (the core manager, sigs.k8s.io/cluster-api/core)
# and lays out the local clusterctl repository of the providers clusterctl
# installs by default (core, kubeadm bootstrap, kubeadm control plane),
# kustomized from the module's own config/ as its release does.
# A second run with everything present returns at once.
#
# The module's go.mod replaces sigs.k8s.io/cluster-api/api by ./api (v1.14;
# in v1.13 api/ is a folder of the module itself); a wrapper module replaces
# it by the published sigs.k8s.io/cluster-api/api of the same release. The
# core manager and its config/ moved from the module's root (v1.13) to core/
# (v1.14): the script takes whichever the release has. Both binaries refuse
# an API server that reports v0.0.0-master and print their own version from
# ldflags: set as the release's build sets them.
#
# Usage: hack/capi/build.sh [--print-dir]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=versions.env
. "$here/versions.env"
CAPI_VERSION="${HCP_CAPI_VERSION:-$CAPI_VERSION}"
cache="${HCP_CAPI_CACHE:-$HOME/.cache/hcp-ingress/capi}/$CAPI_VERSION"
if [[ "${1:-}" == "--print-dir" ]]; then echo "$cache"; exit 0; fi

bin="$cache/bin" repo="$cache/repository"
ready() {
  [[ -x "$bin/clusterctl" && -x "$bin/capi-manager" ]] || return 1
  for p in cluster-api/core-components.yaml bootstrap-kubeadm/bootstrap-components.yaml \
           control-plane-kubeadm/control-plane-components.yaml; do
    [[ -s "$repo/${p%%/*}/$CAPI_VERSION/${p#*/}" ]] || return 1
  done
}
if ready; then echo "$cache"; exit 0; fi

command -v go >/dev/null || { echo "hack/capi/build.sh: go is not installed" >&2; exit 1; }
command -v kubectl >/dev/null || { echo "hack/capi/build.sh: kubectl (for kustomize) is not installed" >&2; exit 1; }
export GOSUMDB="${GOSUMDB:-off}" GOFLAGS="-mod=mod" GOTOOLCHAIN=local CGO_ENABLED=0
log() { echo "hack/capi/build.sh: $*" >&2; }

src="$cache/src"
mkdir -p "$bin" "$src"
cat >"$src/go.mod" <<MOD
module hcp-ingress.dev/capi-build

go 1.26

require sigs.k8s.io/cluster-api $CAPI_VERSION

replace sigs.k8s.io/cluster-api/api => sigs.k8s.io/cluster-api/api $CAPI_VERSION
MOD
(cd "$src" && go mod download sigs.k8s.io/cluster-api)
mod="$(go env GOMODCACHE)/sigs.k8s.io/cluster-api@$CAPI_VERSION"

ver="${CAPI_VERSION#v}"
ldflags="-s -w"
for kv in "gitMajor=${ver%%.*}" "gitMinor=$(cut -d. -f2 <<<"$ver")" "gitVersion=$CAPI_VERSION" \
          "gitTreeState=clean" "buildDate=1970-01-01T00:00:00Z"; do
  ldflags+=" -X sigs.k8s.io/cluster-api/version.$kv"
done
# The core manager's main package and config/: core/ since v1.14, the root before.
core=core manager=sigs.k8s.io/cluster-api/core
[[ -f "$mod/core/main.go" ]] || core=. manager=sigs.k8s.io/cluster-api
if [[ ! -x "$bin/clusterctl" || ! -x "$bin/capi-manager" ]]; then
  # One `go build` for both: the packages they share are loaded once and the
  # two link side by side. Go names a binary after its package's folder
  # (`core`, or `cluster-api` before v1.14): renamed to what the tests run.
  log "building clusterctl and the core manager $CAPI_VERSION (minutes on 2 cores the first time)"
  rm -rf "$bin/.build" && mkdir -p "$bin/.build"
  (cd "$src" && go build -trimpath -ldflags "$ldflags" -o "$bin/.build/" sigs.k8s.io/cluster-api/cmd/clusterctl "$manager")
  mv "$bin/.build/clusterctl" "$bin/clusterctl"
  mv "$bin/.build/${manager##*/}" "$bin/capi-manager"
  rmdir "$bin/.build"
fi

# The providers' components, as their release assets are made: kustomize of
# config/default (the module cache is read-only: kustomize reads it in place).
component() { # component <provider dir> <file> <config dir>
  local out="$repo/$1/$CAPI_VERSION"
  [[ -s "$out/$2" ]] && return
  mkdir -p "$out"
  log "kustomizing $3 into $1/$CAPI_VERSION/$2"
  kubectl kustomize "$mod/$3" >"$out/$2.tmp" && mv "$out/$2.tmp" "$out/$2"
  install -m 0644 "$mod/metadata.yaml" "$out/metadata.yaml"
}
component cluster-api core-components.yaml "$core/config/default"
component bootstrap-kubeadm bootstrap-components.yaml bootstrap/kubeadm/config/default
component control-plane-kubeadm control-plane-components.yaml controlplane/kubeadm/config/default
echo "$cache"
