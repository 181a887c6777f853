#!/usr/bin/env bash
# Supply-chain checks with cargo-deny (policy: deny.toml), and that every
# Cargo.toml lists only crates its code uses (cargo-machete).
#   licenses, bans, sources, unused dependencies: always; a finding fails.
#   advisories (RustSec vulnerabilities, unmaintained and yanked crates): when
#   the advisory database (a git repository on GitHub) can be fetched; a
#   finding fails. Without it the check is reported as NOT RUN, loudly, and
#   fails only with HCP_AUDIT_REQUIRE_ADVISORIES=1 (set it where GitHub is
#   reachable, so a network fault cannot pass for a clean audit).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v cargo-deny >/dev/null 2>&1 || {
  echo "hack/audit.sh: cargo-deny is missing, installing it" >&2
  bash hack/install-test-deps.sh
}
cargo deny --version
cargo deny check bans licenses sources
db=https://github.com/RustSec/advisory-db
if timeout 20 git ls-remote "$db" HEAD >/dev/null 2>&1; then
  cargo deny check advisories
else
  echo "hack/audit.sh: advisories NOT RUN: the RustSec database ($db) is unreachable from here" >&2
  if [ "${HCP_AUDIT_REQUIRE_ADVISORIES:-0}" = 1 ]; then exit 1; fi
fi

# Unused dependencies: cargo-machete reads each package's sources for the
# crates its Cargo.toml names. Built from crates.io once per version into
# the tools cache (about a minute), outside the checkout.
MACHETE_VERSION=0.9.2
tools="${HCP_TOOLS_BIN:-$HOME/.cache/hcp-ingress/tools/bin}"
machete="$tools/cargo-machete-$MACHETE_VERSION"
if [ ! -x "$machete" ]; then
  root="$(mktemp -d)"
  cargo install --quiet --locked --version "$MACHETE_VERSION" --root "$root" cargo-machete
  mkdir -p "$tools"
  mv "$root/bin/cargo-machete" "$machete"
  rm -rf "$root"
fi
"$machete"
