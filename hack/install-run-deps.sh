#!/usr/bin/env bash
# What the local run (hack/local-run.sh, README command 1) runs besides our
# own binaries, and nothing else (Debian 12, as root): haproxy (2.6) and
# lua-json, which haproxy-ingress runs as the shared SNI ingress (its Lua
# scripts `require "json"`), nginx as the tenants' API servers, iproute2 +
# iptables for network namespaces and the DNAT kube-proxy would do, curl and
# openssl for the "pod" request and the certificates. Seconds, from Debian's
# archive. haproxy-ingress itself is built from the Go module proxy by
# hack/consumers/build.sh (Go is not installed here: Debian 12's is too old).
# The test suite's peers (a real Kubernetes control plane, Cluster API,
# helm, ...) are hack/install-test-deps.sh's.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
$SUDO apt-get update
$SUDO apt-get install -y --no-install-recommends \
  haproxy lua-json nginx iproute2 iptables openssl curl ca-certificates
# The packages start system services; the run starts its own instances.
$SUDO service haproxy stop >/dev/null 2>&1 || true
$SUDO service nginx stop >/dev/null 2>&1 || true
