#!/usr/bin/env bash
# Runs each cmocka unit-test binary (bounded in time) and prints a final tally. A binary that
# passes but skipped tests or a pass ("[  SKIPPED ]": cannot run on this machine) is counted
# apart, so a skip never reads as a pass.
set -u
pass=0; fail=0; skipped=0
out=$(mktemp "${TMPDIR:-/tmp}/s3c-unit.XXXXXX")
trap 'rm -f "$out"' EXIT
for t in "$@"; do
    if timeout 120 "$t" 2>&1 | tee "$out"; [ "${PIPESTATUS[0]}" -eq 0 ]; then
        if grep -q '^\[  SKIPPED \]' "$out"; then skipped=$((skipped + 1)); else pass=$((pass + 1)); fi
    else
        fail=$((fail + 1)); echo "FAILED: $t"
    fi
done
echo "unit: $pass passed, $fail failed, $skipped passed with skips"
[ "$fail" -eq 0 ]
