#!/usr/bin/env bash
# The test command: install deps, build, run every test with CTest. The last
# line printed is CTest's summary.
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh || exit 1
bash scripts/build.sh || exit 1
log=$(mktemp)
(cd build && ctest --output-on-failure -j2 --timeout 900) 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
grep -E 'tests passed|tests failed' "$log" | tail -n 1
rm -f "$log"
exit "$rc"
