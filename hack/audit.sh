#!/usr/bin/env bash
# Supply-chain checks with cargo-deny (policy: deny.toml), and that every
# Cargo.toml lists only crates its code uses (cargo-machete).
#   licenses, bans, sources, unused dependencies: always; a finding fails.
#   advisories (RustSec vulnerabilities, unmaintained and yanked crates):
#   against the advisory database on GitHub when it can be fetched, else
#   offline against the snapshot beside the checkout
#   (../shared/rustsec-advisory-db, or HCP_ADVISORY_DB); a finding fails, and
#   an advisory we accept is listed in deny.toml with its reason. Which
#   database, its date and how many advisories it holds are printed. With
#   neither, the check is reported as NOT RUN, loudly, and fails only with
#   HCP_AUDIT_REQUIRE_ADVISORIES=1.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v cargo-deny >/dev/null 2>&1 || {
  echo "hack/audit.sh: cargo-deny is missing, installing it" >&2
  bash hack/install-test-deps.sh
}
cargo deny --version
cargo deny check bans licenses sources
db=https://github.com/RustSec/advisory-db
snapshot="${HCP_ADVISORY_DB:-../shared/rustsec-advisory-db}"
if timeout 20 git ls-remote "$db" HEAD >/dev/null 2>&1; then
  echo "hack/audit.sh: advisories: $db as of now" >&2
  cargo deny check advisories
elif [ -d "$snapshot/crates" ]; then
  # cargo-deny reads a git checkout at <db-path>/advisory-db-<hash of the
  # default URL> (the name cargo-deny 0.20 gives $db; another name fails the
  # check, it never passes it). The snapshot is a plain tree: committed into
  # a scratch checkout, read with fetching off, its age allowed as staleness.
  scratch="$(mktemp -d)"
  trap 'rm -rf "$scratch"' EXIT
  checkout="$scratch/dbs/advisory-db-3157b0e258782691"
  mkdir -p "$scratch/dbs"
  cp -r "$snapshot" "$checkout"
  git -C "$checkout" init -q
  git -C "$checkout" add -A
  git -C "$checkout" -c user.name=audit -c user.email=audit@localhost commit -qm snapshot
  date="$(awk '$1 == "date" {print $2}' "$snapshot/SNAPSHOT")"
  age_days=$(( ($(date +%s) - $(date -d "$date" +%s)) / 86400 + 1 ))
  sed "s|^yanked = |db-path = \"$scratch/dbs\"\nmaximum-db-staleness = \"P${age_days}D\"\nyanked = |" \
    deny.toml >"$scratch/deny.toml"
  count="$(find "$checkout/crates" -name 'RUSTSEC-*.md' | wc -l)"
  echo "hack/audit.sh: advisories: $db is unreachable; the snapshot in $snapshot ($(awk '$1 == "commit" {print $2}' "$snapshot/SNAPSHOT"), $date, $count advisories), offline" >&2
  cargo deny --offline --config "$scratch/deny.toml" check advisories
else
  echo "hack/audit.sh: advisories NOT RUN: the RustSec database ($db) is unreachable from here and there is no snapshot at $snapshot" >&2
  if [ "${HCP_AUDIT_REQUIRE_ADVISORIES:-0}" = 1 ]; then exit 1; fi
fi

# Unused dependencies: cargo-machete reads each package's sources for the
# crates its Cargo.toml names. Built from crates.io once per version into
# the tools cache (about a minute), outside the checkout.
machete="$(bash hack/install-tool.sh cargo-machete)"
"$machete"
