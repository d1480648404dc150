#!/usr/bin/env bash
# bench/checkpoint.sh (make bench): a 1 GiB checkpoint written with awscli (multipart, 8 MiB
# parts) into s3cached --write-mode back, against the local disk's sequential write rate
# measured in the same run (dd conv=fdatasync: write-back also acknowledges after fsync), and
# against --write-mode through to an upstream s3cached on the same machine, reached directly and
# across a link capped at SLOW_BPS (build/throttle; default 200 MB/s, an HDD array's pace).
# Ratios of seconds. awscli runs twice: with its default (Python) transfer client, and with
# `preferred_transfer_client = crt` (its C client, the one AWS picks on GPU instances): the
# Python client costs ~4.5 s of CPU per GiB on this 2-core machine, more than the disk takes.
# This awscli's CRT client ignores the endpoint's port (it dials :80): that run needs root and
# a free 127.0.0.1:80, and is skipped otherwise.
#   SLOW_BPS  the slow backend's bandwidth in bytes/s (default 200e6)
#   CKPT_MB   checkpoint size in MiB (default 1024)
#   BENCH_DIR work directory (default ${TMPDIR:-/tmp}/s3c-bench)
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
BIN=${S3CACHED_BIN:-$repo/build/s3cached}
MB=${CKPT_MB:-1024}
W=${BENCH_DIR:-${TMPDIR:-/tmp}/s3c-bench}/ckpt
PY=/usr/bin/python3
PIDS=()
# (throttle dies of the TERM: wait says 143, and under set -e that would become the exit status)
cleanup() { local p; for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done; rm -rf "$W"; }
trap cleanup EXIT
trap 'exit 143' TERM INT
rm -rf "$W"; mkdir -p "$W/up-store"
serve() { # NAME PORT ARGS... ; waits for /_/health
    local name=$1 p=$2; shift 2
    "$BIN" serve --listen "127.0.0.1:$p" --cache-dir "$W/$name-cache" --cache-size 8G --anonymous \
        --log-level warn "$@" >"$W/$name.log" 2>&1 </dev/null &
    PIDS+=($!)
    for _ in $(seq 1 200); do curl -sf -o /dev/null "http://127.0.0.1:$p/_/health" && return 0; sleep 0.05; done
    echo "checkpoint: $name did not start"; exit 1
}
now() { date +%s.%N; }
secs() { $PY -c "print(round($2 - $1, 3))"; }
head -c $((MB << 20)) /dev/urandom >"$W/ckpt.pt"
UP=$(free_port); WB=$(free_port); WT=$(free_port); SLOW=$(free_port); WS=$(free_port)
SLOW_BPS=${SLOW_BPS:-200e6}
THROTTLE_BIN=${THROTTLE_BIN:-$(dirname "$BIN")/throttle}
serve up "$UP" --backend "file://$W/up-store"
serve wb "$WB" --backend "http://127.0.0.1:$UP" --write-mode back
CRT=
if [[ $(id -u) == 0 ]] && ! curl -s -o /dev/null "http://127.0.0.1:80/" 2>/dev/null; then
    serve wbc 80 --backend "http://127.0.0.1:$UP" --write-mode back && CRT=1
    WBC_IX=$((${#PIDS[@]} - 1))
fi
serve wt "$WT" --backend "http://127.0.0.1:$UP" --write-mode through
if [[ -x $THROTTLE_BIN ]]; then
    "$THROTTLE_BIN" "$SLOW" "$UP" "$SLOW_BPS" >/dev/null &
    PIDS+=($!)
    serve ws "$WS" --backend "http://127.0.0.1:$SLOW" --write-mode through
fi
curl -sf -X PUT "http://127.0.0.1:$UP/ckpt" >/dev/null
export AWS_ACCESS_KEY_ID=bench AWS_SECRET_ACCESS_KEY=bench AWS_DEFAULT_REGION=us-east-1
unset AWS_CA_BUNDLE
aws_cp() { /usr/bin/aws --endpoint-url "http://127.0.0.1:$1" --no-sign-request s3 cp "$W/ckpt.pt" "s3://ckpt/$2" --only-show-errors; }
printf '[default]\ns3 =\n  preferred_transfer_client = crt\n' >"$W/crt.cfg"
# the disk's rate is measured right before each write-back run: it moves by 2x within minutes here
dd_run() {
    sync
    local t0 t1
    t0=$(now); dd if=/dev/zero of="$W/dd.out" bs=8M count=$((MB / 8)) conv=fdatasync status=none; t1=$(now)
    rm -f "$W/dd.out"; sync
    secs "$t0" "$t1"
}
# a write-through Complete is followed by a warm-up that fetches the object back into the cache:
# the next run starts once it ended, so that it does not share the disk and CPU with it
settle() {
    local _
    for _ in $(seq 1 1200); do
        curl -sf "http://127.0.0.1:$1/_/warm" | grep -q -E '"state":"(queued|running)"' || return 0
        sleep 0.1
    done
    echo "checkpoint: the warm-up on :$1 did not end"; exit 1
}
dd_s=$(dd_run)
t0=$(now); aws_cp "$WB" wb.pt; t1=$(now); wb_s=$(secs "$t0" "$t1")
curl -sf -X POST "http://127.0.0.1:$WB/_/flush" >/dev/null; sync
if [[ -n $CRT ]]; then
    ddc_s=$(dd_run)
    t0=$(now); AWS_CONFIG_FILE=$W/crt.cfg aws_cp 80 wbc.pt; t1=$(now); wbc_s=$(secs "$t0" "$t1")
    curl -sf -X POST "http://127.0.0.1:80/_/flush" >/dev/null; sync
    cmp -s "$W/ckpt.pt" "$W/up-store/ckpt/wbc.pt" || { echo "checkpoint: the drained copy (crt) differs"; exit 1; }
fi
# the CRT client's write-through run to the slow backend needs :80 too: the write-back gateway
# there makes way for a write-through one (each ratio compares runs of one client)
wsc_s=
if [[ -n $CRT && -x $THROTTLE_BIN ]]; then
    kill "${PIDS[$WBC_IX]}"; wait "${PIDS[$WBC_IX]}" 2>/dev/null || true; unset "PIDS[$WBC_IX]"
    serve wsc 80 --backend "http://127.0.0.1:$SLOW" --write-mode through
    t0=$(now); AWS_CONFIG_FILE=$W/crt.cfg aws_cp 80 wsc.pt; t1=$(now); wsc_s=$(secs "$t0" "$t1")
    settle 80
    cmp -s "$W/ckpt.pt" "$W/up-store/ckpt/wsc.pt" || { echo "checkpoint: the write-through copy (crt) differs"; exit 1; }
fi
t0=$(now); aws_cp "$WT" wt.pt; t1=$(now); wt_s=$(secs "$t0" "$t1")
settle "$WT"
ws_s=
if [[ -x $THROTTLE_BIN ]]; then
    t0=$(now); aws_cp "$WS" ws.pt; t1=$(now); ws_s=$(secs "$t0" "$t1")
    settle "$WS"
    cmp -s "$W/ckpt.pt" "$W/up-store/ckpt/ws.pt" || { echo "checkpoint: the write-through copy differs"; exit 1; }
fi
cmp -s "$W/ckpt.pt" "$W/up-store/ckpt/wb.pt" || { echo "checkpoint: the drained copy differs"; exit 1; }
mbs() { $PY -c "print(round($MB / $1))"; }
echo "checkpoint ($MB MiB, awscli multipart): dd conv=fdatasync ${dd_s}s ($(mbs "$dd_s") MiB/s); write-back ${wb_s}s ($(mbs "$wb_s") MiB/s) = $($PY -c "print(round($dd_s / $wb_s, 2))")x the disk (goal 0.9)"
echo "  write-through to a local upstream (unthrottled) ${wt_s}s: write-back $($PY -c "print(round($wt_s / $wb_s, 2))")x faster"
if [[ -n $CRT ]]; then
    echo "  awscli with its CRT client: dd ${ddc_s}s ($(mbs "$ddc_s") MiB/s); write-back ${wbc_s}s ($(mbs "$wbc_s") MiB/s) = $($PY -c "print(round($ddc_s / $wbc_s, 2))")x the disk (goal 0.9)"
else
    echo "  awscli with its CRT client: skipped (needs root and a free 127.0.0.1:80)"
fi
if [[ -n $ws_s ]]; then
    echo "  write-through to a ${SLOW_BPS} B/s backend ${ws_s}s ($(mbs "$ws_s") MiB/s): write-back $($PY -c "print(round($ws_s / $wb_s, 2))")x faster (goal 3x)"
    [[ -n $wsc_s ]] && echo "    with the CRT client: write-through ${wsc_s}s ($(mbs "$wsc_s") MiB/s), write-back $($PY -c "print(round($wsc_s / $wbc_s, 2))")x faster (goal 3x)"
else
    echo "  no $THROTTLE_BIN (make $(dirname "$BIN")/throttle): the slow-backend comparison was skipped"
fi
