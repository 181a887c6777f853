#!/usr/bin/env bash
# Builds hack/promql (Prometheus's own PromQL parser and engine: the metric
# names of expressions, and promqltest scripts) from the Go module proxy,
# once per version, into a cache outside the checkout. The chart tests use
# it on the dashboard's and the alerts' queries.
#   hack/install-promql.sh               # builds (a few minutes the first time) and prints the path
#   hack/install-promql.sh --print-path  # prints where it is (or would be)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
PROMETHEUS_VERSION="${PROMETHEUS_VERSION:-v0.316.0}"
bin="${HCP_TOOLS_BIN:-$HOME/.cache/hcp-ingress/tools/bin}"
# Keyed by main.go too: a changed tool is rebuilt, never a stale one used.
src_hash="$(sha256sum "$here/promql/main.go" | cut -c1-12)"
tool="$bin/promql-$PROMETHEUS_VERSION-$src_hash"
if [[ "${1:-}" == "--print-path" ]]; then echo "$tool"; exit 0; fi
if [[ -x "$tool" ]]; then echo "$tool"; exit 0; fi
command -v go >/dev/null || { echo "hack/install-promql.sh: go is not installed" >&2; exit 1; }
mkdir -p "$bin"
# A throw-away module around main.go, as hack/kube/build.sh does: the
# checksum database is not reachable from every machine that reaches the
# module proxy, so the proxy is the source of truth.
export GOSUMDB="${GOSUMDB:-off}" GOFLAGS="-mod=mod" GOTOOLCHAIN=local CGO_ENABLED=0
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cp "$here/promql/main.go" "$work/"
cat >"$work/go.mod" <<MOD
module hcp-ingress.dev/promql

go 1.26

require github.com/prometheus/prometheus $PROMETHEUS_VERSION
MOD
echo "hack/install-promql.sh: building the PromQL parser of prometheus $PROMETHEUS_VERSION into $bin" >&2
(cd "$work" && go mod tidy >/dev/null 2>&1 || true; go build -trimpath -ldflags "-s -w" -o "$tool.tmp" .)
mv "$tool.tmp" "$tool"
echo "$tool"
