#!/usr/bin/env bash
# bench/shards.sh (make bench): reads inside tar shards, as ratios taken in one run.
#   1. member reads of 112 KiB samples from a cached shard vs 112 KiB whole-object hits:
#      wrk -c64 (../shared/bench/http-small) walking GET /bucket/shard.tar?member=NAME and
#      GET /bucket/small/NAME, in the order whole, member, member, whole (means of two, so
#      that a load changing during the run weighs on both alike; goal: >= 0.9x)
#   2. a Python client (http.client, keep-alive) reading 64 samples per POST ?batch vs the same
#      client issuing the 64 member GETs one after another (goal: >= 3x samples/s)
#   3. a cold batch over the S3 backend (nginx serving the store as the upstream): every member
#      of a cold shard in random order; the origin should send each block once (bytes the
#      backend read / the shard's size: goal 1.00)
# s3cached runs --anonymous (the serving cost, not SigV4's). Everything it starts is stopped
# by pid; total time is bounded (~2 minutes with DURATION=10). SHARED_BENCH overrides where
# the reference scripts are (default ../shared/bench beside the repo).
#   BENCH_DIR   where the data and caches live   (default ${TMPDIR:-/tmp}/s3c-bench-shards)
#   DURATION    seconds per measurement          (default 10)
#   SAMPLES     samples per shard (112 KiB each) (default 2000, a 220 MiB shard)
#   KEEP_DATA=0 remove the data at the end       (default: kept for the next run)
#   RTT_US      part 2 with the client a network round trip away: it reaches s3cached through
#               build/delayline (DELAYLINE_BIN), which delays each byte RTT_US/2 microseconds
#               each way, so every request/response pays RTT_US more, as across a datacenter
#               network (loopback has none: this kernel has no netem). Default 0: direct
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
shared_bench bench/shards.sh
BIN=${S3CACHED_BIN:-$repo/build/s3cached}
[[ -x $BIN ]] || { echo "bench/shards.sh: no executable at $BIN (run make)"; exit 1; }
for t in nginx wrk curl; do
    command -v "$t" >/dev/null || { echo "bench/shards.sh: $t is not installed (make deps-test)"; exit 1; }
done
PY=/usr/bin/python3
RTT_US=${RTT_US:-0}
[[ $RTT_US =~ ^[0-9]+$ ]] || { echo "bench/shards.sh: RTT_US must be microseconds (an integer)"; exit 1; }
DELAYLINE_BIN=${DELAYLINE_BIN:-$(dirname "$BIN")/delayline}
if ((RTT_US > 0)) && [[ ! -x $DELAYLINE_BIN ]]; then
    echo "bench/shards.sh: no executable at $DELAYLINE_BIN (make $(dirname "$BIN")/delayline)"; exit 1
fi
export DURATION=${DURATION:-10}
SAMPLES=${SAMPLES:-2000}
W=${BENCH_DIR:-${TMPDIR:-/tmp}/s3c-bench-shards}
STORE=$W/store
BUCKET=bench
RESULTS=$W/results.log
mkdir -p "$STORE/$BUCKET/small"
unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY all_proxy ALL_PROXY
T0=$(date +%s)

free_
PIDS=()
UP_PORT=
cleanup() {
    local p
    for p in "${PIDS[@]}"; do stop_pid "$p" 10; done
    [[ -n $UP_PORT ]] && { PORT=$UP_PORT "$SB/nginx-static" stop >/dev/null 2>&1 || true; }
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
        --cache-size 4G --anonymous --log-level warn "$@" >"$cache.log" 2>&1 </dev/null &
    pid=$!
    for ((i = 0; i < 100; i++)); do
        kill -0 "$pid" 2>/dev/null || { echo "bench: s3cached exited; log:" >&2; tail -20 "$cache.log" >&2; return 1; }
        [[ $(curl -s --max-time 1 "http://127.0.0.1:$port/_/health") == ok* ]] && { echo "$pid $port"; return 0; }
        sleep 0.1
    done
    echo "bench: s3cached did not answer /_/health in 10 s" >&2
    return 1
}

run() {
    local label=$1 script=$2 line
    shift 2
    line=$(env "$@" timeout -k 5 $((DURATION + 150)) "$SB/$script" | grep '^RESULT' | tail -1) || true
    [[ -n $line ]] || { echo "bench: $label produced no RESULT" >&2; line="RESULT failed=1"; }
    printf '%s\t%s\n' "$label" "${line#RESULT }" >>"$RESULTS"
    printf '%-22s %s\n' "$label" "${line#RESULT }"
}

echo "== data ($STORE/$BUCKET): a shard of $SAMPLES x 112 KiB samples, the same samples as objects"
timeout 600 $PY - "$STORE/$BUCKET" "$SAMPLES" <<'PY'
import io, os, sys, tarfile
root, n = sys.argv[1], int(sys.argv[2])
shard = os.path.join(root, "shard.tar")
names = ["sample-%06d.jpg" % i for i in range(n)]
if not (os.path.exists(shard) and os.path.exists(os.path.join(root, "MEMBERS"))
        and len(open(os.path.join(root, "MEMBERS")).read().split()) == n):
    with tarfile.open(shard + ".tmp", "w", format=tarfile.PAX_FORMAT) as tf:
        for name in names:
            d = os.urandom(112 << 10)
            with open(os.path.join(root, "small", name), "wb") as f:
                f.write(d)
            t = tarfile.TarInfo(name)
            t.size = len(d)
            t.mtime = 1700000000
            tf.addfile(t, io.BytesIO(d))
    os.rename(shard + ".tmp", shard)
    with open(os.path.join(root, "MEMBERS"), "w") as f:
        f.write("\n".join(names) + "\n")
with open(os.path.join(root, "small", "MANIFEST"), "w") as f:
    f.write("\n".join(names) + "\n")
with open(os.path.join(root, "MEMBER_URLS"), "w") as f:
    f.write("\n".join("shard.tar?member=" + m for m in names) + "\n")
PY
: >"$RESULTS"
SHARD_BYTES=$(stat -c %s "$STORE/$BUCKET/shard.tar")

echo "== servers"
read -r S3_PID S3_PORT < <(start_s3 "$W/cache-warm") || true
[[ -n ${S3_PORT:-} ]] || { echo "bench: s3cached did not start"; exit 1; }
PIDS+=("$S3_PID")
S3=http://127.0.0.1:$S3_PORT/$BUCKET
echo "s3cached pid $S3_PID on http://127.0.0.1:$S3_PORT"

echo "== warm: the shard read whole (indexed at fill time), each object once"
echo shard.tar >"$W/SHARD_LIST"
run warm-shard http-large BASE_URL="$S3" LIST="$W/SHARD_LIST" CONCURRENCY=1 TOOL=once SERVER_PID="$S3_PID"
run warm-small http-large BASE_URL="$S3/small" LIST="$STORE/$BUCKET/small/MANIFEST" CONCURRENCY=4 TOOL=once SERVER_PID="$S3_PID"
for ((i = 0; i < 100; i++)); do  # the fill-time index build runs in the background
    curl -s "http://127.0.0.1:$S3_PORT/_/metrics" | grep -q '^s3cached_member_index_builds_total [1-9]' && break
    sleep 0.1
done

echo "== 112 KiB: member reads vs whole-object hits, wrk -c64, ${DURATION}s each, A B B A"
run whole-hits-1 http-small BASE_URL="$S3/small" LIST="$STORE/$BUCKET/small/MANIFEST" SERVER_PID="$S3_PID"
run member-hits-1 http-small BASE_URL="$S3" LIST="$STORE/$BUCKET/MEMBER_URLS" SERVER_PID="$S3_PID"
run member-hits-2 http-small BASE_URL="$S3" LIST="$STORE/$BUCKET/MEMBER_URLS" SERVER_PID="$S3_PID"
run whole-hits-2 http-small BASE_URL="$S3/small" LIST="$STORE/$BUCKET/small/MANIFEST" SERVER_PID="$S3_PID"

PY_PORT=$S3_PORT RTT_NOTE= DL_PID=
if ((RTT_US > 0)); then  # the client reaches s3cached through the delay line
    PY_PORT=$(free_port)
    rm -f "$W/delayline.log"  # a stale "ready" must not be read before the relay listens
    "$DELAYLINE_BIN" "$PY_PORT" "$S3_PORT" $((RTT_US / 2)) >"$W/delayline.log" 2>&1 </dev/null &
    DL_PID=$!
    PIDS+=("$DL_PID")
    for ((i = 0; i < 50; i++)); do grep -q ready "$W/delayline.log" 2>/dev/null && break; sleep 0.1; done
    grep -q ready "$W/delayline.log" || { echo "bench: delayline did not start"; cat "$W/delayline.log"; exit 1; }
    RTT_NOTE=" (client behind a ${RTT_US} us round trip)"
fi
echo "== a Python client: 64 samples per batch vs 64 member GETs in turn, ${DURATION}s each$RTT_NOTE"
timeout -k 5 $((3 * DURATION + 60)) $PY - "127.0.0.1" "$PY_PORT" "$BUCKET" "$STORE/$BUCKET/MEMBERS" "$DURATION" >>"$RESULTS" <<'PY'
import http.client, json, random, sys, time
host, port, bucket, members, dur = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], float(sys.argv[5])
names = open(members).read().split()
rnd = random.Random(1)
conn = http.client.HTTPConnection(host, port, timeout=60)

def gets(batch):
    for m in batch:
        conn.request("GET", "/%s/shard.tar?member=%s" % (bucket, m))
        r = conn.getresponse()
        b = r.read()
        assert r.status == 200 and len(b) == 112 << 10, (r.status, len(b))
    return len(batch)

def batched(batch):
    body = json.dumps({"items": [{"key": "shard.tar", "member": m} for m in batch]})
    conn.request("POST", "/%s?batch" % bucket, body=body, headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    data = memoryview(r.read())
    assert r.status == 200, (r.status, bytes(data[:300]))
    # the entries in place (ustar headers; a client of its own would parse pax too): the
    # sample bytes are slices, as a loader hands them to its decoder
    n, at = 0, 0
    while at + 512 <= len(data) and data[at] != 0:
        size = int(bytes(data[at + 124:at + 136]).rstrip(b"\0 ") or b"0", 8)
        sample = data[at + 512:at + 512 + size]
        assert len(sample) == 112 << 10
        n += 1
        at += 512 + (size + 511) // 512 * 512
    assert n == len(batch)
    return n

for label, fn in (("py-member-gets", gets), ("py-batch64", batched)):
    n, t0 = 0, time.time()
    while time.time() - t0 < dur:
        n += fn(rnd.sample(names, 64))
    el = time.time() - t0
    print("%s\tsamples_per_s=%.0f samples=%d seconds=%.2f" % (label, n / el, n, el))
    print("%-22s samples_per_s=%.0f samples=%d" % (label, n / el, n), file=sys.stderr)
PY
stop_pid "$DL_PID" 10  # (no-op when direct)
stop_pid "$S3_PID" 10

echo "== a cold batch over the S3 backend (nginx upstream), every member in random order"
UP_PORT=$(free_port)
UP_PID=$(PORT=$UP_PORT ROOT=$STORE WORKERS=1 LIFETIME=600 "$SB/nginx-static")
read -r C_PID C_PORT < <(start_s3 "$W/cache-cold" --backend "http://127.0.0.1:$UP_PORT") || true
[[ -n ${C_PORT:-} ]] || { echo "bench: s3cached (S3 backend) did not start"; exit 1; }
PIDS+=("$C_PID")
timeout -k 5 300 $PY - "127.0.0.1" "$C_PORT" "$BUCKET" "$STORE/$BUCKET/MEMBERS" >>"$RESULTS" <<'PY'
import http.client, json, random, sys, time
host, port, bucket, members = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
names = open(members).read().split()
random.Random(2).shuffle(names)
conn = http.client.HTTPConnection(host, port, timeout=300)
body = json.dumps({"items": [{"key": "shard.tar", "member": m} for m in names]})
t0 = time.time()
conn.request("POST", "/%s?batch" % bucket, body=body, headers={"Content-Type": "application/json"})
r = conn.getresponse()
n = len(r.read())
el = time.time() - t0
assert r.status == 200, r.status
conn.request("GET", "/_/stats")
st = json.loads(conn.getresponse().read())
print("cold-batch\tseconds=%.2f MBps=%.0f backend_bytes=%d backend_requests=%d" % (
    el, n / el / 1e6, st["backend"]["bytes_read"], st["backend"]["requests"]))
print("%-22s seconds=%.2f MBps=%.0f backend_bytes=%d" % ("cold-batch", el, n / el / 1e6,
      st["backend"]["bytes_read"]), file=sys.stderr)
PY
stop_pid "$C_PID" 10
PORT=$UP_PORT "$SB/nginx-static" stop >/dev/null 2>&1 || true
UP_PORT=

echo
echo "== summary (one run, same machine)"
mean() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "" || b == "") print ""; else printf "%.0f", (a + b) / 2 }'; }
wh=$(mean "$(field whole-hits-1 rps)" "$(field whole-hits-2 rps)")
mh=$(mean "$(field member-hits-1 rps)" "$(field member-hits-2 rps)")
pg=$(field py-member-gets samples_per_s); pb=$(field py-batch64 samples_per_s)
cb=$(field cold-batch backend_bytes)
for l in whole-hits-1 member-hits-1 member-hits-2 whole-hits-2; do
    bad=$(field "$l" errors)
    [[ -z ${bad//0/} ]] || echo "WARNING: $l had errors: $bad"
done
printf '%-44s %10s %10s %8s %6s\n' "measure" "reference" "shards" "ratio" "goal"
printf '%-44s %10s %10s %8s %6s\n' "112KiB member hits vs whole hits, req/s c64" "$wh" "$mh" "$(ratio "$mh" "$wh")" ">=0.9"
printf '%-44s %10s %10s %8s %6s%s\n' "python: batch of 64 vs 64 GETs, samples/s" "$pg" "$pb" "$(ratio "$pb" "$pg")" ">=3" "$RTT_NOTE"
printf '%-44s %10s %10s %8s %6s\n' "cold batch, S3 backend: origin bytes/shard" "$SHARD_BYTES" "$cb" "$(ratio "$cb" "$SHARD_BYTES")" "1.00"
echo "results log: $RESULTS   total $(($(date +%s) - T0))s"
