#!/usr/bin/env bash
# Usage: hack/lib/await-exit-code.sh FILE
# Waits until FILE holds an exit code, then exits with it: a job of
# hack/run-tests.py that stands for work hack/test.sh started in the
# background (the image's build), so that jobs can need it.
set -euo pipefail
file="$1"
until [[ -s "$file" ]]; do sleep 1; done
exit "$(cat "$file")"
