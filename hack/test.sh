#!/usr/bin/env bash
# The test command of the README: format, lints, the dependency audit, the
# image's build (hack/check-image-proxy.sh, then hack/build-image-tarball.sh
# packs those binaries as the image), then every test of the workspace,
# then the real-cluster tests again on the oldest releases we support (the version
# matrix, docs/compatibility.md).
# Installs the test peers (haproxy, nginx, iptables, ...) first when they are missing.
set -euo pipefail
cd "$(dirname "$0")/.."
# Each step's wall and CPU time, printed at the end (hack/lib/steps.sh).
# shellcheck source=lib/steps.sh
. hack/lib/steps.sh
# The disk this run builds on, first: a test build (Cargo.toml's dev profile)
# takes about 3 GB of it, the image's static and release builds 1 GB more;
# a run that fails on a full disk says so here.
df -h . >&2 || true
for tool in haproxy nginx iptables nft ip wrk dnsmasq cargo-deny musl-gcc shellcheck runc; do
  command -v "$tool" >/dev/null 2>&1 || PATH="$PATH:/usr/sbin:/sbin" command -v "$tool" >/dev/null 2>&1 || {
    echo "hack/test.sh: $tool is missing, installing the test peers" >&2
    bash hack/install-test-deps.sh
    break
  }
done
# tlslite-ng, in its own virtualenv, for the hostile-client TLS tests.
/opt/hcp-ingress-tls/bin/python3 -c 'import tlslite, kyber_py' >/dev/null 2>&1 \
  || bash hack/install-test-deps.sh
# The real API servers the controller tests run against: built once per
# version (minutes the first time), then found in the cache at once.
step "Kubernetes control plane (newest)" bash hack/kube/build.sh >/dev/null
# The real node (kubelet, containerd, the pause image: test/ingress/node.rs), likewise.
[ -x /usr/lib/cni/bridge ] || bash hack/install-test-deps.sh
step "node: kubelet, containerd (newest)" bash hack/node/build.sh >/dev/null
# clusterctl and the Cluster API manager (test/capi, test/release), likewise.
step "Cluster API (newest)" bash hack/capi/build.sh >/dev/null
# The version matrix (docs/compatibility.md): the oldest Kubernetes release of
# a management and of a workload cluster, and the oldest Cluster API minor.
# shellcheck source=kube/versions.env
. hack/kube/versions.env
# shellcheck source=capi/versions.env
. hack/capi/versions.env
step "Kubernetes $KUBE_VERSION_MANAGEMENT_MIN (management)" env HCP_KUBE_VERSION="$KUBE_VERSION_MANAGEMENT_MIN" bash hack/kube/build.sh --management >/dev/null
kube_management_min="$(HCP_KUBE_VERSION="$KUBE_VERSION_MANAGEMENT_MIN" bash hack/kube/build.sh --management)"
step "Kubernetes $KUBE_VERSION_WORKLOAD_MIN (workload)" env HCP_KUBE_VERSION="$KUBE_VERSION_WORKLOAD_MIN" bash hack/kube/build.sh >/dev/null
kube_workload_min="$(HCP_KUBE_VERSION="$KUBE_VERSION_WORKLOAD_MIN" bash hack/kube/build.sh)"
# A node's kubelet is never newer than its API server: the oldest workload
# release gets its own kubelet (the same containerd).
step "node: kubelet $KUBE_VERSION_WORKLOAD_MIN" env HCP_KUBE_VERSION="$KUBE_VERSION_WORKLOAD_MIN" bash hack/node/build.sh >/dev/null
node_workload_min="$(HCP_KUBE_VERSION="$KUBE_VERSION_WORKLOAD_MIN" bash hack/node/build.sh)"
step "Cluster API $CAPI_VERSION_MIN" env HCP_CAPI_VERSION="$CAPI_VERSION_MIN" bash hack/capi/build.sh >/dev/null
# Traefik, haproxy-ingress and k0smotron (test/ingress), likewise; haproxy-ingress's Lua
# needs Debian's lua-json.
[ -f /usr/share/lua/5.3/json.lua ] || bash hack/install-test-deps.sh
step "consumers: Traefik, haproxy-ingress, k0smotron" bash hack/consumers/build.sh >/dev/null
step "consumers: haproxytech, HAProxy 3.0" bash hack/consumers/haproxytech.sh --build-only >/dev/null
# helm for the chart tests, built once from the Go module proxy.
step "helm" bash hack/install-helm.sh >/dev/null
step "PromQL" bash hack/install-promql.sh >/dev/null
# The image's and the release's tools (test/release), likewise.
for tool in cargo-auditable ociimage actionlint; do step "tool: $tool" bash hack/install-tool.sh "$tool" >/dev/null; done
step "cargo fmt" cargo fmt --all -- --check
# The book (docs/, book.toml): built, and every link and anchor in it and in
# README.md checked, offline; a broken one fails here, before clippy and the
# suite.
step "hack/book.sh" bash hack/book.sh
step "cargo clippy" cargo clippy --workspace --all-targets --locked -- -D warnings
step "hack/audit.sh" bash hack/audit.sh
step "hack/check-image-proxy.sh (the image's musl release build)" bash hack/check-image-proxy.sh >"${out:=$(mktemp)}"
musl_bins="$(cat "$out")"
# The image without Docker, from those same binaries; test/release/image.rs
# checks it against the Dockerfile.
step "hack/build-image-tarball.sh" env BIN_DIR="$musl_bins" bash hack/build-image-tarball.sh >"$out"
HCP_IMAGE_TARBALL="$(cat "$out")"
rm -f "$out"
export HCP_IMAGE_TARBALL
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --workspace --locked --no-fail-fast
else
  step "cargo test --no-run (the test build)" cargo test --workspace --locked --no-run
  step "cargo test (every test binary)" cargo test --workspace --locked --no-fail-fast
fi

# The version matrix, after the run above on the newest releases (KUBE_VERSION,
# CAPI_VERSION): the same tests on the oldest releases we support. Every test
# that starts a management cluster runs it on KUBE_VERSION_MANAGEMENT_MIN and
# every workload cluster (and its node's kube-proxy) on
# KUBE_VERSION_WORKLOAD_MIN; a request of the controller either API server
# rejects fails the test (the harness reads their audit logs).
# `matrix <cargo test target> [test name filter]`; every one runs, then the
# script fails if one did. `--workspace`, as above: the same features, so the
# test binaries above are reused, not built again.
matrix_failed=()
matrix() {
  local target="$1"; shift
  echo "hack/test.sh: --test $target on management $KUBE_VERSION_MANAGEMENT_MIN, workload $KUBE_VERSION_WORKLOAD_MIN, Cluster API $CAPI_VERSION_MIN" >&2
  HCP_KUBE_BIN_MANAGEMENT="$kube_management_min" HCP_KUBE_BIN_WORKLOAD="$kube_workload_min" \
    HCP_NODE_BIN="$node_workload_min" HCP_CAPI_VERSION="$CAPI_VERSION_MIN" \
    step "matrix: --test $target" cargo test --workspace --locked --no-fail-fast --test "$target" -- "$@" \
    || matrix_failed+=("$target")
}
# The controller on both sides, the data path (kube-proxy of the workload
# release), steering and the doctor; the tests that run on the in-memory API
# (API faults) have no release to vary and stay out. kube-proxy's nftables
# mode (alpha on 1.30, behind its gate) runs service steering from the start,
# the hand-over held open; its walks and the take-over run on the newest
# release only.
matrix controller --skip faults:: --skip management::api_failures_are_retried \
  --skip management::leader_election_with_skewed_clocks --skip management::a_renewal_conflict \
  --skip management::a_failed_discovery \
  --skip each_steering_mode_and_switch_and_the_give_back_keep_pods_on_the_api_on_nftables \
  --skip each_steering_mode_and_switch_and_the_give_back_keep_pods_on_the_api_over_ipv6_on_nftables \
  --skip taking_the_node_proxy_over_from_k0smotron_keeps_pods_on_the_api_on_nftables
# clusterctl init, delete and move, and the ClusterResourceSet applied by the
# Cluster API manager, on the oldest Cluster API minor and management release.
matrix capi
# clusterctl's variable substitution of our release assets, same minor.
matrix release
# The real ingress controllers reading the routes the controller wrote into a
# 1.33 management cluster, a pod's whole path to its tenant's 1.30 API server,
# and the node proxy as a pod of a 1.30 kubelet (its kube-proxy's nftables
# mode is proven on 1.30 by the controller's data path above).
matrix ingress --skip with_kube_proxy_in_nftables_mode
# The chart's objects, as helm renders them, into a 1.33 management cluster.
matrix chart live::every_ci_values_file_installs
if (( ${#matrix_failed[@]} )); then
  echo "hack/test.sh: the version matrix failed: --test ${matrix_failed[*]}" >&2
  exit 1
fi
