#!/usr/bin/env bash
# Runs each cmocka unit-test binary (bounded in time) and prints a final tally.
set -u
pass=0; fail=0
for t in "$@"; do
    if timeout 120 "$t"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAILED: $t"; fi
done
echo "unit: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
