#!/usr/bin/env bash
# bench/run.sh (make bench): s3cached (--anonymous, file backend, warm cache) against
# nginx static on the same files, in one run, as ratios:
#   - GET throughput of 64 MiB objects (http-large, curl, concurrency 4)
#   - requests/s of 112 KiB objects (http-small, wrk)
#   - cold-miss throughput (fresh cache dir, each object once) vs a direct nginx read
#   - a warm-up job vs that direct read; the S3 backend (nginx upstream) cold and hits
#   - the same over a slow backend: the upstream behind build/throttle at SLOW_BPS (1 GB/s)
# Uses the reference scripts in ../shared/bench (relative to the repo). Everything it
# starts is stopped by pid; total time is bounded (~5 minutes).
#   BENCH_DIR   where the dataset and caches live      (default ${TMPDIR:-/tmp}/s3c-bench)
#   DURATION    seconds per measurement                 (default 10)
#   KEEP_DATA=0 remove the dataset at the end           (default: kept for the next run)
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
shared_bench bench
BIN=${S3CACHED_BIN:-$repo/build/s3cached}
[[ -x $BIN ]] || { echo "bench: no executable at $BIN (run make)"; exit 1; }
for t in nginx wrk curl; do
    command -v "$t" >/dev/null || { echo "bench: $t is not installed (make deps-test)"; exit 1; }
done
export DURATION=${DURATION:-10}
W=${BENCH_DIR:-${TMPDIR:-/tmp}/s3c-bench}
STORE=$W/store
BUCKET=bench
RESULTS=$W/results.log
mkdir -p "$STORE/$BUCKET"
unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY all_proxy ALL_PROXY
T0=$(date +%s)

NGINX_PORT=$(free_port)
S3_PIDS=()
cleanup() {
    local p
    for p in "${S3_PIDS[@]}"; do stop_pid "$p" 10; done
    PORT=$NGINX_PORT "$SB/nginx-static" stop >/dev/null 2>&1 || true
    [[ -n ${UP_PORT:-} ]] && { PORT=$UP_PORT "$SB/nginx-static" stop >/dev/null 2>&1 || true; }
    rm -rf "$W"/cache-*
    [[ ${KEEP_DATA:-1} == 1 ]] || rm -rf "$STORE"
}
trap cleanup EXIT
trap 'exit 143' TERM INT

# start_s3 CACHE_DIR [EXTRA ARGS] — s3cached --anonymous on the store; prints "PID PORT"
start_s3() {
    local cache=$1 port pid i
    shift
    port=$(free_port)
    mkdir -p "$cache"
    "$BIN" serve --listen "127.0.0.1:$port" --backend "file://$STORE" --cache-dir "$cache" \
        --cache-size 8G --anonymous --log-level warn "$@" >"$cache.log" 2>&1 </dev/null &
    pid=$!
    S3_PIDS+=("$pid")
    for ((i = 0; i < 100; i++)); do
        kill -0 "$pid" 2>/dev/null || { echo "bench: s3cached exited; log:" >&2; tail -20 "$cache.log" >&2; return 1; }
        [[ $(curl -s --max-time 1 "http://127.0.0.1:$port/_/health") == ok* ]] && { echo "$pid $port"; return 0; }
        sleep 0.1
    done
    echo "bench: s3cached did not answer /_/health in 10 s" >&2
    return 1
}

# run LABEL SCRIPT ENV... — runs a bench script, appends "LABEL<TAB>RESULT..." to RESULTS
run() {
    local label=$1 script=$2 line
    shift 2
    line=$(env "$@" timeout -k 5 $((DURATION + 150)) "$SB/$script" | grep '^RESULT' | tail -1) || true
    [[ -n $line ]] || { echo "bench: $label produced no RESULT" >&2; line="RESULT failed=1"; }
    printf '%s\t%s\n' "$label" "${line#RESULT }" >>"$RESULTS"
    printf '%-22s %s\n' "$label" "${line#RESULT }"
}


echo "== dataset ($STORE/$BUCKET): 16 x 64 MiB, 2000 x 112 KiB"
DIR=$STORE/$BUCKET/large N=16 SIZE=64M "$SB/make-dataset" >/dev/null
DIR=$STORE/$BUCKET/small N=2000 SIZE=112K "$SB/make-dataset" >/dev/null
LARGE=$STORE/$BUCKET/large/MANIFEST
SMALL=$STORE/$BUCKET/small/MANIFEST
: >"$RESULTS"

echo "== servers"
NGINX_PID=$(PORT=$NGINX_PORT ROOT=$STORE/$BUCKET WORKERS=2 LIFETIME=900 "$SB/nginx-static")
NGINX=http://127.0.0.1:$NGINX_PORT
read -r S3_PID S3_PORT < <(start_s3 "$W/cache-warm") || true
[[ -n ${S3_PORT:-} ]] || { echo "bench: s3cached did not start"; exit 1; }
S3_PIDS+=("$S3_PID")
S3=http://127.0.0.1:$S3_PORT/$BUCKET
echo "nginx pid $NGINX_PID on $NGINX; s3cached pid $S3_PID on http://127.0.0.1:$S3_PORT"

echo "== warm the cache (one pass over both sets)"
run warm-large http-large BASE_URL="$S3/large" LIST="$LARGE" CONCURRENCY=4 TOOL=once SERVER_PID="$S3_PID"
run warm-small http-large BASE_URL="$S3/small" LIST="$SMALL" CONCURRENCY=4 TOOL=once SERVER_PID="$S3_PID"
# page cache warm for nginx too
run warm-nginx-small http-large BASE_URL="$NGINX/small" LIST="$SMALL" CONCURRENCY=4 TOOL=once SERVER_PID="$NGINX_PID"

echo "== large objects, 64 MiB, curl x4, ${DURATION}s each"
run nginx-large http-large BASE_URL="$NGINX/large" LIST="$LARGE" CONCURRENCY=4 TOOL=curl SERVER_PID="$NGINX_PID"
run s3cached-large http-large BASE_URL="$S3/large" LIST="$LARGE" CONCURRENCY=4 TOOL=curl SERVER_PID="$S3_PID"

echo "== small objects, 112 KiB, wrk -c64, ${DURATION}s each"
run nginx-small http-small BASE_URL="$NGINX/small" LIST="$SMALL" SERVER_PID="$NGINX_PID"
run s3cached-small http-small BASE_URL="$S3/small" LIST="$SMALL" SERVER_PID="$S3_PID"
stop_pid "$S3_PID" 10

echo "== the cost of accounting: the same warm cache, --accounting false"
read -r N_PID N_PORT < <(start_s3 "$W/cache-warm" --accounting false) || true
[[ -n ${N_PORT:-} ]] || { echo "bench: s3cached (no accounting) did not start"; exit 1; }
S3_PIDS+=("$N_PID")
run noacct-small http-small BASE_URL="http://127.0.0.1:$N_PORT/$BUCKET/small" LIST="$SMALL" SERVER_PID="$N_PID"
run noacct-large http-large BASE_URL="http://127.0.0.1:$N_PORT/$BUCKET/large" LIST="$LARGE" CONCURRENCY=4 TOOL=curl SERVER_PID="$N_PID"
stop_pid "$N_PID" 10
read -r S3_PID S3_PORT < <(start_s3 "$W/cache-warm") || true
S3_PIDS+=("$S3_PID")
run acct-small http-small BASE_URL="http://127.0.0.1:$S3_PORT/$BUCKET/small" LIST="$SMALL" SERVER_PID="$S3_PID"
run acct-large http-large BASE_URL="http://127.0.0.1:$S3_PORT/$BUCKET/large" LIST="$LARGE" CONCURRENCY=4 TOOL=curl SERVER_PID="$S3_PID"
stop_pid "$S3_PID" 10

echo "== cold misses: fresh cache dir, each 64 MiB object once, x4"
read -r C_PID C_PORT < <(start_s3 "$W/cache-cold") || true
[[ -n ${C_PORT:-} ]] || { echo "bench: s3cached (cold) did not start"; exit 1; }
S3_PIDS+=("$C_PID")
run nginx-once http-large BASE_URL="$NGINX/large" LIST="$LARGE" CONCURRENCY=4 TOOL=once SERVER_PID="$NGINX_PID"
run s3cached-cold http-large BASE_URL="http://127.0.0.1:$C_PORT/$BUCKET/large" LIST="$LARGE" CONCURRENCY=4 TOOL=once SERVER_PID="$C_PID"
stop_pid "$C_PID" 10

echo "== warm-up: s3cached warm of the 64 MiB set into a fresh cache (--warm-concurrency 4)"
read -r WM_PID WM_PORT < <(start_s3 "$W/cache-warmjob" --warm-concurrency 4) || true
[[ -n ${WM_PORT:-} ]] || { echo "bench: s3cached (warm) did not start"; exit 1; }
S3_PIDS+=("$WM_PID")
wbytes=$(awk '{s += $1} END {print s}' < <(for f in $(cat "$LARGE"); do stat -c %s "$STORE/$BUCKET/large/$f"; done))
t0=$(now_ns)
timeout 300 "$BIN" warm --endpoint "http://127.0.0.1:$WM_PORT" "s3://$BUCKET/large/" >/dev/null || echo "bench: warm failed" >&2
t1=$(now_ns)
wgbps=$(awk -v b="$wbytes" -v d=$((t1 - t0)) 'BEGIN { printf "%.2f", b / d }')
printf 'warm-job\tGBps=%s bytes=%s\n' "$wgbps" "$wbytes" >>"$RESULTS"
printf '%-22s GBps=%s bytes=%s\n' warm-job "$wgbps" "$wbytes"
stop_pid "$WM_PID" 10

echo "== S3 backend: nginx serves the store path-style (/bucket/key) as the upstream"
UP_PORT=$(free_port)
UP_PID=$(PORT=$UP_PORT ROOT=$STORE WORKERS=1 LIFETIME=900 "$SB/nginx-static")
UPSTREAM=http://127.0.0.1:$UP_PORT
read -r U_PID U_PORT < <(start_s3 "$W/cache-s3be" --backend "$UPSTREAM") || true
[[ -n ${U_PORT:-} ]] || { echo "bench: s3cached (S3 backend) did not start"; exit 1; }
S3_PIDS+=("$U_PID")
run upstream-once http-large BASE_URL="$UPSTREAM/$BUCKET/large" LIST="$LARGE" CONCURRENCY=4 TOOL=once SERVER_PID="$UP_PID"
run s3be-cold http-large BASE_URL="http://127.0.0.1:$U_PORT/$BUCKET/large" LIST="$LARGE" CONCURRENCY=4 TOOL=once SERVER_PID="$U_PID"
run s3be-hits http-large BASE_URL="http://127.0.0.1:$U_PORT/$BUCKET/large" LIST="$LARGE" CONCURRENCY=4 TOOL=curl SERVER_PID="$U_PID"
stop_pid "$U_PID" 10

# A backend that is slower than the gateway, as in a deployment (the product exists because the
# object store is slower than the GPUs' appetite): the same nginx upstream behind a relay capped
# at SLOW_BPS in total (build/throttle, default 1 GB/s, a 10 GbE-class object store). Direct
# reads, cold misses and a warm-up all cross the same capped link, so the ratios say what the
# gateway costs when the backend, not this 2-core machine's CPU, sets the pace.
SLOW_BPS=${SLOW_BPS:-1e9}
THROTTLE_BIN=${THROTTLE_BIN:-$(dirname "$BIN")/throttle}
if [[ -x $THROTTLE_BIN ]]; then
    echo "== slow backend: the nginx upstream behind a ${SLOW_BPS} B/s link ($THROTTLE_BIN)"
    SLOW_PORT=$(free_port)
    "$THROTTLE_BIN" "$SLOW_PORT" "$UP_PORT" "$SLOW_BPS" >/dev/null &
    SLOW_PID=$!
    S3_PIDS+=("$SLOW_PID")
    sleep 0.3
    SLOW=http://127.0.0.1:$SLOW_PORT
    run slow-direct http-large BASE_URL="$SLOW/$BUCKET/large" LIST="$LARGE" CONCURRENCY=4 TOOL=once SERVER_PID="$UP_PID"
    read -r SC_PID SC_PORT < <(start_s3 "$W/cache-slow" --backend "$SLOW") || true
    [[ -n ${SC_PORT:-} ]] || { echo "bench: s3cached (slow backend) did not start"; exit 1; }
    S3_PIDS+=("$SC_PID")
    run slow-cold http-large BASE_URL="http://127.0.0.1:$SC_PORT/$BUCKET/large" LIST="$LARGE" CONCURRENCY=4 TOOL=once SERVER_PID="$SC_PID"
    stop_pid "$SC_PID" 10
    read -r SW_PID SW_PORT < <(start_s3 "$W/cache-slowwarm" --backend "$SLOW" --warm-concurrency 4) || true
    [[ -n ${SW_PORT:-} ]] || { echo "bench: s3cached (slow warm) did not start"; exit 1; }
    S3_PIDS+=("$SW_PID")
    t0=$(now_ns)
    # nginx cannot list: the job gets the shard list a loader would read (--keys)
    sed 's|^|large/|' "$LARGE" >"$W/slow-keys"
    timeout 300 "$BIN" warm --endpoint "http://127.0.0.1:$SW_PORT" --keys "$W/slow-keys" "s3://$BUCKET" >/dev/null || echo "bench: warm (slow backend) failed" >&2
    t1=$(now_ns)
    wgbps=$(awk -v b="$wbytes" -v d=$((t1 - t0)) 'BEGIN { printf "%.2f", b / d }')
    printf 'slow-warm\tGBps=%s bytes=%s\n' "$wgbps" "$wbytes" >>"$RESULTS"
    printf '%-22s GBps=%s bytes=%s\n' slow-warm "$wgbps" "$wbytes"
    stop_pid "$SW_PID" 10
    stop_pid "$SLOW_PID" 5
else
    echo "bench: no $THROTTLE_BIN (make $(dirname "$BIN")/throttle): slow-backend figures skipped"
fi
PORT=$UP_PORT "$SB/nginx-static" stop >/dev/null 2>&1 || true

echo
echo "== summary (one run, same machine; ratios = s3cached / nginx)"
nl=$(field nginx-large GBps); sl=$(field s3cached-large GBps)
ns=$(field nginx-small rps); ss=$(field s3cached-small rps)
no=$(field nginx-once GBps); sc=$(field s3cached-cold GBps)
for l in nginx-large s3cached-large nginx-small s3cached-small nginx-once s3cached-cold; do
    bad=$(field "$l" non2xx)$(field "$l" errors)
    [[ -z ${bad//0/} ]] || echo "WARNING: $l had non-2xx/errors: $bad"
done
printf '%-34s %10s %10s %8s\n' "measure" "nginx" "s3cached" "ratio"
printf '%-34s %10s %10s %8s\n' "large 64MiB GET, GB/s (c4, warm)" "$nl" "$sl" "$(ratio "$sl" "$nl")"
printf '%-34s %10s %10s %8s\n' "small 112KiB GET, req/s (wrk c64)" "$ns" "$ss" "$(ratio "$ss" "$ns")"
printf '%-34s %10s %10s %8s\n' "cold miss 64MiB, GB/s (vs direct)" "$no" "$sc" "$(ratio "$sc" "$no")"
printf '%-34s %10s %10s %8s\n' "hits with/without accounting" "off" "on" "on/off"
printf '%-34s %10s %10s %8s\n' "  small 112KiB, req/s" "$(field noacct-small rps)" "$(field acct-small rps)" "$(ratio "$(field acct-small rps)" "$(field noacct-small rps)")"
printf '%-34s %10s %10s %8s\n' "  large 64MiB, GB/s" "$(field noacct-large GBps)" "$(field acct-large GBps)" "$(ratio "$(field acct-large GBps)" "$(field noacct-large GBps)")"
printf '%-34s %10s %10s %8s\n' "warm-up vs a parallel reader (c4)" "$no" "$(field warm-job GBps)" "$(ratio "$(field warm-job GBps)" "$no")"
printf '%-34s %10s %10s %8s\n' "S3 backend (nginx upstream)" "reference" "s3cached" "ratio"
printf '%-34s %10s %10s %8s\n' "  cold miss 64MiB vs direct GET" "$(field upstream-once GBps)" "$(field s3be-cold GBps)" "$(ratio "$(field s3be-cold GBps)" "$(field upstream-once GBps)")"
printf '%-34s %10s %10s %8s\n' "  hits vs file-backend hits" "$sl" "$(field s3be-hits GBps)" "$(ratio "$(field s3be-hits GBps)" "$sl")"
if [[ -n $(field slow-direct GBps) ]]; then
    sd=$(field slow-direct GBps)
    printf '%-34s %10s %10s %8s\n' "slow backend (${SLOW_BPS} B/s link)" "direct" "s3cached" "ratio"
    printf '%-34s %10s %10s %8s\n' "  cold miss 64MiB vs direct GET" "$sd" "$(field slow-cold GBps)" "$(ratio "$(field slow-cold GBps)" "$sd")"
    printf '%-34s %10s %10s %8s\n' "  warm-up vs a parallel reader" "$sd" "$(field slow-warm GBps)" "$(ratio "$(field slow-warm GBps)" "$sd")"
fi
echo "results log: $RESULTS   total $(($(date +%s) - T0))s"
