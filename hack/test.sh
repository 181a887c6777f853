#!/usr/bin/env bash
# The test command of the README: format, lints, the dependency audit, the
# image's proxy build (hack/check-image-proxy.sh), then every test of the workspace.
# Installs the test peers (haproxy, nginx, iptables, ...) first when they are missing.
set -euo pipefail
cd "$(dirname "$0")/.."
for tool in haproxy nginx iptables ip wrk dnsmasq cargo-deny musl-gcc; do
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
bash hack/kube/build.sh >/dev/null
# clusterctl and the Cluster API manager (test/capi, test/release), likewise.
bash hack/capi/build.sh >/dev/null
# Traefik, haproxy-ingress and k0smotron (test/ingress), likewise; haproxy-ingress's Lua
# needs Debian's lua-json.
[ -f /usr/share/lua/5.3/json.lua ] || bash hack/install-test-deps.sh
bash hack/consumers/build.sh >/dev/null
bash hack/consumers/haproxytech.sh --build-only >/dev/null
# helm for the chart tests, built once from the Go module proxy.
bash hack/install-helm.sh >/dev/null
bash hack/install-promql.sh >/dev/null
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
bash hack/audit.sh
bash hack/check-image-proxy.sh
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --workspace --locked --no-fail-fast
else
  cargo test --workspace --locked --no-fail-fast
fi
