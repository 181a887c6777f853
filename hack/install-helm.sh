#!/usr/bin/env bash
# Builds helm from the Go module proxy, once per version, into a cache
# outside the checkout (helm.sh publishes no module-proxy binary, and its
# release tarballs are not reachable from every machine that reaches the
# proxy). A second run with the binary present returns at once.
#   hack/install-helm.sh                  # builds (a few minutes on 2 cores) and prints the path
#   hack/install-helm.sh --print-path     # prints where it is (or would be)
# The chart tests (`cargo test --test chart`) look there, then on PATH.
set -euo pipefail
HELM_VERSION="${HELM_VERSION:-v3.22.0}"
bin="${HCP_TOOLS_BIN:-$HOME/.cache/hcp-ingress/tools/bin}"
helm="$bin/helm"
if [[ "${1:-}" == "--print-path" ]]; then echo "$helm"; exit 0; fi
if [[ -x "$helm" ]] && [[ "$("$helm" version --template '{{.Version}}' 2>/dev/null)" == "$HELM_VERSION" ]]; then
  echo "$helm"; exit 0
fi
command -v go >/dev/null || { echo "hack/install-helm.sh: go is not installed" >&2; exit 1; }
mkdir -p "$bin"
# The ldflags of helm's own Makefile: without them `helm version` says
# "v3.22" and `helm template` assumes Kubernetes v1.20, which fails every
# chart with a kubeVersion constraint. helm v3.22 is built with client-go
# v0.37, i.e. Kubernetes 1.37.
pkg=helm.sh/helm/v3
ldflags="-s -w -X $pkg/internal/version.version=$HELM_VERSION -X $pkg/internal/version.gitTreeState=clean"
ldflags+=" -X $pkg/pkg/lint/rules.k8sVersionMajor=1 -X $pkg/pkg/lint/rules.k8sVersionMinor=37"
ldflags+=" -X $pkg/pkg/chartutil.k8sVersionMajor=1 -X $pkg/pkg/chartutil.k8sVersionMinor=37"
# The checksum database is not reachable from every machine that reaches the
# module proxy; the proxy is the source of truth here (as hack/kube/build.sh).
export GOSUMDB="${GOSUMDB:-off}" GOTOOLCHAIN=local CGO_ENABLED=0
echo "hack/install-helm.sh: building helm $HELM_VERSION into $bin (a few minutes the first time)" >&2
GOBIN="$bin" go install -trimpath -ldflags "$ldflags" "$pkg/cmd/helm@$HELM_VERSION"
got="$("$helm" version --template '{{.Version}}')"
[[ "$got" == "$HELM_VERSION" ]] || { echo "hack/install-helm.sh: built helm says $got, want $HELM_VERSION" >&2; exit 1; }
echo "$helm"
