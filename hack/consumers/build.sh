#!/usr/bin/env bash
# Builds the real ingress controllers that test/ingress runs against the
# routes hcp-ingress writes, from the Go module proxy, once per version, into
# a cache outside the checkout (beside hack/kube/build.sh's):
#   traefik-<version>/bin/traefik, plus the CRDs it watches (bin/crds/)
#   haproxy-ingress-<version>/bin/haproxy-ingress-controller, plus the
#     templates and Lua files it reads at run time (bin/rootfs/etc/...); it
#     runs the system's haproxy (Debian: haproxy, lua-json).
#   k0smotron-<version>/bin/k0smotron (its manager, every provider in one
#     binary; --enable-controller picks), plus its CRDs (bin/crds/) and
#     webhook configurations (bin/webhook/).
#   k0smotron-v2.1.0/bin/k0smotron: k0smotron v2 (v1beta2 APIs), from the
#     source at ../shared/k0smotron-v2.1.0 (the module proxy refuses its
#     module path), with its CRDs, the control-plane provider's webhook
#     configurations and its CRDs' conversion webhooks (bin/conversion/).
#   konnectivity-<version>/bin/proxy-server and bin/proxy-agent, the
#     konnectivity server a hosted control plane runs beside its API server
#     and the agent each workload node runs (apiserver-network-proxy),
#     and bin/proxy-agent.oci.tar, the agent as an image (the binary at
#     /proxy-agent, packed by hack/ociimage: no Docker, no registry) named
#     hcp-ingress.test/konnectivity-agent:<version>, for a real node to run.
# A second run with the binaries present returns at once.
#
# Usage: hack/consumers/build.sh                      builds what is missing, prints the cache root
#        hack/consumers/build.sh NAME...              builds only those consumers (when missing),
#                                                     prints the bin directory of each
#        hack/consumers/build.sh --print-bin-dir NAME prints the bin directory of one consumer
#                                                     without building
#        (NAME: traefik | haproxy-ingress | k0smotron | k0smotron-v2 | konnectivity)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=versions.env
. "$here/versions.env"
TRAEFIK_VERSION="${HCP_TRAEFIK_VERSION:-$TRAEFIK_VERSION}"
HAPROXY_INGRESS_VERSION="${HCP_HAPROXY_INGRESS_VERSION:-$HAPROXY_INGRESS_VERSION}"
K0SMOTRON_VERSION="${HCP_K0SMOTRON_VERSION:-$K0SMOTRON_VERSION}"
# k0smotron v2's source, read-only: it is copied before it is built.
K0SMOTRON_V2_SOURCE="${HCP_K0SMOTRON_V2_SOURCE:-$here/../../../shared/k0smotron-$K0SMOTRON_V2_VERSION}"
KONNECTIVITY_VERSION="${HCP_KONNECTIVITY_VERSION:-$KONNECTIVITY_VERSION}"
root="${HCP_CONSUMERS_CACHE:-$HOME/.cache/hcp-ingress/consumers}"
traefik_bin="$root/traefik-$TRAEFIK_VERSION/bin"
haproxy_ingress_bin="$root/haproxy-ingress-$HAPROXY_INGRESS_VERSION/bin"
k0smotron_bin="$root/k0smotron-$K0SMOTRON_VERSION/bin"
k0smotron_v2_bin="$root/k0smotron-$K0SMOTRON_V2_VERSION/bin"
konnectivity_bin="$root/konnectivity-$KONNECTIVITY_VERSION/bin"

if [[ "${1:-}" == "--print-bin-dir" ]]; then
  case "${2:-}" in
    traefik) echo "$traefik_bin" ;;
    haproxy-ingress) echo "$haproxy_ingress_bin" ;;
    k0smotron) echo "$k0smotron_bin" ;;
    k0smotron-v2) echo "$k0smotron_v2_bin" ;;
    konnectivity) echo "$konnectivity_bin" ;;
    *) echo "usage: $0 --print-bin-dir traefik|haproxy-ingress|k0smotron|k0smotron-v2|konnectivity" >&2; exit 2 ;;
  esac
  exit 0
fi

log() { echo "hack/consumers/build.sh: $*" >&2; }
need_go() { command -v go >/dev/null || { log "go is not installed"; exit 1; }; }
# The checksum database is not reachable from every machine that reaches the
# module proxy; the proxy is the source of truth here.
export GOSUMDB="${GOSUMDB:-off}" GOFLAGS="-mod=mod" GOTOOLCHAIN=local CGO_ENABLED=0

# Traefik's go.mod requires github.com/traefik/traefik/dynamic/ext, a nested
# module the v3 module zip leaves out (a zip never holds a nested module)
# and the proxy does not serve; Traefik's own go.mod replaces it by its
# directory. Its open-source content is two empty extension points
# (ext.HTTP, ext.Router) that dynamic.HTTP and dynamic.Router embed: the
# wrapper writes exactly that module and replaces the path by it.
# The containous fork of go-http-auth that v3.7 pins is not served either;
# the fork's previous pseudo-version (the one v3.3 to v3.6 pin) has the API
# Traefik calls, for basic/digest auth middlewares the tests do not use.
# A dependency's replace and exclude lines do not apply to the main module,
# so Traefik's are repeated here.
build_traefik() {
  [[ -x "$traefik_bin/traefik" && -s "$traefik_bin/crds/traefik.yaml" ]] && return
  need_go
  local dir="$root/traefik-$TRAEFIK_VERSION/src"
  mkdir -p "$dir/ext" "$traefik_bin"
  printf 'module github.com/traefik/traefik/dynamic/ext\n\ngo 1.24.0\n' >"$dir/ext/go.mod"
  cat >"$dir/ext/ext.go" <<'GO'
package ext

// HTTP is a dynamic.HTTP extension.
type HTTP struct{}

// Router is a dynamic.Router extension.
type Router struct{}
GO
  cat >"$dir/go.mod" <<MOD
module hcp-ingress.dev/traefik-build

go 1.26

require github.com/traefik/traefik/v3 $TRAEFIK_VERSION

replace github.com/traefik/traefik/dynamic/ext => ./ext

replace (
	github.com/abbot/go-http-auth => github.com/containous/go-http-auth v0.4.1-0.20200324110947-a37a7636d23e
	github.com/gorilla/mux => github.com/containous/mux v0.0.0-20250523120546-41b6ec3aed59
)

exclude github.com/tencentcloud/tencentcloud-sdk-go v3.0.83+incompatible
MOD
  if [[ ! -x "$traefik_bin/traefik" ]]; then
    log "building traefik $TRAEFIK_VERSION (minutes on 2 cores the first time)"
    local pkg=github.com/traefik/traefik/v3/pkg/version
    (cd "$dir" && go build -trimpath -ldflags "-s -w -X $pkg.Version=$TRAEFIK_VERSION" \
      -o "$traefik_bin/traefik.tmp" github.com/traefik/traefik/v3/cmd/traefik) && mv "$traefik_bin/traefik.tmp" "$traefik_bin/traefik"
  fi
  # The CRDs this Traefik watches, from the modules it was built from: its
  # own (the CRD provider waits for every traefik.io kind), and the Gateway
  # API release it requires (its Gateway provider also watches GRPCRoute
  # and BackendTLSPolicy, which ../shared/schemas does not hold).
  local src gw
  src="$(cd "$dir" && go list -m -f '{{.Dir}}' github.com/traefik/traefik/v3)"
  gw="$(cd "$dir" && go list -m -f '{{.Dir}}' sigs.k8s.io/gateway-api)"
  rm -rf "$traefik_bin/crds.tmp" && mkdir -p "$traefik_bin/crds.tmp"
  cp "$src/docs/content/reference/dynamic-configuration/kubernetes-crd-definition-v1.yml" "$traefik_bin/crds.tmp/traefik.yaml"
  for kind in grpcroutes backendtlspolicies; do
    cp "$gw/config/crd/standard/gateway.networking.k8s.io_$kind.yaml" "$traefik_bin/crds.tmp/"
  done
  chmod -R u+w "$traefik_bin/crds.tmp"
  rm -rf "$traefik_bin/crds" && mv "$traefik_bin/crds.tmp" "$traefik_bin/crds"
}

# haproxy-ingress builds as published; what the image adds (templates, Lua
# scripts) comes from the same module's rootfs/ and is copied beside the
# binary, for --rootfs-prefix style lookups by the test.
build_haproxy_ingress() {
  [[ -x "$haproxy_ingress_bin/haproxy-ingress-controller" && -s "$haproxy_ingress_bin/rootfs/etc/templates/haproxy/haproxy.tmpl" ]] && return
  need_go
  local dir="$root/haproxy-ingress-$HAPROXY_INGRESS_VERSION/src"
  mkdir -p "$dir" "$haproxy_ingress_bin"
  printf 'module hcp-ingress.dev/haproxy-ingress-build\n\ngo 1.26\n\nrequire github.com/jcmoraisjr/haproxy-ingress %s\n' \
    "$HAPROXY_INGRESS_VERSION" >"$dir/go.mod"
  log "building haproxy-ingress $HAPROXY_INGRESS_VERSION"
  local pkg=github.com/jcmoraisjr/haproxy-ingress/pkg/version
  (cd "$dir" && go build -trimpath -ldflags "-s -w -X $pkg.RELEASE=$HAPROXY_INGRESS_VERSION" \
    -o "$haproxy_ingress_bin/haproxy-ingress-controller.tmp" github.com/jcmoraisjr/haproxy-ingress/pkg) \
    && mv "$haproxy_ingress_bin/haproxy-ingress-controller.tmp" "$haproxy_ingress_bin/haproxy-ingress-controller"
  local src; src="$(cd "$dir" && go list -m -f '{{.Dir}}' github.com/jcmoraisjr/haproxy-ingress)"
  rm -rf "$haproxy_ingress_bin/rootfs.tmp" && mkdir -p "$haproxy_ingress_bin/rootfs.tmp"
  cp -r "$src/rootfs/etc" "$haproxy_ingress_bin/rootfs.tmp/"
  chmod -R u+w "$haproxy_ingress_bin/rootfs.tmp"
  rm -rf "$haproxy_ingress_bin/rootfs" && mv "$haproxy_ingress_bin/rootfs.tmp" "$haproxy_ingress_bin/rootfs"
}

# k0smotron is built as its own main module, from a copy of its module zip:
# its go.mod pins k8s.io/kubernetes and replaces staging modules, and a
# dependency's replace lines would not apply to a wrapper module. Its CRDs
# (v1beta1 only; k0smotron v2, which ../shared/schemas describes, serves
# v1beta2 and is built from its source below) and the webhook configurations it serves
# (the mutating one defaults a k0smotron Cluster's `ingress.deploy` to true)
# come from the same zip's config/.
build_k0smotron() {
  [[ -x "$k0smotron_bin/k0smotron" && -s "$k0smotron_bin/webhook/capi.yaml" ]] && return
  need_go
  local dir="$root/k0smotron-$K0SMOTRON_VERSION/src" zip
  mkdir -p "$k0smotron_bin"
  zip="$(cd / && go mod download -json "github.com/k0sproject/k0smotron@$K0SMOTRON_VERSION" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')"
  [[ -d "$zip" ]] || { log "github.com/k0sproject/k0smotron@$K0SMOTRON_VERSION is not on the module proxy"; exit 1; }
  if [[ ! -x "$k0smotron_bin/k0smotron" || ! -s "$dir/go.mod" ]]; then
    rm -rf "$dir" && cp -r "$zip" "$dir" && chmod -R u+w "$dir"
  fi
  if [[ ! -x "$k0smotron_bin/k0smotron" ]]; then
    log "building k0smotron $K0SMOTRON_VERSION (minutes on 2 cores the first time)"
    (cd "$dir" && go build -trimpath -ldflags "-s -w" -o "$k0smotron_bin/k0smotron.tmp" ./cmd) \
      && mv "$k0smotron_bin/k0smotron.tmp" "$k0smotron_bin/k0smotron"
  fi
  # Its CRDs; and CAPI's Machine from the Cluster API release it was built
  # with: its K0sControlPlane controller owns Machines, and a controller
  # whose kind is not served stops the manager (../shared/schemas has
  # Cluster but no Machine).
  # The standalone webhooks (k0smotron.io Cluster) and the CAPI ones
  # (K0smotronControlPlane, K0sControlPlane); both files name their
  # configurations alike (kustomize prefixes them on install).
  local capi; capi="$(cd "$dir" && go mod download -json sigs.k8s.io/cluster-api | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')"
  rm -rf "$k0smotron_bin/crds" "$k0smotron_bin/webhook" && mkdir -p "$k0smotron_bin/crds" "$k0smotron_bin/webhook"
  cp "$zip"/config/crd/*.yaml "$capi/config/crd/bases/cluster.x-k8s.io_machines.yaml" "$k0smotron_bin/crds/"
  cp "$zip/config/standalone/webhook/manifests.yaml" "$k0smotron_bin/webhook/standalone.yaml"
  cp "$zip/config/webhook/manifests.yaml" "$k0smotron_bin/webhook/capi.yaml"
  chmod -R u+w "$k0smotron_bin/crds" "$k0smotron_bin/webhook"
}

# k0smotron v2 from its source folder (../shared; the module proxy refuses
# github.com/k0sproject/k0smotron/v2 while serving every module it
# requires), copied first: the folder is read-only input and `go build`
# with -mod=mod writes go.sum. What its control-plane provider installs
# comes from the same source's config/: its CRDs (every k0smotron kind,
# v1beta1 and v1beta2 served, v1beta2 stored), CAPI's Machine from the
# Cluster API release it requires, the provider's webhook configurations
# (one file: the K0sControlPlane, K0smotronControlPlane and k0smotron.io
# Cluster hooks; the Cluster's mutating one still defaults
# `ingress.deploy` to true) and the conversion webhooks its kustomization
# patches into the two control-plane CRDs.
build_k0smotron_v2() {
  [[ -x "$k0smotron_v2_bin/k0smotron" && -s "$k0smotron_v2_bin/webhook/capi.yaml" ]] && return
  need_go
  local src="$K0SMOTRON_V2_SOURCE" dir="$root/k0smotron-$K0SMOTRON_V2_VERSION/src"
  [[ -s "$src/go.mod" ]] || { log "k0smotron $K0SMOTRON_V2_VERSION's source is not at $src (set HCP_K0SMOTRON_V2_SOURCE)"; exit 1; }
  grep -q "^module github.com/k0sproject/k0smotron/v2$" "$src/go.mod" \
    || { log "$src/go.mod is not github.com/k0sproject/k0smotron/v2"; exit 1; }
  mkdir -p "$k0smotron_v2_bin"
  if [[ ! -x "$k0smotron_v2_bin/k0smotron" || ! -s "$dir/go.mod" ]]; then
    rm -rf "$dir" && cp -r "$src" "$dir" && chmod -R u+w "$dir"
  fi
  if [[ ! -x "$k0smotron_v2_bin/k0smotron" ]]; then
    log "building k0smotron $K0SMOTRON_V2_VERSION (minutes on 2 cores the first time)"
    (cd "$dir" && go build -trimpath -ldflags "-s -w" -o "$k0smotron_v2_bin/k0smotron.tmp" ./cmd/) \
      && mv "$k0smotron_v2_bin/k0smotron.tmp" "$k0smotron_v2_bin/k0smotron"
  fi
  local capi; capi="$(cd "$dir" && go mod download -json sigs.k8s.io/cluster-api | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')"
  local out="$k0smotron_v2_bin"
  rm -rf "$out/crds" "$out/webhook" "$out/conversion"
  mkdir -p "$out/crds" "$out/webhook" "$out/conversion"
  cp "$dir"/config/crd/*.yaml "$capi/config/crd/bases/cluster.x-k8s.io_machines.yaml" "$out/crds/"
  cp "$dir/config/clusterapi/controlplane/webhook/manifests.yaml" "$out/webhook/capi.yaml"
  cp "$dir"/config/clusterapi/controlplane/patches/webhook_in_*.yaml "$out/conversion/"
  chmod -R u+w "$out/crds" "$out/webhook" "$out/conversion"
}

# apiserver-network-proxy is built as its own main module, from a copy of
# its module zip, for its pins. Its go.mod replaces the konnectivity-client
# module by its nested directory, which the zip leaves out (a zip never
# holds a nested module): the replace is dropped and the client of the same
# release comes from the module proxy.
build_konnectivity() {
  [[ -x "$konnectivity_bin/proxy-server" && -s "$konnectivity_bin/proxy-agent.oci.tar" ]] && return
  need_go
  local dir="$root/konnectivity-$KONNECTIVITY_VERSION/src" zip
  mkdir -p "$konnectivity_bin"
  zip="$(cd / && go mod download -json "sigs.k8s.io/apiserver-network-proxy@$KONNECTIVITY_VERSION" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')"
  [[ -d "$zip" ]] || { log "sigs.k8s.io/apiserver-network-proxy@$KONNECTIVITY_VERSION is not on the module proxy"; exit 1; }
  rm -rf "$dir" && cp -r "$zip" "$dir" && chmod -R u+w "$dir"
  (cd "$dir" && go mod edit -dropreplace sigs.k8s.io/apiserver-network-proxy/konnectivity-client \
    -require "sigs.k8s.io/apiserver-network-proxy/konnectivity-client@$KONNECTIVITY_VERSION")
  local cmd
  for cmd in server agent; do
    [[ -x "$konnectivity_bin/proxy-$cmd" ]] && continue
    log "building konnectivity $KONNECTIVITY_VERSION proxy-$cmd"
    (cd "$dir" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$konnectivity_bin/proxy-$cmd.tmp" "./cmd/$cmd") \
      && mv "$konnectivity_bin/proxy-$cmd.tmp" "$konnectivity_bin/proxy-$cmd"
  done
  # As the upstream image runs it: a non-root user, the binary alone.
  local tool work; tool="$(bash "$here/../install-tool.sh" ociimage)"; work="$(mktemp -d)"
  "$tool" -out "$work/layout" -name "hcp-ingress.test/konnectivity-agent:$KONNECTIVITY_VERSION" \
    -created 0 -os linux -arch amd64 -created-by hack/consumers/build.sh \
    -entry "file /proxy-agent 0755 0:0 $konnectivity_bin/proxy-agent" \
    -user 65532:65532 -entrypoint /proxy-agent >/dev/null
  tar --create --file "$konnectivity_bin/proxy-agent.oci.tar.tmp" --directory "$work/layout" --sort=name \
    --owner=0 --group=0 --numeric-owner oci-layout index.json blobs
  rm -rf "$work"
  mv "$konnectivity_bin/proxy-agent.oci.tar.tmp" "$konnectivity_bin/proxy-agent.oci.tar"
}

# One consumer alone (the local run needs haproxy-ingress only: Traefik and
# k0smotron take minutes each to build).
if [[ $# -gt 0 ]]; then
  for name in "$@"; do
    case "$name" in
      traefik | haproxy-ingress | k0smotron | k0smotron-v2 | konnectivity) ;;
      *) echo "usage: $0 [traefik|haproxy-ingress|k0smotron|k0smotron-v2|konnectivity ...]" >&2; exit 2 ;;
    esac
  done
  for name in "$@"; do
    case "$name" in
      traefik) build_traefik; echo "$traefik_bin" ;;
      haproxy-ingress) build_haproxy_ingress; echo "$haproxy_ingress_bin" ;;
      k0smotron) build_k0smotron; echo "$k0smotron_bin" ;;
      k0smotron-v2) build_k0smotron_v2; echo "$k0smotron_v2_bin" ;;
      konnectivity) build_konnectivity; echo "$konnectivity_bin" ;;
    esac
  done
  exit 0
fi

build_haproxy_ingress
build_traefik
build_k0smotron
build_k0smotron_v2
build_konnectivity
echo "$root"
