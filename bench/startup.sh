#!/usr/bin/env bash
# bench/startup.sh (make bench): how long s3cached takes to serve after a start with N objects
# indexed (default 1,000,000; issue: under a second), and that those entries are served from
# the index at once (HEAD of keys spread over the index: hits, zero backend requests).
#   STARTUP_OBJECTS  entries to index (default 1000000)
#   BENCH_DIR        work directory (default ${TMPDIR:-/tmp}/s3c-bench)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
BIN=${S3CACHED_BIN:-$repo/build/s3cached}
FILL=${INDEX_FILL_BIN:-$repo/build/index-fill}
N=${STARTUP_OBJECTS:-1000000}
W=${BENCH_DIR:-${TMPDIR:-/tmp}/s3c-bench}/startup
PY=/usr/bin/python3
pid=
cleanup() { [[ -n $pid ]] && { kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null || true; }; rm -rf "$W"; }
trap cleanup EXIT
trap 'exit 143' TERM INT
rm -rf "$W"
mkdir -p "$W/store"
t0=$(date +%s.%N)
spread="0 $((N / 3)) $((N / 2)) $((N - 1))"
# shellcheck disable=SC2086 # the spread keys get data files: they are the ones asked for
"$FILL" "$W/cache" "$N" $spread
t1=$(date +%s.%N)
port=$($PY -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
sync
start=$(date +%s.%N)
"$BIN" serve --listen "127.0.0.1:$port" --backend "file://$W/store" --cache-dir "$W/cache" \
    --cache-size 4T --anonymous --revalidate-after never --log-level warn >"$W/log" 2>&1 </dev/null &
pid=$!
for _ in $(seq 1 1000); do
    curl -sf -o /dev/null "http://127.0.0.1:$port/_/health" && break
    sleep 0.005
done
ready=$(date +%s.%N)
hits=0
for i in $spread; do
    k=$(printf 'train/shard-%08d.tar' "$i")
    code=$(curl -s -o /dev/null -w '%{http_code}' -I "http://127.0.0.1:$port/bench/$k")
    [[ $code == 200 ]] && hits=$((hits + 1))
done
backend=$(curl -s "http://127.0.0.1:$port/_/stats" | $PY -c 'import json,sys; print(json.load(sys.stdin)["backend"]["requests"])')
objects=$(curl -s "http://127.0.0.1:$port/_/stats" | $PY -c 'import json,sys; print(json.load(sys.stdin)["cache"]["objects"])')
printf 'startup: %d objects indexed (filled in %.1f s, index %s); serving %.3f s after exec; HEAD of 4 spread keys: %d/4 answered from the index, %s backend requests; /_/stats objects=%s\n' \
    "$N" "$($PY -c "print($t1 - $t0)")" "$(du -sh "$W/cache/index" | cut -f1)" "$($PY -c "print($ready - $start)")" "$hits" "$backend" "$objects"
