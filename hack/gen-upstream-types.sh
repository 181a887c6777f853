#!/usr/bin/env bash
# Regenerate the typed upstream kinds in src/api/upstream/ from the CRDs in
# ../shared/schemas: test/foundation/upstream_types.rs cuts each CRD to the
# fields hcp-ingress reads (its GENERATED table) and runs
#   kopium --schema=disabled --derive=Default --docs -f <the cut CRD>
# on it, formats the output with rustfmt and writes it under a header with
# both digests. Needs kopium
# (cargo install kopium --locked, into ~/.cargo/bin).
set -euo pipefail
cd "$(dirname "$0")/.."
UPDATE_UPSTREAM_TYPES=1 cargo test --locked --test foundation -- --exact \
  upstream_types::upstream_types_are_kopiums_output_for_the_shared_schemas
