#!/usr/bin/env bash
# Builds hack/promql (Prometheus's own PromQL parser and engine: the metric
# names of expressions, and promqltest scripts) from the Go module proxy,
# once per version, into a cache outside the checkout. The chart tests use
# it on the dashboard's and the alerts' queries.
#   hack/install-promql.sh               # builds (a few minutes the first time) and prints the path
#   hack/install-promql.sh --print-path  # prints where it is (or would be)
exec bash "$(dirname "$0")/install-tool.sh" promql "$@"
