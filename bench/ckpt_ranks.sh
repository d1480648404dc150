#!/usr/bin/env bash
# bench/ckpt_ranks.sh (make bench): checkpoints of the shape MLPerf Storage's checkpoint workload
# uses (issue 46). For each RANKS count N, N writers (bench/ckpt_ranks.py: a thread and a
# connection each) each write a shard of the checkpoint as one multipart upload into s3cached
# --write-mode back, acknowledged once durable; then, the page cache dropped, N readers read
# their shards back. Beside each, in the same run and on the same disk: fio with N jobs writing
# the same bytes with an fsync at the end (end_fsync=1), and reading them back with the page
# cache dropped. Then the same N writers go write-through to a backend behind a link capped at
# SLOW_BPS. Every figure is the slowest rank's, as MLPerf reports it: N x shard / the slowest
# rank's seconds. The drain is the time POST /_/flush takes after the write-back run (to the
# capped backend).
#   RANKS        writer counts (default "1 8 32")
#   CKPT_MB      checkpoint size in MiB (default 1024); a shard is CKPT_MB/N, at least 64 MiB
#   PART_MB      multipart part size (default 16)
#   SLOW_BPS     the slow backend's bytes/s (default 200e6)
#   BENCH_DIR    work directory (default ${TMPDIR:-/tmp}/s3c-bench)
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
BIN=${S3CACHED_BIN:-$repo/build/s3cached}
THROTTLE_BIN=${THROTTLE_BIN:-$(dirname "$BIN")/throttle}
RANKS=${RANKS:-"1 8 32"}
MB=${CKPT_MB:-1024}
PART=$((${PART_MB:-16} << 20))
SLOW_BPS=${SLOW_BPS:-200e6}
W=${BENCH_DIR:-${TMPDIR:-/tmp}/s3c-bench}/ranks
PY=/usr/bin/python3
PIDS=()
cleanup() { local p; for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done; [[ -n ${CKPT_KEEP:-} ]] || rm -rf "$W"; }
trap cleanup EXIT
trap 'exit 143' TERM INT
command -v fio >/dev/null || { echo "ckpt_ranks: skipped (no fio: apt-get install fio)"; exit 0; }
[[ -x $THROTTLE_BIN ]] || { echo "ckpt_ranks: skipped (no $THROTTLE_BIN: make $THROTTLE_BIN)"; exit 0; }
rm -rf "$W"; mkdir -p "$W/up-store/ckpt" "$W/fio"
serve() { # NAME PORT ARGS...
    local name=$1 p=$2; shift 2
    "$BIN" serve --listen "127.0.0.1:$p" --cache-dir "$W/$name-cache" --cache-size 24G --anonymous \
        --log-level "${CKPT_LOG:-warn}" "$@" >"$W/$name.log" 2>&1 </dev/null &
    PIDS+=($!)
    for _ in $(seq 1 200); do curl -sf -o /dev/null "http://127.0.0.1:$p/_/health" && return 0; sleep 0.05; done
    echo "ckpt_ranks: $name did not start"; exit 1
}
UP=$(free_port); SLOW=$(free_port); WB=$(free_port); WS=$(free_port)
serve up "$UP" --backend "file://$W/up-store"
"$THROTTLE_BIN" "$SLOW" "$UP" "$SLOW_BPS" >/dev/null &
PIDS+=($!)
serve wb "$WB" --backend "http://127.0.0.1:$SLOW" --write-mode back --dirty-limit 12G
serve ws "$WS" --backend "http://127.0.0.1:$SLOW" --write-mode through
drop=0
if [[ $(id -u) == 0 && -w /proc/sys/vm/drop_caches ]]; then drop=1; fi
dropcache() { sync; if ((drop)); then echo 1 >/proc/sys/vm/drop_caches; fi; }
jq_() { $PY -c "import json,sys; d=json.loads(sys.argv[1]); print(d$2)" "$1"; }
# fio: N jobs, one file each, written in 8 MiB blocks then fsync'd; then read back cold.
# The slowest job's runtime (ms) -> MiB/s of all N shards.
fio_run() { # RW N SHARD_BYTES -> aggregate MiB/s over the slowest job
    local out
    out=$W/fio.json
    fio --name=ck --directory="$W/fio" --rw="$1" --numjobs="$2" --size="$3" --bs=8M \
        --ioengine=psync --end_fsync=1 --output-format=json --output="$out" >/dev/null 2>&1
    $PY -c "
import json, os, sys
d = json.load(open(sys.argv[1])); n = int(sys.argv[2]); s = int(sys.argv[3])
rt = [j['job_runtime'] for j in d['jobs']]
if os.environ.get('CKPT_DEBUG'):
    print(sys.argv[4], rt, file=sys.stderr)
print(round(n * s / (1 << 20) / (max(rt) / 1000.0), 1))" "$out" "$2" "$3" "$1"
}
# a write-through Complete is followed by a warm-up that fetches the object back into the cache
# (the upstream gateway, after a drain's multipart upload): a measurement starts once it ended
settle() {
    local _
    for _ in $(seq 1 3000); do
        curl -sf "http://127.0.0.1:$1/_/warm" | grep -q -E '"state":"(queued|running)"' || return 0
        sleep 0.1
    done
    echo "ckpt_ranks: the warm-up on :$1 did not end"; exit 1
}
# N readers, a curl each (a Python reader tops out near 450 MiB/s here): the slowest one's seconds
read_ranks() { # PORT PREFIX N SHARD_BYTES
    local i out=$W/read.times
    : >"$out"
    for i in $(seq 0 $(($3 - 1))); do
        curl -sf -o /dev/null -w '%{time_total} %{size_download}\n' \
            "http://127.0.0.1:$1/ckpt/$2$(printf %03d "$i")" >>"$out" &
    done
    wait
    awk -v s="$4" -v n="$3" '$2 != s { bad = 1 } $1 > m { m = $1 } END { if (bad || NR != n) { print "short"; exit 1 } print m }' "$out"
}
# CPU seconds (user + system) a process has used
cpu_s() { awk -v hz="$(getconf CLK_TCK)" '{ print ($14 + $15) / hz }' "/proc/$1/stat"; }
mibs() { $PY -c "print(round($1 * $2 / (1 << 20) / $3, 1))"; }
echo "ckpt_ranks: checkpoint ${MB} MiB, parts of $((PART >> 20)) MiB, slow backend ${SLOW_BPS} B/s, page cache $( ((drop)) && echo dropped || echo 'NOT dropped (not root)') before reads"
for n in $RANKS; do
    shard=$(( (MB << 20) / n )); ((shard >= 64 << 20)) || shard=$((64 << 20))
    rm -rf "$W/fio"/*; dropcache
    fio_w=$(fio_run write "$n" "$shard")
    dropcache
    fio_r=$(fio_run read "$n" "$shard")
    rm -rf "$W/fio"/*; dropcache
    c0=$(cpu_s "${PIDS[2]}")
    wb=$($PY "$here/ckpt_ranks.py" write "http://127.0.0.1:$WB" ckpt "r$n-" "$n" "$shard" "$PART")
    wb_cpu=$($PY -c "print(round(($(cpu_s "${PIDS[2]}") - $c0) / ($n * $shard / (1 << 30)), 2))")
    t0=$(date +%s.%N)
    curl -sf -X POST "http://127.0.0.1:$WB/_/flush" -d '{"timeout_s":3600}' >/dev/null
    t1=$(date +%s.%N)
    drain=$($PY -c "print(round($t1 - $t0, 1))")
    settle "$UP"
    dropcache
    rb=$(read_ranks "$WB" "r$n-" "$n" "$shard")
    ws=$($PY "$here/ckpt_ranks.py" write "http://127.0.0.1:$WS" ckpt "t$n-" "$n" "$shard" "$PART")
    settle "$UP"; settle "$WS"
    wb_m=$(mibs "$n" "$shard" "$(jq_ "$wb" "['slowest_s']")")
    rb_m=$(mibs "$n" "$shard" "$rb")
    ws_m=$(mibs "$n" "$shard" "$(jq_ "$ws" "['slowest_s']")")
    for p in r t; do
        [[ $(stat -c %s "$W/up-store/ckpt/$p$n-000") == "$shard" ]] ||
            { echo "ckpt_ranks: the backend's copy of $p$n-000 is not $shard bytes"; exit 1; }
    done
    echo "ranks=$n shard=$((shard >> 20))MiB: write-back ${wb_m} MiB/s = $(ratio "$wb_m" "$fio_w")x fio fsync'd write (${fio_w} MiB/s; goal 0.8 at 8 ranks); read-back ${rb_m} MiB/s = $(ratio "$rb_m" "$fio_r")x fio read (${fio_r} MiB/s; goal 0.9); write-through to the capped backend ${ws_m} MiB/s (write-back $(ratio "$wb_m" "$ws_m")x faster); drain ${drain} s; the write-back gateway spent ${wb_cpu} CPU s/GiB"
    # the next count starts on an empty disk: these shards are not needed again
    for p in r t; do for i in $(seq 0 $((n - 1))); do
        curl -sf -o /dev/null -X DELETE "http://127.0.0.1:$WB/ckpt/$p$n-$(printf %03d "$i")" || true
    done; done
done
