#!/usr/bin/env bash
# Builds every program the tests run that Debian does not ship, each once per
# version into ~/.cache/hcp-ingress (a second run returns at once): the
# Kubernetes releases of the suite and of the version matrix
# (docs/compatibility.md), the real node, Cluster API, the ingress
# controllers and k0smotron, helm, PromQL and the image's and the book's
# tools. hack/install-test-deps.sh and hack/test.sh run it.
#
# Two streams side by side, balanced by what each costs from empty caches
# (docs/development.md#ci): a stream waiting on the module proxy, or on a
# link (one core's work), leaves the other stream the cores. Go's module and
# build caches take concurrent builds; the streams never build the same
# package of the same version.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=lib/steps.sh
. hack/lib/steps.sh
# shellcheck source=kube/versions.env
. hack/kube/versions.env
# shellcheck source=capi/versions.env
. hack/capi/versions.env

# The newest Kubernetes with its node (the kubelet links in the same `go
# build` as the control plane), then the oldest workload release and its
# kubelet, then Traefik and k0smotron v2 (from its source in ../shared).
kubernetes_and_nodes() {
  # hack/node/build.sh packs its images with it.
  step "tool: ociimage" bash hack/install-tool.sh ociimage >/dev/null
  step "Kubernetes $KUBE_VERSION and its node (kubelet, containerd)" bash hack/node/build.sh >/dev/null
  step "Kubernetes $KUBE_VERSION_WORKLOAD_MIN (workload) and its kubelet" \
    env HCP_KUBE_VERSION="$KUBE_VERSION_WORKLOAD_MIN" bash hack/node/build.sh >/dev/null
  step "consumers: Traefik" bash hack/consumers/build.sh traefik >/dev/null
  step "consumers: k0smotron v2" bash hack/consumers/build.sh k0smotron-v2 >/dev/null
}

# Both Cluster API minors, the oldest management release (no node:
# hack/kube/build.sh --management; after the first stream has built the etcd
# both use), the other consumers, and the tools.
management_and_the_rest() {
  step "Cluster API $CAPI_VERSION" bash hack/capi/build.sh >/dev/null
  step "Cluster API $CAPI_VERSION_MIN" env HCP_CAPI_VERSION="$CAPI_VERSION_MIN" bash hack/capi/build.sh >/dev/null
  step "Kubernetes $KUBE_VERSION_MANAGEMENT_MIN (management)" \
    env HCP_KUBE_VERSION="$KUBE_VERSION_MANAGEMENT_MIN" bash hack/kube/build.sh --management >/dev/null
  step "consumers: haproxy-ingress, k0smotron v1" bash hack/consumers/build.sh haproxy-ingress k0smotron >/dev/null
  # The real konnectivity server and agent (and the agent's image) the
  # node test runs through the shared ingress.
  step "consumers: konnectivity" bash hack/consumers/build.sh konnectivity >/dev/null
  # The haproxytech controller needs HAProxy >= 2.8: Debian trixie's,
  # built from Debian's source package beside it (Debian 12's 2.6 stays).
  step "consumers: haproxytech, HAProxy 3.0" bash hack/consumers/haproxytech.sh --build-only >/dev/null
  step "helm" bash hack/install-helm.sh >/dev/null
  step "PromQL" bash hack/install-promql.sh >/dev/null
  local tool
  for tool in cargo-auditable actionlint mdbook lychee; do
    step "tool: $tool" bash hack/install-tool.sh "$tool" >/dev/null
  done
}

kubernetes_and_nodes & first=$!
management_and_the_rest & second=$!
failed=0
wait "$first" || failed=1
wait "$second" || failed=1
if (( failed )); then
  echo "hack/test-tools.sh: a build failed (above)" >&2
  exit 1
fi
