#!/usr/bin/env bash
# tests/e2e/run.sh [FILTER] — runs every tests/e2e/NN-*.{sh,py,mjs} in order (only
# those whose name starts with FILTER when given), each bounded by E2E_TIMEOUT
# seconds (default 300), and prints per-file tallies and the final line
#   e2e: N passed, N failed, N skipped
# (a file's tally may end in ", N skipped": checks that cannot run here, never counted as passed).
# Exits non-zero on any failure. E2E_KEEP=1 keeps temp dirs. S3CACHED_BIN picks the binary.
set -u
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
export S3CACHED_BIN=${S3CACHED_BIN:-$repo/build/s3cached}
filter=${1:-}
per_file_timeout=${E2E_TIMEOUT:-300}
total_pass=0
total_fail=0
total_skip=0
summary=()
start=$(date +%s)
log=
trap '[[ -n $log ]] && rm -f "$log"' EXIT
trap 'exit 143' TERM INT

for f in "$here"/[0-9][0-9]-*; do
    name=$(basename "$f")
    case $name in *.sh|*.py|*.mjs) ;; *) continue ;; esac
    [[ -n $filter && $name != "$filter"* ]] && continue
    case $name in
        *.sh)  cmd=(bash "$f") ;;
        *.py)  cmd=(/usr/bin/python3 -u "$f") ;;
        *.mjs) cmd=(node --no-warnings "$f") ;;
    esac
    echo "=== $name"
    log=$(mktemp "${TMPDIR:-/tmp}/s3c-e2e-run.XXXXXX")
    t0=$(date +%s)
    # Signal the test (TERM) at the limit so its own cleanup stops its servers; KILL 15 s later.
    (cd "$here" && timeout -k 15 "$per_file_timeout" "${cmd[@]}") 2>&1 | tee "$log"
    rc=${PIPESTATUS[0]}
    secs=$(($(date +%s) - t0))
    line=$(grep -E '^[^ ]+: [0-9]+ passed, [0-9]+ failed(, [0-9]+ skipped)?$' "$log" | tail -1)
    p=0; n=0; k=0
    if [[ -n $line ]]; then
        p=$(sed -E 's/.*: ([0-9]+) passed, ([0-9]+) failed(, [0-9]+ skipped)?$/\1/' <<<"$line")
        n=$(sed -E 's/.*: ([0-9]+) passed, ([0-9]+) failed(, [0-9]+ skipped)?$/\2/' <<<"$line")
        [[ $line == *skipped ]] && k=$(sed -E 's/.*, ([0-9]+) skipped$/\1/' <<<"$line")
    fi
    if [[ $rc -eq 124 || $rc -eq 137 ]]; then
        echo "FAIL - $name did not finish within ${per_file_timeout}s"
        n=$((n + 1))
    elif [[ -z $line ]]; then
        echo "FAIL - $name printed no tally (exit status $rc)"
        n=$((n + 1))
    elif [[ $rc -ne 0 && $n -eq 0 ]]; then
        echo "FAIL - $name exited with status $rc but reported no failure"
        n=$((n + 1))
    fi
    rm -f "$log"
    total_pass=$((total_pass + p))
    total_fail=$((total_fail + n))
    total_skip=$((total_skip + k))
    skipped=; [[ $k -gt 0 ]] && skipped=", $k skipped"
    summary+=("$(printf '%-24s %s passed, %s failed%s (%ss)' "$name:" "$p" "$n" "$skipped" "$secs")")
done

echo
echo "=== e2e summary ($(($(date +%s) - start))s)"
for s in "${summary[@]}"; do echo "$s"; done
if [[ ${#summary[@]} -eq 0 ]]; then
    echo "no test file matches '$filter'"
    total_fail=1
fi
echo "e2e: $total_pass passed, $total_fail failed, $total_skip skipped"
[[ $total_fail -eq 0 ]]
