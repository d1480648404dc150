#!/usr/bin/env bash
# bench/keep.sh (make bench): repeated epochs over a data set 1.5x the cache (issue 23), under
# LRU, under keep and with a read plan per epoch (docs/plans.md), in one run. The data set (KEEP_N objects of KEEP_MB MiB) sits behind an
# upstream s3cached reached across a link capped at SLOW_BPS (build/throttle; default 250 MB/s,
# a node's share of an object store); two gateways with fresh caches of 2/3 of it read it for 3
# epochs each with bench/keep_reader.py (PyTorch's DataLoader, 4 workers, a new random order
# per epoch; a thread pool without python3-torch): one LRU (--keep-auto false), one with
# --keep-prefix, one LRU whose reader posts a plan at each epoch's start (this epoch's order and
# the next one's). Prints per epoch the wall time, hits and the bytes the gateway read from its
# backend, and the ratios to LRU of epochs 2+ (the steady state; epoch 1 fills the cache).
#   KEEP_EPOCHS      epochs per run (default 3; the plans issue's check: KEEP_N=24 KEEP_MB=4
#                    KEEP_EPOCHS=6, 24 x 4 MiB through 64 MiB as e2e 62)
#   KEEP_N, KEEP_MB  the data set (default 36 x 16 MiB = 576 MiB; the cache is 2/3 of it)
#   SLOW_BPS         the backend link in bytes/s (default 250e6)
#   BENCH_DIR        work directory (default ${TMPDIR:-/tmp}/s3c-bench)
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
BIN=${S3CACHED_BIN:-$repo/build/s3cached}
THROTTLE_BIN=${THROTTLE_BIN:-$(dirname "$BIN")/throttle}
N=${KEEP_N:-36}
MB=${KEEP_MB:-16}
SLOW_BPS=${SLOW_BPS:-250e6}
EPOCHS=${KEEP_EPOCHS:-3}
W=${BENCH_DIR:-${TMPDIR:-/tmp}/s3c-bench}/keep
PY=/usr/bin/python3
PIDS=()
[[ -x $BIN ]] || { echo "keep: no executable at $BIN (run make)"; exit 1; }
[[ -x $THROTTLE_BIN ]] || { echo "keep: no $THROTTLE_BIN (make $(dirname "$BIN")/throttle)"; exit 1; }
cleanup() { local p; for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done; rm -rf "$W"; }
trap cleanup EXIT
trap 'exit 143' TERM INT
unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY all_proxy ALL_PROXY
rm -rf "$W"; mkdir -p "$W/up-store/bench/set"
serve() { # NAME PORT ARGS... ; waits for /_/health
    local name=$1 p=$2; shift 2
    "$BIN" serve --listen "127.0.0.1:$p" --cache-dir "$W/$name-cache" --anonymous \
        --log-level ${KEEP_LOG_LEVEL:-warn} "$@" >"$W/$name.log" 2>&1 </dev/null &
    PIDS+=($!)
    for _ in $(seq 1 200); do curl -sf -o /dev/null "http://127.0.0.1:$p/_/health" && return 0; sleep 0.05; done
    echo "keep: $name did not start"; tail -5 "$W/$name.log"; exit 1
}
for i in $(seq -w 0 $((N - 1))); do
    head -c $((MB << 20)) /dev/urandom >"$W/up-store/bench/set/$i"
    echo "set/$i" >>"$W/keys"
done
CACHE_MB=$((N * MB * 2 / 3))
UP=$(free_port); SLOW=$(free_port)
serve up "$UP" --backend "file://$W/up-store" --cache-size 4G
"$THROTTLE_BIN" "$SLOW" "$UP" "$SLOW_BPS" >"$W/throttle.log" 2>&1 &
PIDS+=($!)
echo "== keep and plans vs LRU: $N x $MB MiB ($((N * MB)) MiB) through a $CACHE_MB MiB cache, backend link $SLOW_BPS B/s, $EPOCHS epochs"
# warm the upstream's own cache, so that both runs see the same backend: the capped link
curl -sf -o /dev/null "http://127.0.0.1:$UP/_/health"
while read -r k; do curl -sf -o /dev/null "http://127.0.0.1:$UP/bench/$k"; done <"$W/keys"
declare -A SECS BYTES
for policy in lru keep plan; do
    p=$(free_port)
    extra=(--keep-auto false)
    [[ $policy == keep ]] && extra=(--keep-prefix bench/set/)
    mode=""; [[ $policy == plan ]] && mode=plan
    serve "gw-$policy" "$p" --backend "http://127.0.0.1:$SLOW" --cache-size "${CACHE_MB}M" \
        --revalidate-after never "${extra[@]}"
    out=$(timeout 900 $PY "$here/keep_reader.py" "http://127.0.0.1:$p" bench "$W/keys" "$EPOCHS" 23 $mode) ||
        { echo "keep: the $policy reader failed"; echo "$out"; tail -5 "$W/gw-$policy.log"; tail -5 "$W/throttle.log"; exit 1; }
    echo "$out" | sed -n 's/^LOADER /loader: /p' | head -1
    echo "$out" | sed -n 's/^PLAN /plan after epoch /p'
    while read -r tag e rest; do
        [[ $tag == EPOCH ]] || continue
        s=$(echo "$rest" | sed -n 's/.*seconds=\([^ ]*\).*/\1/p')
        h=$(echo "$rest" | sed -n 's/.*hits=\([^ ]*\).*/\1/p')
        r=$(echo "$rest" | sed -n 's/.*reads=\([^ ]*\).*/\1/p')
        bb=$(echo "$rest" | sed -n 's/.*backend_bytes=\([^ ]*\).*/\1/p')
        printf '%-5s epoch %s  %7.2f s  %4s/%s hits  backend %6.1f MiB\n' "$policy" "$e" "$s" "$h" "$r" \
            "$($PY -c "print($bb / 1048576)")"
        if [[ $e != 1 ]]; then
            SECS[$policy]=$($PY -c "print(${SECS[$policy]:-0} + $s)")
            BYTES[$policy]=$(( ${BYTES[$policy]:-0} + bb ))
        fi
    done <<<"$out"
    kill "${PIDS[-1]}"; wait "${PIDS[-1]}" 2>/dev/null || true
    unset 'PIDS[-1]'
done
ideal=$(( (N * MB - CACHE_MB) * (EPOCHS - 1) ))
echo
echo "== summary (one run, same machine): epochs 2-$EPOCHS, each against LRU"
printf '%-28s %10s %10s %10s %8s %8s\n' "measure" "LRU" "keep" "plan" "keep/LRU" "plan/LRU"
printf '%-28s %10.2f %10.2f %10.2f %8.2f %8.2f\n' "wall time, s" "${SECS[lru]}" "${SECS[keep]}" \
    "${SECS[plan]}" "$($PY -c "print(${SECS[keep]} / ${SECS[lru]})")" \
    "$($PY -c "print(${SECS[plan]} / ${SECS[lru]})")"
printf '%-28s %10.1f %10.1f %10.1f %8.2f %8.2f\n' "backend bytes, MiB" "$($PY -c "print(${BYTES[lru]} / 1048576)")" \
    "$($PY -c "print(${BYTES[keep]} / 1048576)")" "$($PY -c "print(${BYTES[plan]} / 1048576)")" \
    "$($PY -c "print(${BYTES[keep]} / max(1, ${BYTES[lru]}))")" "$($PY -c "print(${BYTES[plan]} / max(1, ${BYTES[lru]}))")"
echo "(the least a cache of $CACHE_MB MiB can make the backend send in $((EPOCHS - 1)) epochs: $ideal MiB)"
