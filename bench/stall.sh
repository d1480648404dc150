#!/usr/bin/env bash
# bench/stall.sh (make bench): what the stall accounting of issue 26 costs on hits. The same
# warm cache is served with --stall-accounting true and false (the per-client and per-bucket
# accounting on in both), alternated ROUNDS times, and measured with
#   - 112 KiB GETs, wrk -c64 (requests/s): the per-request cost (two row locks at start and
#     end, a job lookup, a clock read at the first byte);
#   - 64 MiB GETs, curl x4 (GB/s): the per-byte cost (none: sendfile'd hits are not
#     touched per chunk).
# Prints each figure and the ratio on/off of the best round of each; only ratios taken in
# one run mean anything on a shared machine. For the small hits it also prints the gateway's
# own CPU time per request (/proc/PID/stat, the lowest round): what the accounting adds to a
# request's work, which the machine's other load disturbs far less than requests/s. Everything it starts is stopped by pid.
#   BENCH_DIR  work directory (default ${TMPDIR:-/tmp}/s3c-bench)
#   DURATION   seconds per measurement (default 10)
#   ROUNDS     alternations of on and off (default 3)
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
BIN=${S3CACHED_BIN:-$repo/build/s3cached}
DURATION=${DURATION:-10}
ROUNDS=${ROUNDS:-3}
W=${BENCH_DIR:-${TMPDIR:-/tmp}/s3c-bench}/stall
PY=/usr/bin/python3
for t in wrk curl; do
    command -v "$t" >/dev/null || { echo "stall bench: $t is not installed (make deps-test)"; exit 1; }
done
[[ -x $BIN ]] || { echo "stall bench: no executable at $BIN (run make)"; exit 1; }
unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY all_proxy ALL_PROXY
PID=
cleanup() { [[ -n $PID ]] && { kill "$PID" 2>/dev/null; wait "$PID" 2>/dev/null; }; rm -rf "$W/cache"; }
trap cleanup EXIT
trap 'exit 143' TERM INT
mkdir -p "$W/store/bench/small" "$W/store/bench/large"

echo "== dataset ($W/store): 8 x 64 MiB, 1000 x 112 KiB"
if [[ ! -e $W/store/bench/large/7 ]]; then
    head -c $((64 << 20)) /dev/urandom >"$W/store/bench/large/0"
    for i in 1 2 3 4 5 6 7; do cp "$W/store/bench/large/0" "$W/store/bench/large/$i"; done
fi
if [[ ! -e $W/store/bench/small/999 ]]; then
    head -c $((112 << 10)) /dev/urandom >"$W/store/bench/small/0"
    for i in $(seq 1 999); do cp "$W/store/bench/small/0" "$W/store/bench/small/$i"; done
fi
cat >"$W/walk.lua" <<'EOF'
-- each request the next of N paths under PREFIX (env), round robin
local n = tonumber(os.getenv("N"))
local prefix = os.getenv("PREFIX")
local i = 0
request = function()
    i = i % n
    local p = prefix .. i
    i = i + 1
    return wrk.format("GET", p)
end
EOF

serve() { # on|off
    P=$(free_port)
    "$BIN" serve --listen "127.0.0.1:$P" --backend "file://$W/store" --cache-dir "$W/cache" \
        --cache-size 4G --anonymous --log-level warn --revalidate-after never \
        --stall-accounting "$([[ $1 == on ]] && echo true || echo false)" >"$W/serve.log" 2>&1 </dev/null &
    PID=$!
    for _ in $(seq 1 200); do
        curl -sf -o /dev/null "http://127.0.0.1:$P/_/health" && return 0
        kill -0 "$PID" 2>/dev/null || break
        sleep 0.05
    done
    echo "stall bench: s3cached did not start"; tail -5 "$W/serve.log"; exit 1
}
stop() { kill "$PID"; wait "$PID" 2>/dev/null || true; PID=; }
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$PID/stat"; } # the gateway's user + system ticks
small() { # "requests/s CPU-microseconds-per-request" (the gateway's own CPU time, from /proc)
    local c0 c1 out
    c0=$(cpu_ticks)
    out=$(N=1000 PREFIX=/bench/small/ wrk -t2 -c64 -d"${DURATION}s" -s "$W/walk.lua" "http://127.0.0.1:$P")
    c1=$(cpu_ticks)
    awk -v c=$((c1 - c0)) -v hz="$(getconf CLK_TCK)" '
        / requests in / { n = $1 } /^Requests\/sec/ { r = $2 }
        END { printf "%s %.1f\n", r, (n > 0 ? c / hz * 1e6 / n : 0) }' <<<"$out"
}
large() { # GB/s, curl x4 over the 64 MiB objects for DURATION seconds
    local end=$(($(date +%s%N) + DURATION * 1000000000)) t0 t1 bytes
    t0=$(date +%s%N)
    for k in 0 1 2 3; do
        (i=$k; b=0; while (($(date +%s%N) < end)); do
            n=$(curl -s -o /dev/null -w '%{size_download}' "http://127.0.0.1:$P/bench/large/$((i % 8))")
            b=$((b + n)); i=$((i + 1)); done; echo "$b") >"$W/large.$k" &
    done
    wait
    t1=$(date +%s%N)
    bytes=$(cat "$W"/large.? | awk '{ s += $1 } END { print s }')
    awk -v b="$bytes" -v d=$((t1 - t0)) 'BEGIN { printf "%.2f", b / d }'
}

rm -rf "$W/cache"
echo "== warm the cache (one pass over both sets)"
serve on
for i in $(seq 0 999); do echo "url = \"http://127.0.0.1:$P/bench/small/$i\""; echo 'output = "/dev/null"'; done >"$W/warm.curl"
for i in 0 1 2 3 4 5 6 7; do echo "url = \"http://127.0.0.1:$P/bench/large/$i\""; echo 'output = "/dev/null"'; done >>"$W/warm.curl"
curl -sf -Z --parallel-max 8 -K "$W/warm.curl" >/dev/null 2>&1
stop

declare -A best
for r in $(seq 1 "$ROUNDS"); do
    for mode in on off; do
        serve "$mode"
        read -r s cpu < <(small); l=$(large)
        stop
        printf '%-5s round %d: 112 KiB hits %10s req/s (%6s CPU us/req)   64 MiB hits %6s GB/s\n' \
            "$mode" "$r" "$s" "$cpu" "$l"
        best[$mode-small]=$(awk -v a="${best[$mode-small]:-0}" -v b="$s" 'BEGIN { print (b > a ? b : a) }')
        best[$mode-cpu]=$(awk -v a="${best[$mode-cpu]:-0}" -v b="$cpu" 'BEGIN { print (a == 0 || b < a ? b : a) }')
        best[$mode-large]=$(awk -v a="${best[$mode-large]:-0}" -v b="$l" 'BEGIN { print (b > a ? b : a) }')
    done
done
echo
echo "== stall accounting on hits (best of $ROUNDS rounds each, ${DURATION}s a measurement)"
printf '%-34s %10s %10s %8s\n' "measure" "off" "on" "on/off"
printf '%-34s %10s %10s %8s\n' "112 KiB hits, req/s (wrk c64)" "${best[off-small]}" "${best[on-small]}" "$(ratio "${best[on-small]}" "${best[off-small]}")"
printf '%-34s %10s %10s %8s\n' "112 KiB hits, gateway CPU us/req" "${best[off-cpu]}" "${best[on-cpu]}" "$(ratio "${best[on-cpu]}" "${best[off-cpu]}")"
printf '%-34s %10s %10s %8s\n' "64 MiB hits, GB/s (curl x4)" "${best[off-large]}" "${best[on-large]}" "$(ratio "${best[on-large]}" "${best[off-large]}")"
