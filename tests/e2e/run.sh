#!/usr/bin/env bash
# tests/e2e/run.sh [-j N] [FILTER ...] — runs the tests/e2e/NN-*.{sh,py,mjs} files (only
# those whose name starts with one of the FILTERs when given), N at a time (default: the
# machine's cores + 2; most files spend much of their time waiting on their servers), the
# longest first (tests/e2e/costs: seconds per file, measured), each bounded by E2E_TIMEOUT
# seconds (default 300). Every file runs in its own temp dir on its own free ports.
#
# A file whose first 30 lines hold the mark `e2e: solo` (its figures need the machine to
# themselves) runs alone: the runner lets the files in flight finish, runs it, then goes on.
#
# Each file's output is printed whole when it ends (never interleaved), with its tally; then
# a summary and the final line
#   e2e: N passed, N failed, N skipped
# (a file's tally may end in ", N skipped": checks that cannot run here, never counted as
# passed). Exits non-zero on any failure. E2E_KEEP=1 keeps temp dirs; S3CACHED_BIN picks the
# binary; E2E_FULL=1 runs the big-data and long-race files at full size (make test-full).
set -u
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
export S3CACHED_BIN=${S3CACHED_BIN:-$repo/build/s3cached}
per_file_timeout=${E2E_TIMEOUT:-300}
jobs=$(($(nproc 2>/dev/null || echo 2) + 2))
filters=()
while (($#)); do
    case $1 in
        -j) jobs=$2; shift 2 ;;
        -j*) jobs=${1#-j}; shift ;;
        -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) filters+=("$1"); shift ;;
    esac
done
[[ $jobs =~ ^[1-9][0-9]*$ ]] || { echo "run.sh: -j wants a positive number, got '$jobs'" >&2; exit 2; }

work=$(mktemp -d "${TMPDIR:-/tmp}/s3c-e2e-run.XXXXXX")
declare -A pid_of=() name_of_pid=() t0_of=()
stop_all() {
    local p
    for p in "${!name_of_pid[@]}"; do kill -TERM -- "-$p" 2>/dev/null || kill -TERM "$p" 2>/dev/null; done
    wait 2>/dev/null
}
trap 'rm -rf "$work"' EXIT
trap 'stop_all; exit 143' TERM INT

# --- the files, longest first ------------------------------------------------------------
matches() {
    local name=$1 f
    ((${#filters[@]} == 0)) && return 0
    for f in "${filters[@]}"; do [[ $name == "$f"* ]] && return 0; done
    return 1
}
declare -A cost=()
if [[ -r $here/costs ]]; then
    while read -r n s _; do [[ -n $n && $n != \#* ]] && cost[$n]=$s; done <"$here/costs"
fi
files=()
for f in "$here"/[0-9][0-9]-*; do
    name=$(basename "$f")
    case $name in *.sh|*.py|*.mjs) ;; *) continue ;; esac
    matches "$name" || continue
    files+=("${cost[$name]:-30} $name")
done
mapfile -t order < <(printf '%s\n' "${files[@]}" | sort -k1,1nr -k2,2 | awk 'NF {print $2}')

is_solo() { head -30 "$here/$1" | grep -q 'e2e: solo'; }

# --- one file ------------------------------------------------------------------------------
# start_file NAME: runs NAME in the background, in its own process group, its output in
# $work/NAME.log and its exit status in $work/NAME.rc.
start_file() {
    local name=$1 cmd
    case $name in
        *.sh)  cmd=(bash "$here/$name") ;;
        *.py)  cmd=(/usr/bin/python3 -u "$here/$name") ;;
        *.mjs) cmd=(node --no-warnings "$here/$name") ;;
    esac
    # Signal the test (TERM) at the limit so its own cleanup stops its servers; KILL 15 s later.
    LOG="$work/$name.log" RC="$work/$name.rc" \
        setsid bash -c 'cd "$1" && shift && timeout -k 15 "$@" >"$LOG" 2>&1 </dev/null; echo $? >"$RC"; times >"$RC.cpu"' \
        _ "$here" "$per_file_timeout" "${cmd[@]}" &
    pid_of[$name]=$!
    name_of_pid[$!]=$name
    t0_of[$name]=$(date +%s)
}

total_pass=0 total_fail=0 total_skip=0
summary=()
# finish_file NAME: prints NAME's output and tally, adds it to the totals.
finish_file() {
    local name=$1 rc line p=0 n=0 k=0 secs cpu extra=
    secs=$(($(date +%s) - t0_of[$name]))
    # CPU seconds of the file and what it waited for (its servers, its clients): bash's times
    cpu=$(sed -n 2p "$work/$name.rc.cpu" 2>/dev/null | awk '{ n = 0; for (i = 1; i <= 2; i++) {
        split($i, a, "m"); n += a[1] * 60 + a[2] } printf "%.0f", n }')
    rc=$(cat "$work/$name.rc" 2>/dev/null || echo 255)
    echo "=== $name"
    cat "$work/$name.log"
    line=$(grep -E '^[^ ]+: [0-9]+ passed, [0-9]+ failed(, [0-9]+ skipped)?$' "$work/$name.log" | tail -1)
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
    total_pass=$((total_pass + p))
    total_fail=$((total_fail + n))
    total_skip=$((total_skip + k))
    [[ $k -gt 0 ]] && extra=", $k skipped"
    is_solo "$name" && extra="$extra, solo"
    summary+=("$(printf '%-26s %s passed, %s failed%s (%ss, %s cpu-s)' "$name:" "$p" "$n" "$extra" "$secs" "${cpu:-?}")")
}

# wait_one: waits for any running file to end and finishes it.
wait_one() {
    local done_pid
    wait -n -p done_pid "${!name_of_pid[@]}" 2>/dev/null
    if [[ -z ${done_pid:-} ]]; then         # a pid that was already reaped: find it by its rc file
        local p
        for p in "${!name_of_pid[@]}"; do
            [[ -e $work/${name_of_pid[$p]}.rc ]] && { done_pid=$p; break; }
        done
        [[ -z ${done_pid:-} ]] && { sleep 0.2; return; }
    fi
    local name=${name_of_pid[$done_pid]}
    unset "name_of_pid[$done_pid]"
    finish_file "$name"
}

start=$(date +%s)
echo "e2e: ${#order[@]} files, $jobs at a time$([[ ${E2E_FULL:-} == 1 ]] && echo ', full size')"
for name in "${order[@]}"; do
    if is_solo "$name"; then
        while ((${#name_of_pid[@]} > 0)); do wait_one; done
        start_file "$name"
        wait_one
        continue
    fi
    while ((${#name_of_pid[@]} >= jobs)); do wait_one; done
    start_file "$name"
done
while ((${#name_of_pid[@]} > 0)); do wait_one; done

echo
echo "=== e2e summary ($(($(date +%s) - start))s, $jobs at a time)"
for s in "${summary[@]}"; do echo "$s"; done | sort
if [[ ${#summary[@]} -eq 0 ]]; then
    echo "no test file matches '${filters[*]}'"
    total_fail=1
fi
echo "e2e: $total_pass passed, $total_fail failed, $total_skip skipped"
[[ $total_fail -eq 0 ]]
