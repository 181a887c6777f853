#!/usr/bin/env bash
# The test command of the README: the programs the tests run
# (hack/test-tools.sh), format, lints, the dependency audit, the image's
# build for amd64 and arm64 (hack/check-image-proxy.sh, then
# hack/build-image-tarball.sh packs those binaries as each platform's image
# and hack/build-image-index.sh both as the release's image index), then
# every test of the workspace (the node proxy's also as its arm64 build,
# under qemu) and the real-cluster tests again on the oldest releases we
# support (the version matrix, docs/compatibility.md), two test binaries at
# a time (hack/run-tests.py). Prints where the time went at the end.
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
for tool in haproxy nginx iptables nft ip wrk dnsmasq cargo-deny musl-gcc shellcheck runc aarch64-linux-gnu-gcc qemu-aarch64-static; do
  command -v "$tool" >/dev/null 2>&1 || PATH="$PATH:/usr/sbin:/sbin" command -v "$tool" >/dev/null 2>&1 || {
    echo "hack/test.sh: $tool is missing, installing the test peers" >&2
    bash hack/install-test-deps.sh
    break
  }
done
# tlslite-ng, in its own virtualenv, for the hostile-client TLS tests.
/opt/hcp-ingress-tls/bin/python3 -c 'import tlslite, kyber_py' >/dev/null 2>&1 \
  || bash hack/install-test-deps.sh
# The real node's CNI plugins (test/realnode) and haproxy-ingress's Lua
# (Debian's lua-json) come with the Debian packages.
[ -x /usr/lib/cni/bridge ] && [ -f /usr/share/lua/5.3/json.lua ] || bash hack/install-test-deps.sh
# The programs the tests run (Kubernetes releases, the real node, Cluster
# API, the ingress controllers, helm, the image's and the book's tools):
# built once per version (minutes the first time), then found in the cache
# at once.
step "hack/test-tools.sh" bash hack/test-tools.sh
# The version matrix (docs/compatibility.md): the oldest Kubernetes release of
# a management and of a workload cluster, and the oldest Cluster API minor.
# shellcheck source=kube/versions.env
. hack/kube/versions.env
# shellcheck source=capi/versions.env
. hack/capi/versions.env
# shellcheck source=lib/arm64-env.sh
. hack/lib/arm64-env.sh
kube_management_min="$(HCP_KUBE_VERSION="$KUBE_VERSION_MANAGEMENT_MIN" bash hack/kube/build.sh --print-bin-dir)"
kube_workload_min="$(HCP_KUBE_VERSION="$KUBE_VERSION_WORKLOAD_MIN" bash hack/kube/build.sh --print-bin-dir)"
# A node's kubelet is never newer than its API server: the oldest workload
# release has its own kubelet (the same containerd).
node_workload_min="$(HCP_KUBE_VERSION="$KUBE_VERSION_WORKLOAD_MIN" bash hack/node/build.sh --print-bin-dir)"
step "cargo fmt" cargo fmt --all -- --check
# The book (docs/, book.toml): built, and every link and anchor in it and in
# README.md checked, offline; a broken one fails here, before clippy and the
# suite.
step "hack/book.sh" bash hack/book.sh
# The image's release build (static musl, fat LTO: its last minutes are one
# link per binary, one core each) runs beside clippy, the audit and the test
# build, in a target folder of its own so neither waits on the other's lock,
# and on beside the first tests: only the tests that run the image wait for
# it (the job `image` below, which passes when the image is built). Then the
# image without Docker, from those same binaries; test/release/image.rs
# checks it against the Dockerfile. After it, the same for linux/arm64
# (cross-compiled, the same target folder: the build scripts and
# proc-macros, built for this host, are shared) and the image index of both,
# what the release workflow pushes (test/release/index.rs checks it).
HCP_IMAGE_TARBALL="$PWD/target/image/hcp-ingress-amd64.oci.tar"
HCP_IMAGE_INDEX_TARBALL="$PWD/target/image/hcp-ingress.oci.tar"
export HCP_IMAGE_TARBALL HCP_IMAGE_INDEX_TARBALL
arm64_tarball="$PWD/target/image/hcp-ingress-arm64.oci.tar"
image_dir="$(mktemp -d)"
# arm64's build runs at the lowest priority: the tests it runs beside come
# first (the data-path tests time a steering switch to the second), it
# takes the cores while they wait (on API servers, leases, idle
# connections held open).
build_image() {
  local arch="$1" what="(the image's musl release build)" nice=0
  [[ "$arch" == amd64 ]] || { what="(the image's musl release build, $arch)"; nice=19; }
  step "hack/check-image-proxy.sh $what" \
    env ARCH="$arch" CARGO_TARGET_DIR=target/image-build nice -n "$nice" bash hack/check-image-proxy.sh >"$image_dir/bins-$arch" || return
  local out="$HCP_IMAGE_TARBALL"
  [[ "$arch" == amd64 ]] || out="$arm64_tarball"
  step "hack/build-image-tarball.sh ($arch)" \
    env ARCH="$arch" BIN_DIR="$(cat "$image_dir/bins-$arch")" OUT="$out" bash hack/build-image-tarball.sh >/dev/null
}
build_arm64_and_index() {
  build_image arm64 || return
  step "hack/build-image-index.sh" \
    env OUT="$HCP_IMAGE_INDEX_TARBALL" bash hack/build-image-index.sh "$HCP_IMAGE_TARBALL" "$arm64_tarball" >/dev/null
}
# Each exit code, written when done (renamed into place: a reader never
# sees it half written).
exit_code() { echo "$2" >"$image_dir/$1.tmp" && mv "$image_dir/$1.tmp" "$image_dir/$1"; }
{ if build_image amd64; then rc=0; else rc=$?; fi
  exit_code rc "$rc"
  if (( rc == 0 )) && build_arm64_and_index; then rc=0; else rc=1; fi
  exit_code rc-arm64 "$rc"; } & image=$!
step "cargo clippy" cargo clippy --workspace --all-targets --locked -- -D warnings
step "hack/audit.sh" bash hack/audit.sh
step "cargo test --no-run (the test build)" cargo test --workspace --locked --no-run
# Every test binary of the workspace, then the version matrix, in two lanes
# (hack/run-tests.py): most of the suite's time is spent waiting on API
# servers, leases and idle connections, so one binary runs while another
# waits; the longest jobs first.
#
# The version matrix runs the same tests on the oldest releases we support:
# every test that starts a management cluster runs it on
# KUBE_VERSION_MANAGEMENT_MIN and every workload cluster (and its node's
# kube-proxy) on KUBE_VERSION_WORKLOAD_MIN, Cluster API on CAPI_VERSION_MIN;
# a request of the controller either API server rejects fails the test (the
# harness reads their audit logs).
matrix="HCP_KUBE_BIN_MANAGEMENT=$kube_management_min HCP_KUBE_BIN_WORKLOAD=$kube_workload_min"
matrix+=" HCP_NODE_BIN=$node_workload_min HCP_CAPI_VERSION=$CAPI_VERSION_MIN"
echo "hack/test.sh: the matrix runs on management $KUBE_VERSION_MANAGEMENT_MIN, workload $KUBE_VERSION_WORKLOAD_MIN, Cluster API $CAPI_VERSION_MIN" >&2
# The controller's binary runs as two jobs, its data-path tests (real
# kube-proxy, nodes as network namespaces) and the rest: the two halves of
# one set (the filters of one are the other's --skips). Two data-path runs
# or two real-node runs never overlap (needs=): those tests time their calls.
path="steering_path:: takeover:: no_kube_proxy::"
not_path="--skip steering_path:: --skip takeover:: --skip no_kube_proxy::"
# The controller on both sides, the data path (kube-proxy of the workload
# release), steering and the doctor; the tests that run on the in-memory API
# (API faults) have no release to vary and stay out. kube-proxy's nftables
# mode (alpha on 1.30, behind its gate) runs service steering from the start,
# the hand-over held open; its walks and the take-over run on the newest
# release only.
matrix_controller="--skip faults:: --skip management::api_failures_are_retried"
matrix_controller+=" --skip management::leader_election_with_skewed_clocks --skip management::a_renewal_conflict"
matrix_controller+=" --skip management::a_failed_discovery"
matrix_controller+=" --skip each_steering_mode_and_switch_and_the_give_back_keep_pods_on_the_api_on_nftables"
matrix_controller+=" --skip each_steering_mode_and_switch_and_the_give_back_keep_pods_on_the_api_over_ipv6_on_nftables"
matrix_controller+=" --skip taking_the_node_proxy_over_from_k0smotron_keeps_pods_on_the_api_on_nftables"
#
# The image's build is still running when the tests start: the job `image`
# waits for it and passes or fails with it; the jobs that run the image (the
# real node's tests in @ingress, the image's checks in @release) need it.
arm64_e2e="haproxy_ingress_reencrypts_no_sni passthrough_mode_forwards_bytes_untouched proxy_protocol_mode_routes_on_the_authority_tlv"
arm64_e2e+=" pooled_mode_gives_upgrades_a_dedicated_connection rotated_certificate_serves_the_next_handshake"
tests_rc=0
step "tests (hack/run-tests.py, two lanes)" python3 hack/run-tests.py --lanes 2 <<JOBS || tests_rc=$?
image -- bash hack/lib/await-exit-code.sh $image_dir/rc
main:controller -- @controller $not_path
main:controller-data-path -- @controller $path
matrix:controller $matrix -- @controller $not_path $matrix_controller
main:ingress needs=image -- @ingress
matrix:controller-data-path needs=main:controller-data-path $matrix -- @controller $path $matrix_controller
# The real ingress controllers reading the routes the controller wrote into a
# 1.33 management cluster, a pod's whole path to its tenant's 1.30 API server,
# and the node proxy as a pod of a 1.30 kubelet (its kube-proxy's nftables
# mode is proven on 1.30 by the controller's data path above).
matrix:ingress needs=main:ingress $matrix -- @ingress --skip with_kube_proxy_in_nftables_mode
main:capi -- @capi
main:chart -- @chart
# The node proxy built for arm64 (the image's binary), under Debian's
# qemu-user-static: its crate's unit tests, and the end-to-end runs that
# matter on a node: TLS re-encrypted with the SNI it adds and passed
# through, the PROXY header, pooled HTTP/2 with an upgrade, and a
# certificate and config reload. The amd64 binary runs every test of
# the binary (main:proxy_e2e).
arm64:proxy-lib nice=19 ${ARM64_BUILD_ENV[*]} CARGO_TARGET_AARCH64_UNKNOWN_LINUX_MUSL_RUNNER=$ARM64_RUNNER -- cargo test --locked --target $ARM64_TARGET -p hcp-ingress-proxy --lib
main:proxy_e2e -- @proxy_e2e
main -- @*
image-arm64 -- bash hack/lib/await-exit-code.sh $image_dir/rc-arm64
arm64:proxy_e2e needs=image-arm64 HCP_E2E_PROXY_BIN=$PWD/target/image-build/$ARM64_TARGET/release/hcp-ingress-proxy HCP_E2E_PROXY_RUNNER=$ARM64_RUNNER -- @proxy_e2e $arm64_e2e
# The image index (both platforms) beside the amd64 image the tests ran.
main:release needs=image-arm64 -- @release
# clusterctl init, delete and move, and the ClusterResourceSet applied by the
# Cluster API manager, on the oldest Cluster API minor and management release.
matrix:capi $matrix -- @capi
# clusterctl's variable substitution of our release assets, same minor.
matrix:release needs=image-arm64 $matrix -- @release
# The chart's objects, as helm renders them, into a 1.33 management cluster.
matrix:chart $matrix -- @chart live::every_ci_values_file_installs
JOBS
wait "$image" || true
rm -rf "$image_dir"
exit "$tests_rc"
