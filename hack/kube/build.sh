#!/usr/bin/env bash
# Builds a real Kubernetes control plane from the Go module proxy, once per
# version, into a cache outside the checkout:
#   etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kube-proxy
#   (the data-path tests program real iptables rules in a network namespace), kwok.
# A second run with the binaries present returns at once.
#
# kube-apiserver and friends live in the k8s.io/kubernetes module, whose
# go.mod replaces every k8s.io/* staging module by a local directory. A
# wrapper module requires k8s.io/kubernetes and replaces each of those by the
# published k8s.io/* v0.X.Y of the same release, which is what makes it
# buildable from the proxy.
#
# HCP_KUBE_VERSION=<release> builds another release than KUBE_VERSION (the
# version matrix builds KUBE_VERSION_MANAGEMENT_MIN and KUBE_VERSION_WORKLOAD_MIN
# so: 1.30 and 1.33 build with Go 1.26 as they are, and run on the same etcd).
#
# --with-kubelet builds the kubelet of the release too, from the same
# wrapper module and build cache (hack/node/build.sh asks for it).
# --management builds only what a management cluster runs (etcd,
# kube-apiserver, kube-controller-manager): the oldest management release
# never runs a node, a scheduler or kwok, and skipping them saves minutes of
# a cold CI run.
#
# Usage: [HCP_KUBE_VERSION=v1.X.Y] hack/kube/build.sh [--print-bin-dir | --with-kubelet | --management]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=versions.env
. "$here/versions.env"
KUBE_VERSION="${HCP_KUBE_VERSION:-$KUBE_VERSION}"
cache="${HCP_KUBE_CACHE:-$HOME/.cache/hcp-ingress/kube}/$KUBE_VERSION"
bin="$cache/bin"
if [[ "${1:-}" == "--print-bin-dir" ]]; then echo "$bin"; exit 0; fi

kube_cmds=(kube-apiserver kube-controller-manager kube-scheduler kube-proxy)
if [[ "${1:-}" == "--with-kubelet" ]]; then kube_cmds+=(kubelet); fi
with_kwok=1
if [[ "${1:-}" == "--management" ]]; then kube_cmds=(kube-apiserver kube-controller-manager); with_kwok=0; fi
want=(etcd "${kube_cmds[@]}")
if [[ $with_kwok == 1 ]]; then want+=(kwok kwok-stages.yaml); fi
missing=0
for b in "${want[@]}"; do [[ -x "$bin/$b" ]] || missing=1; done
if [[ $missing == 0 ]]; then echo "$bin"; exit 0; fi

command -v go >/dev/null || { echo "hack/kube/build.sh: go is not installed" >&2; exit 1; }
mkdir -p "$bin"
# The checksum database is not reachable from every machine that reaches the
# module proxy; the proxy is the source of truth here.
export GOSUMDB="${GOSUMDB:-off}" GOFLAGS="-mod=mod" GOTOOLCHAIN=local CGO_ENABLED=0
minor="v0.${KUBE_VERSION#v1.}"
log() { echo "hack/kube/build.sh: $*" >&2; }

# wrapper <dir> <module path> <require lines...>
wrapper() {
  local dir="$1" name="$2"; shift 2
  mkdir -p "$dir"
  { echo "module $name"; echo; echo "go 1.26"; echo; echo "require ("
    printf '\t%s\n' "$@"; echo ")"; } >"$dir/go.mod"
}

build_kube() {
  local dir="$cache/src/kubernetes"
  wrapper "$dir" hcp-ingress.dev/kube-build "k8s.io/kubernetes $KUBE_VERSION"
  local mod; mod="$(go env GOPROXY | cut -d, -f1)"
  # The staging modules, exactly as k8s.io/kubernetes names them.
  curl -fsSL "$mod/k8s.io/kubernetes/@v/$KUBE_VERSION.mod" \
    | awk '/=> \.\/staging\/src\// {print $1}' | sort -u >"$dir/staging.txt"
  [[ -s "$dir/staging.txt" ]] || { log "no staging modules found in k8s.io/kubernetes $KUBE_VERSION go.mod"; exit 1; }
  { echo; echo "replace ("
    while read -r m; do printf '\t%s => %s %s\n' "$m" "$m" "$minor"; done <"$dir/staging.txt"
    echo ")"; } >>"$dir/go.mod"
  # `kubectl version` and discovery report the release, as in a released binary.
  local minor_number="${KUBE_VERSION#v1.}"; minor_number="${minor_number%%.*}"
  local ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$KUBE_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor_number"
  local pkgs=() cmd
  for cmd in "${kube_cmds[@]}"; do [[ -x "$bin/$cmd" ]] || pkgs+=("k8s.io/kubernetes/cmd/$cmd"); done
  (( ${#pkgs[@]} )) || return 0
  # One `go build` for every command: the package graph is loaded once and
  # the binaries link side by side (a link is one core's work).
  log "building ${pkgs[*]##*/} $KUBE_VERSION (minutes on 2 cores the first time)"
  rm -rf "$bin/.build" && mkdir -p "$bin/.build"
  (cd "$dir" && go build -trimpath -ldflags "$ldflags" -o "$bin/.build/" "${pkgs[@]}")
  for cmd in "${pkgs[@]##*/}"; do mv "$bin/.build/$cmd" "$bin/$cmd"; done
  rmdir "$bin/.build"
}

build_etcd() {
  [[ -x "$bin/etcd" ]] && return
  local dir="$cache/src/etcd"
  wrapper "$dir" hcp-ingress.dev/etcd-build "go.etcd.io/etcd/server/v3 $ETCD_VERSION"
  log "building etcd $ETCD_VERSION"
  (cd "$dir" && go build -trimpath -ldflags "-s -w" -o "$bin/etcd.tmp" go.etcd.io/etcd/server/v3) && mv "$bin/etcd.tmp" "$bin/etcd"
}

build_kwok() {
  local dir="$cache/src/kwok"
  if [[ ! -x "$bin/kwok" ]]; then
    wrapper "$dir" hcp-ingress.dev/kwok-build "sigs.k8s.io/kwok $KWOK_VERSION"
    log "building kwok $KWOK_VERSION"
    (cd "$dir" && go build -trimpath -ldflags "-s -w" -o "$bin/kwok.tmp" sigs.k8s.io/kwok/cmd/kwok) && mv "$bin/kwok.tmp" "$bin/kwok"
  fi
  # kwok runs nothing without stages: its own "fast" ones (nodes Ready at
  # once, pods Ready once scheduled, deleted pods gone), from the module.
  if [[ ! -s "$bin/kwok-stages.yaml" ]]; then
    local stages; stages="$(go env GOMODCACHE)/sigs.k8s.io/kwok@$KWOK_VERSION/kustomize/stage"
    [[ -d "$stages" ]] || (cd "$dir" && go mod download sigs.k8s.io/kwok)
    for f in node/fast/node-initialize.yaml pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml; do
      echo "---"; cat "$stages/$f"
    done >"$bin/kwok-stages.yaml.tmp" && mv "$bin/kwok-stages.yaml.tmp" "$bin/kwok-stages.yaml"
  fi
}

build_etcd
build_kube
if [[ $with_kwok == 1 ]]; then build_kwok; fi
echo "$bin"
