#!/usr/bin/env bash
# bench/hits.sh: cache hits beside nginx static on the same files, alternating, ROUNDS times:
#   - 64 MiB objects, curl at 4 and 16 connections (GB/s)
#   - 112 KiB objects, wrk at 64 connections (requests/s): s3cached anonymous, and s3cached
#     verifying SigV4 on every request (presigned URLs: the signature in the query, the
#     signing key cached per day and scope) with its accounting on, beside nginx anonymous
# Each round runs every server once per case, one after the other, so that drift of the
# machine (another tenant, the host's page cache) lands on both; the summary gives each
# ratio per round and their median. S3CACHED_BIN_B (optional) is a second build measured in
# the same rounds (an A/B of a change).
#   BENCH_DIR  where the dataset lives (default ${TMPDIR:-/tmp}/s3c-bench, shared with run.sh)
#   DURATION   seconds per measurement (default 8);  ROUNDS (default 3)
#   DROP=1     the page cache dropped before each large-object run (reads from the disk)
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
shared_bench bench/hits.sh
BIN=${S3CACHED_BIN:-$repo/build/s3cached}
BIN_B=${S3CACHED_BIN_B:-}
for t in nginx wrk curl python3; do
    command -v "$t" >/dev/null || { echo "bench: $t is not installed (make deps-test)"; exit 1; }
done
export DURATION=${DURATION:-8}
ROUNDS=${ROUNDS:-3}
W=${BENCH_DIR:-${TMPDIR:-/tmp}/s3c-bench}
STORE=$W/store
BUCKET=bench
AK=AKHITSBENCH
SK=hits-bench-secret-key-0123456789
mkdir -p "$STORE/$BUCKET"
unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY all_proxy ALL_PROXY

NGINX_PORT=$(free_port)
PIDS=()
cleanup() {
    local p
    for p in "${PIDS[@]}"; do stop_pid "$p" 10; done
    PORT=$NGINX_PORT "$SB/nginx-static" stop >/dev/null 2>&1 || true
    rm -rf "$W"/hits-cache-*
}
trap cleanup EXIT
trap 'exit 143' TERM INT

# start BIN NAME [ARGS]: s3cached on the store; prints "PID PORT"
start() {
    local bin=$1 name=$2 port pid i cache=$W/hits-cache-$2
    shift 2
    port=$(free_port)
    mkdir -p "$cache"
    "$bin" serve --listen "127.0.0.1:$port" --backend "file://$STORE" --cache-dir "$cache" \
        --cache-size 8G --log-level warn "$@" >"$cache.log" 2>&1 </dev/null &
    pid=$!
    for ((i = 0; i < 100; i++)); do
        [[ $(curl -s --max-time 1 "http://127.0.0.1:$port/_/health") == ok* ]] &&
            { echo "$pid $port"; return 0; }
        sleep 0.1
    done
    echo "bench: $name did not answer /_/health in 10 s" >&2
    return 1
}

# result LABEL SCRIPT ENV...: the RESULT line of a reference script, without "RESULT "
result() {
    local label=$1 script=$2 line
    shift 2
    line=$(env "$@" timeout -k 5 $((DURATION + 150)) "$SB/$script" | grep '^RESULT' | tail -1) || true
    printf '%-26s %s\n' "$label" "${line#RESULT }" >&2
    echo "${line#RESULT }"
}
# kv KEY LINE: KEY's value in a RESULT line
kv() { sed -nE "s/.*(^| )$1=([0-9.]+).*/\2/p" <<<"$2"; }

echo "== dataset ($STORE/$BUCKET): 16 x 64 MiB, 2000 x 112 KiB"
DIR=$STORE/$BUCKET/large N=16 SIZE=64M "$SB/make-dataset" >/dev/null
DIR=$STORE/$BUCKET/small N=2000 SIZE=112K "$SB/make-dataset" >/dev/null
LARGE=$STORE/$BUCKET/large/MANIFEST
SMALL=$STORE/$BUCKET/small/MANIFEST

echo "== servers"
NGINX_PID=$(PORT=$NGINX_PORT ROOT=$STORE/$BUCKET WORKERS=2 LIFETIME=1800 "$SB/nginx-static")
declare -A URL PID
URL[nginx]=http://127.0.0.1:$NGINX_PORT
PID[nginx]=$NGINX_PID
names=(a)
read -r p port < <(start "$BIN" a --anonymous)
PIDS+=("$p"); URL[a]=http://127.0.0.1:$port/$BUCKET; PID[a]=$p
if [[ -n $BIN_B ]]; then
    read -r p port < <(start "$BIN_B" b --anonymous)
    PIDS+=("$p"); URL[b]=http://127.0.0.1:$port/$BUCKET; PID[b]=$p
    names+=(b)
fi
read -r p port < <(start "$BIN" signed --access-key "$AK" --secret-key "$SK")
PIDS+=("$p"); URL[signed]=http://127.0.0.1:$port/$BUCKET; PID[signed]=$p
# presigned URLs of the small objects (a day's validity), one per line of the walk
SIGNED_LIST=$W/hits-signed.list
python3 - "$SMALL" "$port" "$AK" "$SK" "$BUCKET/small" >"$SIGNED_LIST" <<'EOF'
import datetime, hashlib, hmac, sys, urllib.parse
manifest, port, ak, sk, prefix = sys.argv[1:6]
now = datetime.datetime.now(datetime.timezone.utc)
amz, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
scope = "%s/us-east-1/s3/aws4_request" % day
k = ("AWS4" + sk).encode()
for part in (day, "us-east-1", "s3", "aws4_request"):
    k = hmac.new(k, part.encode(), hashlib.sha256).digest()
for name in open(manifest).read().split():
    q = {"X-Amz-Algorithm": "AWS4-HMAC-SHA256", "X-Amz-Credential": ak + "/" + scope,
         "X-Amz-Date": amz, "X-Amz-Expires": "86400", "X-Amz-SignedHeaders": "host"}
    cq = "&".join("%s=%s" % (urllib.parse.quote(a, safe="-_.~"), urllib.parse.quote(b, safe="-_.~"))
                  for a, b in sorted(q.items()))
    path = "/%s/%s" % (prefix, name)
    creq = "\n".join(["GET", path, cq, "host:127.0.0.1:%s\n" % port, "host", "UNSIGNED-PAYLOAD"])
    sts = "\n".join(["AWS4-HMAC-SHA256", amz, scope, hashlib.sha256(creq.encode()).hexdigest()])
    print("%s?%s&X-Amz-Signature=%s" % (name, cq, hmac.new(k, sts.encode(), hashlib.sha256).hexdigest()))
EOF
code=$(curl -s -o /dev/null -w '%{http_code}' "${URL[signed]}/small/$(head -1 "$SIGNED_LIST")")
[[ $code == 200 ]] || { echo "bench: a presigned GET answered $code"; exit 1; }

echo "== warm (each server reads every object once)"
for n in "${names[@]}"; do
    result "warm-$n-large" http-large BASE_URL="${URL[$n]}/large" LIST="$LARGE" CONCURRENCY=4 TOOL=once >/dev/null
    result "warm-$n-small" http-large BASE_URL="${URL[$n]}/small" LIST="$SMALL" CONCURRENCY=4 TOOL=once >/dev/null
done
result warm-signed-small http-large BASE_URL="${URL[signed]}/small" LIST="$SIGNED_LIST" CONCURRENCY=4 TOOL=once >/dev/null
result warm-nginx-large http-large BASE_URL="${URL[nginx]}/large" LIST="$LARGE" CONCURRENCY=4 TOOL=once >/dev/null

drop() { [[ ${DROP:-0} == 1 ]] && { sync; echo 1 >/proc/sys/vm/drop_caches; } || true; }
declare -A R
for ((r = 1; r <= ROUNDS; r++)); do
    echo "== round $r"
    for c in 4 16; do
        for n in nginx "${names[@]}"; do
            drop
            line=$(result "large-c$c-$n" http-large BASE_URL="${URL[$n]}/large" LIST="$LARGE" \
                CONCURRENCY=$c TOOL=curl SERVER_PID="${PID[$n]}")
            R[large-c$c-$n-$r]=$(kv GBps "$line")
        done
    done
    for n in nginx "${names[@]}"; do
        line=$(result "small-c64-$n" http-small BASE_URL="${URL[$n]}/small" LIST="$SMALL" \
            CONNECTIONS=64 SERVER_PID="${PID[$n]}")
        R[small-$n-$r]=$(kv rps "$line")
    done
    line=$(result "small-c64-signed" http-small BASE_URL="${URL[signed]}/small" \
        LIST="$SIGNED_LIST" CONNECTIONS=64 SERVER_PID="${PID[signed]}")
    R[small-signed-$r]=$(kv rps "$line")
done

echo "== summary (ratios = s3cached / nginx, same round; median of $ROUNDS)"
median() { tr ' ' '\n' | grep -v '^n/a$' | grep . | sort -n | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)]; else print "-" }'; }
row() { # LABEL KEY SERVER
    local rs=() r
    for ((r = 1; r <= ROUNDS; r++)); do rs+=("$(ratio "${R[$2-$3-$r]:-}" "${R[$2-nginx-$r]:-}")"); done
    printf '%-34s %s   median %s\n' "$1" "${rs[*]}" "$(echo "${rs[*]}" | median)"
}
for n in "${names[@]}"; do
    row "64 MiB hits, 4 conns ($n)" large-c4 "$n"
    row "64 MiB hits, 16 conns ($n)" large-c16 "$n"
    row "112 KiB hits, 64 conns ($n, anon)" small "$n"
done
row "112 KiB hits, 64 conns (SigV4)" small signed
echo "nginx figures: $(for ((r = 1; r <= ROUNDS; r++)); do printf '%s/%s/%s ' "${R[large-c4-nginx-$r]}" "${R[large-c16-nginx-$r]}" "${R[small-nginx-$r]}"; done)(GB/s c4 / GB/s c16 / req/s)"
