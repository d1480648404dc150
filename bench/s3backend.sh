#!/usr/bin/env bash
# bench/s3backend.sh: the S3 backend (be_s3.c over libcurl) against its references, in one
# run, as ratios:
#   - cold misses of 64 MiB objects through s3cached --backend http://nginx (anonymous,
#     path-style: nginx serves the store dir, so GET/HEAD /bucket/key work) vs a direct GET
#     of the same objects from the same nginx, same concurrency (goal: >= 0.8x)
#   - the same cold misses through the file backend (the cache's own cost of a fill, so the
#     S3 backend's share of the gap is visible)
#   - hits through the S3 backend vs hits through the file backend (goal: ~1x)
#   - the ceiling of any proxy on this machine: an uncapped splice relay (build/throttle) in
#     front of the same nginx, vs the direct GET
# Uses the reference scripts in ../shared/bench (relative to the repo). Everything it starts
# is stopped by pid; bounded to ~3 minutes.
#   BENCH_DIR    dataset and caches         (default ${TMPDIR:-/tmp}/s3c-bench-s3be)
#   N            64 MiB objects             (default 16)
#   ROUNDS       cold rounds (median)       (default 3)
#   CONCURRENCY  parallel readers           (default 4)
#   DURATION     seconds per hit run        (default 6; 2 runs each, alternating)
#   KEEP_DATA=0  remove the dataset at the end (default: kept for the next run)
#   PERF=1       perf record -g the gateway during one extra cold round (report path printed)
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
shared_bench s3backend
BIN=${S3CACHED_BIN:-$repo/build/s3cached}
[[ -x $BIN ]] || { echo "s3backend: no executable at $BIN (run make)"; exit 1; }
for t in nginx curl; do
    command -v "$t" >/dev/null || { echo "s3backend: $t is not installed (make deps-test)"; exit 1; }
done
W=${BENCH_DIR:-${TMPDIR:-/tmp}/s3c-bench-s3be}
N=${N:-16}
ROUNDS=${ROUNDS:-3}
C=${CONCURRENCY:-4}
export DURATION=${DURATION:-6}
STORE=$W/store
BUCKET=bench
RESULTS=$W/results.log
mkdir -p "$STORE/$BUCKET"
unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY all_proxy ALL_PROXY
export no_proxy='*' NO_PROXY='*'
T0=$(date +%s)


UP_PORT=$(free_port)
S3_PIDS=()
PERF_PID=
cleanup() {
    local p
    [[ -n $PERF_PID ]] && stop_pid "$PERF_PID" 10
    for p in "${S3_PIDS[@]}"; do stop_pid "$p" 10; done
    PORT=$UP_PORT "$SB/nginx-static" stop >/dev/null 2>&1 || true
    rm -rf "$W"/cache-*
    [[ ${KEEP_DATA:-1} == 1 ]] || rm -rf "$STORE"
}
trap cleanup EXIT
trap 'exit 143' TERM INT

# start_s3 CACHE_DIR [EXTRA ARGS] — s3cached --anonymous; prints "PID PORT"
start_s3() {
    local cache=$1 port pid i
    shift
    port=$(free_port)
    rm -rf "$cache"
    mkdir -p "$cache"
    "$BIN" serve --listen "127.0.0.1:$port" --cache-dir "$cache" --cache-size 8G --anonymous \
        --log-level warn "$@" >"$cache.log" 2>&1 </dev/null &
    pid=$!
    S3_PIDS+=("$pid")
    for ((i = 0; i < 100; i++)); do
        kill -0 "$pid" 2>/dev/null || { echo "s3backend: s3cached exited; log:" >&2; tail -20 "$cache.log" >&2; return 1; }
        [[ $(curl -s --max-time 1 "http://127.0.0.1:$port/_/health") == ok* ]] && { echo "$pid $port"; return 0; }
        sleep 0.1
    done
    echo "s3backend: s3cached did not answer /_/health in 10 s" >&2
    return 1
}

# run LABEL ENV... — http-large, appends "LABEL<TAB>RESULT..." to RESULTS
run() {
    local label=$1 line
    shift
    line=$(env "$@" timeout -k 5 $((DURATION + 150)) "$SB/http-large" | grep '^RESULT' | tail -1) || true
    [[ -n $line ]] || { echo "s3backend: $label produced no RESULT" >&2; line="RESULT failed=1"; }
    printf '%s\t%s\n' "$label" "${line#RESULT }" >>"$RESULTS"
    printf '%-16s %s\n' "$label" "${line#RESULT }"
}
# median LABEL_PREFIX KEY — median of KEY over the labels starting with LABEL_PREFIX
median() { awk -F'\t' -v l="$1" -v k="$2" 'index($1, l) == 1 { n = split($2, f, " "); for (i = 1; i <= n; i++) { split(f[i], kv, "="); if (kv[1] == k) v[++m] = kv[2] + 0 } }
    END { if (!m) exit; for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
          printf "%.2f", (m % 2) ? v[(m + 1) / 2] : (v[m / 2] + v[m / 2 + 1]) / 2 }' "$RESULTS"; }

echo "== dataset: $N x 64 MiB in $STORE/$BUCKET/large"
DIR=$STORE/$BUCKET/large N=$N SIZE=64M "$SB/make-dataset" >/dev/null
LIST=$STORE/$BUCKET/large/MANIFEST
: >"$RESULTS"

echo "== upstream: nginx serving $STORE path-style"
UP_PID=$(PORT=$UP_PORT ROOT=$STORE WORKERS=1 LIFETIME=600 "$SB/nginx-static")
UP=http://127.0.0.1:$UP_PORT
curl -sf -o /dev/null -I "$UP/$BUCKET/large/$(head -1 "$LIST")" || { echo "s3backend: nginx does not serve HEAD /$BUCKET/key"; exit 1; }
run warm-pagecache BASE_URL="$UP/$BUCKET/large" LIST="$LIST" CONCURRENCY="$C" TOOL=once >/dev/null

# The ceiling of any proxy here: build/throttle uncapped (a splice relay, no cache, no copy in
# user space) between the clients and the same nginx. Its ratio to the direct GET bounds what a
# gateway that also writes every byte to its cache can reach on this machine.
THROTTLE_BIN=${THROTTLE_BIN:-$(dirname "$BIN")/throttle}
RELAY_PID=
if [[ -x $THROTTLE_BIN ]]; then
    RELAY_PORT=$(free_port)
    "$THROTTLE_BIN" "$RELAY_PORT" "$UP_PORT" 1000000000000 >"$W/relay.log" 2>&1 &
    RELAY_PID=$!
    S3_PIDS+=("$RELAY_PID")
    for ((i = 0; i < 50; i++)); do grep -q ready "$W/relay.log" 2>/dev/null && break; sleep 0.1; done
fi

echo "== cold misses, each object once, c$C, $ROUNDS rounds (fresh cache each)"
for ((r = 1; r <= ROUNDS; r++)); do
    run "direct-$r" BASE_URL="$UP/$BUCKET/large" LIST="$LIST" CONCURRENCY="$C" TOOL=once SERVER_PID="$UP_PID"
    [[ -z $RELAY_PID ]] || run "relay-$r" BASE_URL="http://127.0.0.1:$RELAY_PORT/$BUCKET/large" LIST="$LIST" \
        CONCURRENCY="$C" TOOL=once SERVER_PID="$RELAY_PID" BACKEND_PID="$UP_PID"
    read -r G_PID G_PORT < <(start_s3 "$W/cache-s3be" --backend "$UP") || true
    [[ -n ${G_PORT:-} ]] || exit 1
    run "s3be-cold-$r" BASE_URL="http://127.0.0.1:$G_PORT/$BUCKET/large" LIST="$LIST" CONCURRENCY="$C" \
        TOOL=once SERVER_PID="$G_PID" BACKEND_PID="$UP_PID"
    if ((r < ROUNDS)); then stop_pid "$G_PID" 10; fi
    # the same fill through the file backend: what the cache itself costs on a miss
    read -r F_PID F_PORT < <(start_s3 "$W/cache-filecold" --backend "file://$STORE") || true
    [[ -n ${F_PORT:-} ]] || exit 1
    run "file-cold-$r" BASE_URL="http://127.0.0.1:$F_PORT/$BUCKET/large" LIST="$LIST" CONCURRENCY="$C" \
        TOOL=once SERVER_PID="$F_PID"
    stop_pid "$F_PID" 10
    rm -rf "$W/cache-filecold"
done
miss=$(curl -s "http://127.0.0.1:$G_PORT/_/stats" | /usr/bin/python3 -c 'import json,sys; s=json.load(sys.stdin); print(s["backend"]["requests"], s["backend"]["bytes_read"], s["cache"]["misses"])')
echo "   last cold round, gateway stats (backend requests, bytes read, misses): $miss"

echo "== hits, c$C, ${DURATION}s each, alternating: S3 backend (cache from the last cold round) vs file backend"
read -r F_PID F_PORT < <(start_s3 "$W/cache-file" --backend "file://$STORE") || true
[[ -n ${F_PORT:-} ]] || exit 1
run file-warm BASE_URL="http://127.0.0.1:$F_PORT/$BUCKET/large" LIST="$LIST" CONCURRENCY="$C" TOOL=once >/dev/null
for ((r = 1; r <= 2; r++)); do
    run "s3be-hits-$r" BASE_URL="http://127.0.0.1:$G_PORT/$BUCKET/large" LIST="$LIST" CONCURRENCY="$C" TOOL=curl SERVER_PID="$G_PID"
    run "file-hits-$r" BASE_URL="http://127.0.0.1:$F_PORT/$BUCKET/large" LIST="$LIST" CONCURRENCY="$C" TOOL=curl SERVER_PID="$F_PID"
done
up_reqs=$(curl -s "http://127.0.0.1:$G_PORT/_/stats" | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["backend"]["requests"])')
stop_pid "$G_PID" 10
stop_pid "$F_PID" 10

if [[ ${PERF:-0} == 1 ]] && command -v perf >/dev/null; then
    echo "== perf: one more cold round under perf record -g"
    read -r G_PID G_PORT < <(start_s3 "$W/cache-s3be" --backend "$UP") || true
    perf record -g -o "$W/perf.data" -p "$G_PID" >/dev/null 2>&1 &
    PERF_PID=$!
    sleep 0.5
    run perf-cold BASE_URL="http://127.0.0.1:$G_PORT/$BUCKET/large" LIST="$LIST" CONCURRENCY="$C" TOOL=once SERVER_PID="$G_PID"
    kill -INT "$PERF_PID" 2>/dev/null || true
    wait "$PERF_PID" 2>/dev/null || true
    PERF_PID=
    stop_pid "$G_PID" 10
    echo "   perf report -i $W/perf.data --no-children --sort sym"
fi

echo
echo "== summary (one run, same machine; 64 MiB objects, c$C)"
for l in $(cut -f1 "$RESULTS" | grep -v warm); do
    bad=$(field "$l" non2xx)
    [[ -z ${bad//0/} ]] || echo "WARNING: $l had $bad non-2xx answers"
done
d=$(median direct- GBps); s=$(median s3be-cold- GBps)
fh=$(median file-hits- GBps); sh=$(median s3be-hits- GBps)
printf '%-40s %10s %10s %8s %6s\n' "measure" "reference" "s3 backend" "ratio" "goal"
printf '%-40s %10s %10s %8s %6s\n' "cold miss GB/s vs direct nginx GET" "$d" "$s" "$(ratio "$s" "$d")" ">=0.8"
rl=$(median relay- GBps)
[[ -z $rl ]] || printf '%-40s %10s %10s %8s %6s\n' "  (ceiling: a splice relay vs direct)" "$d" "$rl" "$(ratio "$rl" "$d")" ""
fc=$(median file-cold- GBps)
printf '%-40s %10s %10s %8s %6s\n' "cold miss GB/s vs file-backend cold miss" "$fc" "$s" "$(ratio "$s" "$fc")" ""
printf '%-40s %10s %10s %8s %6s\n' "  (file-backend cold vs direct nginx)" "$d" "$fc" "$(ratio "$fc" "$d")" ""
printf '%-40s %10s %10s %8s %6s\n' "hits GB/s vs file-backend hits" "$fh" "$sh" "$(ratio "$sh" "$fh")" "~1"
echo "upstream requests during the hit run: $((up_reqs - ${miss%% *})) (must be 0)"
echo "gateway CPU on cold rounds (% of one core): $(for ((r = 1; r <= ROUNDS; r++)); do printf '%s ' "$(field "s3be-cold-$r" server_cpu)"; done)"
echo "results log: $RESULTS   total $(($(date +%s) - T0))s"
