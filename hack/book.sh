#!/usr/bin/env bash
# The documentation as a book, and the check that none of its links is
# broken (docs/development.md, "The book"):
#   1. every docs/*.md is a chapter of docs/SUMMARY.md;
#   2. mdBook builds docs/ (book.toml) into out/book;
#   3. lychee checks, offline, every link and #anchor of the built pages and
#      of README.md: between pages, to a heading, and to this repository's
#      own files, written as https://github.com/hcp-ingress/hcp-ingress/blob/main/PATH
#      (or tree/main/PATH) and looked up in this checkout. A relative link
#      out of docs/ is not in the book, and fails as "File not found".
#      Links to anywhere else on the web are not checked (no network).
# Any broken link fails the script. mdBook and lychee are pinned and
# installed once by hack/install-tool.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
repo=https://github.com/hcp-ingress/hcp-ingress

missing=0
for page in docs/*.md; do
  name="$(basename "$page")"
  [[ "$name" == SUMMARY.md ]] && continue
  grep -q "]($name)" docs/SUMMARY.md || {
    echo "hack/book.sh: $page is not a chapter of docs/SUMMARY.md" >&2
    missing=1
  }
done
(( missing == 0 )) || exit 1

mdbook="$(bash hack/install-tool.sh mdbook)"
lychee="$(bash hack/install-tool.sh lychee)"
out="$root/out/book"
rm -rf "$out"
"$mdbook" build --dest-dir "$out"
# print.html repeats every chapter, and so every broken link: left out.
"$lychee" --offline --include-fragments --no-progress \
  --root-dir "$out" \
  --remap "^$repo/(blob|tree)/main/(.*)\$ file://$root/\$2" \
  --exclude-path "$out/print.html" \
  "$out" README.md
