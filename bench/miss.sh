#!/usr/bin/env bash
# bench/miss.sh (make bench): cold misses of a data set larger than the page cache's dirty
# limits, through an S3 backend (nginx serving the store path-style) behind a 1 GB/s link
# (build/throttle), each against a direct GET across the same link and nginx proxy_cache in
# front of it, in one run, with the gateway's CPU per GB:
#   - cache on the disk, on tmpfs, and on a slowed disk (the fault shim's slow rule caps every
#     write to the cache directory at SLOW_DISK_BPS, for s3cached and for nginx alike)
#   - tmpfs in ROUNDS rounds, s3cached and nginx in swapped order each round, reported as the
#     median of the rounds (with 2, their mean): on a VM whose freed memory goes back to the host, whichever run
#     follows a run that freed gigabytes pays fresh-page faults, and a single run measures that
#   - the same on loopback, no link cap (CPU-bound on these machines)
# Ratios are to the direct GET of the same section; CPU is core-seconds per GB delivered
# (user + system of the server and its children, from /proc/PID/stat).
#   BENCH_DIR      data set and caches                    (default ${TMPDIR:-/tmp}/s3c-bench-miss)
#   N, SIZE        objects and their size                 (default 24 x 256M: 6 GiB)
#   CONCURRENCY    parallel readers                       (default 2)
#   SLOW_BPS       the backend link                       (default 1e9 B/s)
#   SLOW_DISK_BPS  the slowed cache disk                  (default 400000000 B/s)
#   TMPFS_DIR      the tmpfs cache directory's parent     (default /dev/shm)
#   S3C_ARGS       more s3cached flags for every run      (e.g. "--fill-window 0")
#   PREFAULT_GB    memory written before the runs        (default 8; 0 also skips the 4 GiB
#                  written before each tmpfs and slowed-disk run; see below)
#   ROUNDS         rounds of the tmpfs pair               (default 2)
#   ONLY=tmpfs     only the direct GET and the tmpfs rounds (each round's figures printed)
#   ONLY=disk      only the direct GET, nginx and s3cached with the cache on the disk, no loopback
#   LOOPBACK=0     skip the loopback section
#   PERF=WHAT,...  perf record -g the gateway during these runs: link-disk, link-tmpfs (every
#                  round, a file each), link-slow, loop-disk (PERF=1: link-disk; paths printed)
#   KEEP_DATA=0    remove the data set at the end         (default: kept for the next run)
# Everything it starts is stopped by pid; bounded (~5 minutes with the defaults).
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
SB=
for d in "${BENCH_SHARED:-}" "$repo/../shared/bench" "$repo/../../shared/bench"; do
    [[ -n $d && -x $d/http-large ]] && { SB=$(cd "$d" && pwd); break; }
done
if [[ -z $SB ]]; then
    echo "miss: reference scripts (shared/bench) not found next to the repo; nothing to compare against. Skipping."
    exit 0
fi
. "$SB/lib.sh"
BIN=${S3CACHED_BIN:-$repo/build/s3cached}
THROTTLE_BIN=${THROTTLE_BIN:-$(dirname "$BIN")/throttle}
SHIM=${S3C_FAULTINJ:-$(dirname "$BIN")/faults/faultinj.so}
for x in "$BIN" "$THROTTLE_BIN"; do
    [[ -x $x ]] || { echo "miss: no executable at $x (make all $(dirname "$BIN")/throttle)"; exit 1; }
done
[[ -f $SHIM ]] || { echo "miss: no fault shim at $SHIM (make $(dirname "$BIN")/faults/faultinj.so)"; exit 1; }
for t in nginx curl; do
    command -v "$t" >/dev/null || { echo "miss: $t is not installed (make deps-test)"; exit 1; }
done
W=${BENCH_DIR:-${TMPDIR:-/tmp}/s3c-bench-miss}
N=${N:-24}
SIZE=${SIZE:-256M}
C=${CONCURRENCY:-2}
SLOW_BPS=${SLOW_BPS:-1e9}
SLOW_DISK_BPS=${SLOW_DISK_BPS:-400000000}
TMPFS=${TMPFS_DIR:-/dev/shm}/s3c-bench-miss-$$
ROUNDS=${ROUNDS:-2}
STORE=$W/store
BUCKET=bench
RESULTS=$W/results.log
export DURATION=600 # TOOL=once reads each object once; this only bounds curl's time
mkdir -p "$STORE/$BUCKET"
unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY all_proxy ALL_PROXY
export no_proxy='*' NO_PROXY='*'
T0=$(date +%s)


UP_PORT=$(free_port)
PIDS=()
NGC_PORTS=()
PERF_PID=
cleanup() {
    local p
    [[ -n $PERF_PID ]] && stop_pid "$PERF_PID" 10
    for p in "${PIDS[@]}"; do stop_pid "$p" 10; done
    for p in "${NGC_PORTS[@]}"; do PORT=$p "$SB/nginx-cache" purge >/dev/null 2>&1 || true; done
    PORT=$UP_PORT "$SB/nginx-static" stop >/dev/null 2>&1 || true
    rm -rf "$W"/cache-* "$TMPFS"
    [[ ${KEEP_DATA:-1} == 1 ]] || rm -rf "$STORE"
}
trap cleanup EXIT
trap 'exit 143' TERM INT

# start_s3 CACHE_DIR BACKEND_URL [ENV=VALUE...] -- [EXTRA ARGS] — s3cached --anonymous; "PID PORT"
start_s3() {
    local cache=$1 backend=$2 port pid i
    shift 2
    local -a envs=()
    while [[ $# -gt 0 && $1 != -- ]]; do envs+=("$1"); shift; done
    [[ ${1:-} == -- ]] && shift
    port=$(free_port)
    rm -rf "$cache"
    mkdir -p "$cache"
    env "${envs[@]}" "$BIN" serve --listen "127.0.0.1:$port" --backend "$backend" --cache-dir "$cache" \
        --cache-size "${CACHE_SIZE:-8G}" --anonymous --log-level warn ${S3C_ARGS:-} "$@" >"$cache.log" 2>&1 </dev/null &
    pid=$!
    PIDS+=("$pid")
    for ((i = 0; i < 100; i++)); do
        kill -0 "$pid" 2>/dev/null || { echo "miss: s3cached exited; log:" >&2; tail -20 "$cache.log" >&2; return 1; }
        [[ $(curl -s --max-time 1 "http://127.0.0.1:$port/_/health") == ok* ]] && { echo "$pid $port"; return 0; }
        sleep 0.1
    done
    echo "miss: s3cached did not answer /_/health in 10 s" >&2
    return 1
}

# start_ngc CACHE_DIR UPSTREAM [ENV=VALUE...] — nginx proxy_cache; prints "PID PORT"
start_ngc() {
    local cache=$1 up=$2 port pid
    shift 2
    port=$(free_port)
    rm -rf "$cache"
    pid=$(env "$@" PORT="$port" UPSTREAM="$up" CACHE_DIR="$cache" CACHE_MAX="${NGC_MAX:-20g}" WORKERS=1 \
          LIFETIME=900 "$SB/nginx-cache") || return 1
    echo "$pid $port"
}
stop_ngc() { PORT=$1 "$SB/nginx-cache" purge >/dev/null 2>&1 || true; }

# run LABEL ENV... — http-large TOOL=once over the set; appends "LABEL<TAB>RESULT..." to RESULTS
run() {
    local label=$1 line
    shift
    line=$(env "$@" LIST="$LIST" CONCURRENCY="$C" TOOL=once timeout -k 5 900 "$SB/http-large" |
        grep '^RESULT' | tail -1) || true
    [[ -n $line ]] || { echo "miss: $label produced no RESULT" >&2; line="RESULT failed=1"; }
    printf '%s\t%s\n' "$label" "${line#RESULT }" >>"$RESULTS"
    printf '%-18s %s\n' "$label" "${line#RESULT }"
}
# cpu_per_gb LABEL — core-seconds of the server per GB it delivered
cpu_per_gb() { awk -v c="$(field "$1" server_cpu)" -v s="$(field "$1" secs)" -v b="$(field "$1" bytes)" \
    'BEGIN { if (c == "" || b + 0 == 0) print "n/a"; else printf "%.2f", c / 100 * s / (b / 1e9) }'; }
# gw_stats PORT — "uncached=BYTES backend_bytes=BYTES" from the gateway's /_/stats
gw_stats() { curl -s "http://127.0.0.1:$1/_/stats" | /usr/bin/python3 -c 'import json,sys
s = json.load(sys.stdin); c = s["cache"]
print("uncached_GB=%.2f backend_GB=%.2f" % (c.get("uncached_bytes", 0) / 1e9, s["backend"]["bytes_read"] / 1e9))' 2>/dev/null || echo "stats=n/a"; }

echo "== data set: $N x $SIZE in $STORE/$BUCKET/set"
DIR=$STORE/$BUCKET/set N=$N SIZE=$SIZE "$SB/make-dataset" >/dev/null
LIST=$STORE/$BUCKET/set/MANIFEST
: >"$RESULTS"
echo "   dirty limits: vm.dirty_ratio $(cat /proc/sys/vm/dirty_ratio)% vm.dirty_background_ratio $(cat /proc/sys/vm/dirty_background_ratio)% of $(free -g | awk '/^Mem:/{print $2}') GiB"

# The memory of a virtual machine is backed lazily, and these VMs give freed memory back to the
# host (virtio_balloon free page reporting): the first write to a page the host does not back
# costs a hypervisor fault (here 0.39 GB/s into tmpfs the first time, 2.8 GB/s right after), and
# whichever contender ran first after gigabytes were freed would pay it. Touch what the runs will
# use once, up front, and again right before each tmpfs run (on bare metal this costs a few
# seconds and changes nothing). PREFAULT_GB=0 skips both.
PREFAULT=${PREFAULT_GB:-8}
# prefault GIB — write GIB GiB into tmpfs and free them again
prefault() {
    [[ $PREFAULT != 0 ]] || return 0
    mkdir -p "$TMPFS"
    dd if=/dev/zero of="$TMPFS/prefault" bs=1M count=$(($1 * 1024)) status=none || true
    rm -f "$TMPFS/prefault"
}
prefault "$PREFAULT"
[[ $PREFAULT == 0 ]] || echo "   touched ${PREFAULT} GiB of memory first, and 4 GiB before each tmpfs and slowed-disk run (PREFAULT_GB=0 skips it)"

echo "== upstream: nginx serving $STORE path-style; the link: $THROTTLE_BIN at $SLOW_BPS B/s"
UP_PID=$(PORT=$UP_PORT ROOT=$STORE WORKERS=1 LIFETIME=900 "$SB/nginx-static")
UP=http://127.0.0.1:$UP_PORT
LINK_PORT=$(free_port)
"$THROTTLE_BIN" "$LINK_PORT" "$UP_PORT" "$SLOW_BPS" >"$W/throttle.log" 2>&1 &
PIDS+=("$!")
for ((i = 0; i < 50; i++)); do grep -q ready "$W/throttle.log" 2>/dev/null && break; sleep 0.1; done
LINK=127.0.0.1:$LINK_PORT
SLOW_RULE="slow:$SLOW_DISK_BPS:$W/cache-slow"
run warm-pagecache BASE_URL="$UP/$BUCKET/set" >/dev/null

# perf_start WHAT PID LABEL — perf record -g the gateway into perf-LABEL.data when PERF names
# WHAT (PERF=1: link-disk)
perf_start() {
    local want=${PERF:-0}
    [[ $want == 1 ]] && want=link-disk
    [[ ,$want, == *,$1,* ]] && command -v perf >/dev/null || return 0
    PERF_OUT=$W/perf-$3.data
    perf record -g -o "$PERF_OUT" -p "$2" >/dev/null 2>&1 &
    PERF_PID=$!
    sleep 0.5
}
perf_stop() {
    [[ -n $PERF_PID ]] || return 0
    kill -INT "$PERF_PID" 2>/dev/null || true
    wait "$PERF_PID" 2>/dev/null || true
    PERF_PID=
    echo "   perf report -i $PERF_OUT --no-children --sort sym"
}

# s3c_run LABEL CACHE_DIR UPSTREAM_HOSTPORT [ENV=VALUE...] — one cold run through a new s3cached
# (recorded by perf when PERF names PREFIX-KIND of LABEL PREFIX-s3c-KIND[-ROUND]), its /_/stats
# line, then the gateway stopped and its cache removed
s3c_run() {
    local label=$1 cache=$2 up=$3 pid port kind
    shift 3
    read -r pid port < <(start_s3 "$cache" "http://$up" "$@") || return 1
    PIDS+=("$pid")
    kind=${label#*-s3c-}
    perf_start "${label%%-*}-${kind%%-*}" "$pid" "$label"
    run "$label" BASE_URL="http://127.0.0.1:$port/$BUCKET/set" SERVER_PID="$pid" BACKEND_PID="$UP_PID"
    perf_stop
    echo "   $(gw_stats "$port")"
    stop_pid "$pid" 10
    rm -rf "$cache"
}
# ngc_run LABEL CACHE_DIR UPSTREAM_HOSTPORT [ENV=VALUE...] — the same through a new nginx
# proxy_cache (no perf, no stats line)
ngc_run() {
    local label=$1 cache=$2 up=$3 pid port
    shift 3
    read -r pid port < <(start_ngc "$cache" "$up" "$@") || return 1
    NGC_PORTS+=("$port")
    run "$label" BASE_URL="http://127.0.0.1:$port/$BUCKET/set" SERVER_PID="$pid" BACKEND_PID="$UP_PID"
    stop_ngc "$port"
    rm -rf "$cache"
}
# tmpfs_run WHO LABEL UPSTREAM_HOSTPORT — one cold run of WHO (s3c or nginx) with its cache on
# tmpfs (TMPFS_CACHE_SIZE, 3G), memory touched right before and freed after
tmpfs_run() {
    rm -rf "$TMPFS"
    prefault 4
    mkdir -p "$TMPFS"
    if [[ $1 == s3c ]]; then
        CACHE_SIZE=${TMPFS_CACHE_SIZE:-3G} s3c_run "$2" "$TMPFS/cache" "$3" || return 1
    else
        NGC_MAX=${TMPFS_CACHE_SIZE:-3G} ngc_run "$2" "$TMPFS/cache-ngx" "$3" || return 1
    fi
    rm -rf "$TMPFS"
}
# tmpfs_rounds LABEL_PREFIX UPSTREAM_HOSTPORT — ROUNDS rounds of the tmpfs pair, s3cached first in
# odd rounds and nginx first in even ones; labels PREFIX-s3c-tmpfs-R and PREFIX-nginx-tmpfs-R
tmpfs_rounds() {
    local r who order
    for ((r = 1; r <= ROUNDS; r++)); do
        if ((r % 2)); then order="s3c nginx"; else order="nginx s3c"; fi
        for who in $order; do tmpfs_run "$who" "$1-$who-tmpfs-$r" "$2" || return 1; done
    done
}
# median LABEL KEY — the median over the tmpfs rounds LABEL-1..ROUNDS of KEY (cpu: core-s/GB)
median() {
    local r v=()
    for ((r = 1; r <= ROUNDS; r++)); do
        if [[ $2 == cpu ]]; then v+=("$(cpu_per_gb "$1-$r")"); else v+=("$(field "$1-$r" "$2")"); fi
    done
    printf '%s\n' "${v[@]}" | { grep -E '^[0-9.]+$' || true; } | sort -g |
        awk '{ a[NR] = $1 } END { if (NR == 0) print "n/a"; else if (NR % 2) print a[(NR + 1) / 2]; else printf "%.2f", (a[NR / 2] + a[NR / 2 + 1]) / 2 }'
}

# one section: LABEL_PREFIX UPSTREAM_HOSTPORT
section() {
    local p=$1 up=$2
    run "$p-direct" BASE_URL="http://$up/$BUCKET/set" SERVER_PID="$UP_PID"
    ngc_run "$p-nginx-disk" "$W/cache-ngx" "$up" || return 1
    s3c_run "$p-s3c-disk" "$W/cache-s3" "$up" || return 1
    [[ $p == link && ${ONLY:-} != disk ]] || return 0
    tmpfs_rounds "$p" "$up" || return 1
    # (the tmpfs runs just freed gigabytes: each slowed-disk run starts on touched memory too)
    prefault 4
    s3c_run "$p-s3c-slow" "$W/cache-slow" "$up" LD_PRELOAD="$SHIM" S3C_FAULT="$SLOW_RULE" || return 1
    prefault 4
    ngc_run "$p-nginx-slow" "$W/cache-slow" "$up" LD_PRELOAD="$SHIM" S3C_FAULT="$SLOW_RULE" || return 1
    run "$p-direct-2" BASE_URL="http://$up/$BUCKET/set" SERVER_PID="$UP_PID"
}

# line TEXT LABEL REF — one summary row (none when LABEL did not run)
line() { [[ -n $(field "$2" GBps) ]] || return 0; printf '%-40s %8s %7s %12s\n' "$1" "$(field "$2" GBps)" "$(ratio "$(field "$2" GBps)" "$(field "$3" GBps)")" "$(cpu_per_gb "$2")"; }
# line_median TEXT LABEL REF — line() for the median of the tmpfs rounds LABEL-1..ROUNDS
line_median() { local g; g=$(median "$2" GBps); [[ $g != n/a ]] || return 0; printf '%-40s %8s %7s %12s\n' "$1" "$g" "$(ratio "$g" "$(field "$3" GBps)")" "$(median "$2" cpu)"; }

if [[ ${ONLY:-} == tmpfs ]]; then
    echo "== across the link ($SLOW_BPS B/s), c$C, cache on tmpfs only, $ROUNDS rounds, order swapped each round"
    run link-direct BASE_URL="http://$LINK/$BUCKET/set" SERVER_PID="$UP_PID"
    tmpfs_rounds link "$LINK" || exit 1
    run link-direct-2 BASE_URL="http://$LINK/$BUCKET/set" SERVER_PID="$UP_PID"
    echo
    echo "== summary (tmpfs only; $N x $SIZE, c$C; ratio to the first direct GET)"
    printf '%-40s %8s %7s %12s\n' "cold misses" "GB/s" "ratio" "core-s/GB"
    line "link: direct GET" link-direct link-direct
    line "link: direct GET, again at the end" link-direct-2 link-direct
    for ((r = 1; r <= ROUNDS; r++)); do
        if ((r % 2)); then first=s3cached; else first=nginx; fi
        line "round $r ($first first): nginx" "link-nginx-tmpfs-$r" link-direct
        line "round $r ($first first): s3cached" "link-s3c-tmpfs-$r" link-direct
    done
    line_median "link: nginx proxy_cache, tmpfs (median)" link-nginx-tmpfs link-direct
    line_median "link: s3cached, tmpfs (median)" link-s3c-tmpfs link-direct
    echo "results log: $RESULTS   total $(($(date +%s) - T0))s"
    exit 0
fi

if [[ ${ONLY:-} == disk ]]; then
    echo "== across the link ($SLOW_BPS B/s), c$C, each object once, cache on the disk only"
else
    echo "== across the link ($SLOW_BPS B/s), c$C, each object once; slowed disk: $SLOW_DISK_BPS B/s; tmpfs: $ROUNDS rounds"
fi
section link "$LINK"
[[ ${ONLY:-} == disk ]] && LOOPBACK=0
if [[ ${LOOPBACK:-1} == 1 ]]; then
    echo "== loopback (no link cap), c$C, cache on the disk"
    section loop "127.0.0.1:$UP_PORT"
fi

echo
echo "== summary (one run, same machine; $N x $SIZE, c$C; ratio to the direct GET of the section)"
for l in $(cut -f1 "$RESULTS" | grep -v warm); do
    bad=$(field "$l" non2xx)
    [[ -z ${bad//0/} ]] || echo "WARNING: $l had $bad non-2xx answers"
done
printf '%-40s %8s %7s %12s\n' "cold misses" "GB/s" "ratio" "core-s/GB"
line "link: direct GET" link-direct link-direct
line "link: direct GET, again at the end" link-direct-2 link-direct
line "link: nginx proxy_cache, disk" link-nginx-disk link-direct
line "link: s3cached, disk" link-s3c-disk link-direct
line_median "link: nginx proxy_cache, tmpfs (median)" link-nginx-tmpfs link-direct
line_median "link: s3cached, tmpfs (median)" link-s3c-tmpfs link-direct
line "link: nginx proxy_cache, slowed disk" link-nginx-slow link-direct
line "link: s3cached, slowed disk" link-s3c-slow link-direct
if [[ ${LOOPBACK:-1} == 1 ]]; then
    line "loopback: direct GET" loop-direct loop-direct
    line "loopback: nginx proxy_cache, disk" loop-nginx-disk loop-direct
    line "loopback: s3cached, disk" loop-s3c-disk loop-direct
fi
echo "goal: s3cached >= 0.95 of the direct GET across the link in all three, core-s/GB <= nginx proxy_cache's"
echo "results log: $RESULTS   total $(($(date +%s) - T0))s"
