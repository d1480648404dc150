#!/usr/bin/env bash
# tests/run-unit.sh [-j N] BIN...: runs each cmocka unit-test binary (bounded in time), N at a
# time (default 1), prints each one's output whole in the order given, and a final tally. A
# binary that passes but skipped tests or a pass ("[  SKIPPED ]": cannot run on this machine)
# is counted apart, so a skip never reads as a pass.
set -u
jobs=1
if [ "${1:-}" = -j ]; then
    jobs=${2:?-j needs a number}
    shift 2
fi
pass=0; fail=0; skipped=0
dir=$(mktemp -d "${TMPDIR:-/tmp}/s3c-unit.XXXXXX")
trap 'rm -rf "$dir"' EXIT
i=0
for t in "$@"; do
    while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do
        wait -n
    done
    (timeout 120 "$t" >"$dir/$i.out" 2>&1; echo $? >"$dir/$i.rc") &
    i=$((i + 1))
done
wait
i=0
for t in "$@"; do
    cat "$dir/$i.out"
    if [ "$(cat "$dir/$i.rc" 2>/dev/null)" = 0 ]; then
        if grep -q '^\[  SKIPPED \]' "$dir/$i.out"; then skipped=$((skipped + 1)); else pass=$((pass + 1)); fi
    else
        fail=$((fail + 1)); echo "FAILED: $t"
    fi
    i=$((i + 1))
done
echo "unit: $pass passed, $fail failed, $skipped passed with skips"
[ "$fail" -eq 0 ]
