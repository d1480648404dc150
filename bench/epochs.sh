#!/usr/bin/env bash
# bench/epochs.sh — three epochs of a training set through s3cached and through nginx
# proxy_cache, each from an empty cache, beside a direct read across the same link: does the
# first epoch run at the link's speed, is everything cached after it (the cache writer against
# the disk's own O_DIRECT write speed), do the next epochs fetch at most what the one before
# left uncached, and do epochs 2-3 run at the speed of the machine (the page cache where RAM
# holds the set, the disk where it does not: DROP=1)? Part of make bench.
#
#   make all && bench/epochs.sh            # from the project's root
#
# The backend is a second s3cached serving a POSIX store from its page cache, reached through
# build/throttle at LINK_BPS (a backend network). Readers: PAR parallel whole-object GETs
# (curl), every shard once an epoch. Prints one JSON line per figure and a table.
# Env: NSHARD (24) shards of SIZE_MB (256) MiB; LINK_BPS (500000000); PAR (8);
#      CONN_BPS (0: none): the link's cap per connection, FIRST_BYTE_MS (0): its delay before
#      each answer's first byte (a cloud store: CONN_BPS=9e7 FIRST_BYTE_MS=20); with either, the
#      direct read is also done with RANGES (16) ranged GETs per object at once (direct-ranged);
#      SMALL=N: N objects of SMALL_KB (112) KiB instead of the shards, each of the PAR readers
#      reading its share in order, one GET after another over one keep-alive connection;
#      PLAN=1: s3cached's readers post their read plans first (post_plans below);
#      S3C_ARGS (extra flags for the gateway under test, e.g. "--fill-window 0");
#      EPOCHS (3; 1 or 2 for a quicker look); PAIRED=N: N more rounds after them, s3cached then
#      nginx each round, both caches full (with DROP=1: from the disk); WITH_NGINX=0 skips nginx; DDMB (1024; 0 = skip) measures the disk with dd O_DIRECT;
#      DROP=1 drops the page cache before epochs 2 and 3 (a set larger than RAM: needs root).
#      SLOW_DISK_BPS: a cache disk slower than the link: the fault shim (build/faults/faultinj.so,
#      SHIM) caps the writes of s3cached and of nginx (one worker: the cap holds per process) to
#      their cache directories at this rate; the writer is then compared with it, not with dd.
#      TMPDIR: where the store, the caches and nginx's cache live (/dev/shm: a cache in memory).
#      S3CACHED, THROTTLE, NGINX_BIN: binaries (build/s3cached, build/throttle, nginx).
#      PAGE_REPORTING=pause (root): on a VM whose balloon reports free pages to the host (Linux
#      free page reporting), hold the reporting off for the run where the kernel can (this VM's
#      min_free_ms; restored after) and touch the free memory once first, so that every page the run uses is backed, as a GPU node's RAM
#      is. A reported page comes back only through a host page fault: here the first write of
#      16 GiB ran at 0.49 GB/s, the next at 3.2 GB/s; page-cache fills (a cache's writer, a
#      cold read after a drop) slow down by as much, and at random (the same cold read of the
#      same files 1.5 or 3.0 GB/s, for nginx and s3cached alike). Printed either way: the
#      reporting's state and what it handed back during the run.
# Figures: bench/RESULTS.md.
set -u
S3CACHED=${S3CACHED:-${S3CACHED_BIN:-$PWD/build/s3cached}}; THROTTLE=${THROTTLE:-$PWD/build/throttle}
NGINX_BIN=${NGINX_BIN:-nginx}
NSHARD=${NSHARD:-24}; SIZE_MB=${SIZE_MB:-256}; LINK_BPS=${LINK_BPS:-500000000}; PAR=${PAR:-8}
CONN_BPS=${CONN_BPS:-0}; FIRST_BYTE_MS=${FIRST_BYTE_MS:-0}; RANGES=${RANGES:-16}
SMALL=${SMALL:-0}; SMALL_KB=${SMALL_KB:-112}
SLOW_DISK_BPS=${SLOW_DISK_BPS:-0}; SHIM=${SHIM:-$(dirname "$S3CACHED")/faults/faultinj.so}
EPOCHS=${EPOCHS:-3}; PAIRED=${PAIRED:-0}; S3C_ARGS=${S3C_ARGS:-}; WITH_NGINX=${WITH_NGINX:-1}; DDMB=${DDMB:-1024}; DROP=${DROP:-0}
W=$(mktemp -d "${TMPDIR:-/tmp}/epochs.XXXXXX"); RES=$W/results.jsonl
PIDS=""
. "$(dirname "$0")/common.sh" # free_port, the page-reporting helpers
health() { for _ in $(seq 150); do curl -sf -o /dev/null "$1" && return 0; sleep 0.1; done; echo "no answer: $1" >&2; exit 1; }
PR_SAVED=""
trap 'page_reporting_restore; for p in $PIDS; do kill $p 2>/dev/null; done; sleep 0.3; rm -rf "$W"' EXIT
[ "${PAGE_REPORTING:-}" = pause ] && { page_reporting_hold; touch_free_memory; }
PR_KIB0=$(page_reporting_kib); PR_STATE=$(page_reporting_state)
[ -z "$PR_STATE" ] || echo "free page reporting: $PR_STATE${PR_SAVED:+ (held off for the run)}"
[ -x "$S3CACHED" ] && [ -x "$THROTTLE" ] || { echo "build first: $S3CACHED, $THROTTLE" >&2; exit 1; }
[ "$SLOW_DISK_BPS" = 0 ] || [ -f "$SHIM" ] || { echo "no fault shim at $SHIM (make $SHIM)" >&2; exit 1; }
# slowed DIR: SLOWED, an env(1) prefix that caps the writes under DIR at SLOW_DISK_BPS (env execs
# the command: $! stays the server's pid)
slowed() { SLOWED=(env); [ "$SLOW_DISK_BPS" = 0 ] || SLOWED=(env LD_PRELOAD="$SHIM" S3C_FAULT="slow:$SLOW_DISK_BPS:$1"); }
if [ "$DDMB" -gt 0 ]; then
  dd if=/dev/zero of="$W/dd" bs=8M count=$((DDMB/8)) oflag=direct 2>"$W/dd.err"
  tail -1 "$W/dd.err" | sed 's/^/disk write O_DIRECT: /'
  DDW=$(tail -1 "$W/dd.err" | awk '{u=$NF; v=$(NF-1); print (u ~ /^GB/ ? v : u ~ /^MB/ ? v/1000 : "")}')
  dd if="$W/dd" of=/dev/null bs=8M iflag=direct 2>&1 | tail -1 | sed 's/^/disk read O_DIRECT: /'
  rm -f "$W/dd"
fi
python3 - "$W/store/bench" "$NSHARD" "$SIZE_MB" "$SMALL" "$SMALL_KB" <<'EOF'
import os, sys, tarfile
d, n, mb = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]); os.makedirs(d, exist_ok=True)
pool = os.urandom(16 << 20); S = 4 << 20
small, skb = int(sys.argv[4]), int(sys.argv[5])
for k in range(small): # ImageNet-sized objects
    with open(f"{d}/img-{k:06d}.jpg", "wb") as f:
        off = k * 8192 % (12 << 20)
        f.write(pool[off:off + skb * 1024])
for k in range(0 if small else n):
    with open(f"{d}/shard-{k:03d}.tar", "wb") as f:
        for i in range(mb // 4):
            ti = tarfile.TarInfo(f"s{k:03d}-{i:03d}.bin"); ti.size = S
            f.write(ti.tobuf(format=tarfile.USTAR_FORMAT))
            off = (k * 64 + i) * 4096 % (12 << 20)
            f.write(pool[off:off + S])
        f.write(b"\0" * 1024)
EOF
SHARDS=$(cd "$W/store/bench" && ls)
BYTES=$(cat "$W"/store/bench/* | wc -c)
BACK=$(free_port); LINK=$(free_port); GW=$(free_port); NGX=$(free_port)
"$S3CACHED" serve --anonymous --backend "file://$W/store" --cache-dir "$W/cache-back" --cache-size 100G \
  --revalidate-after never --listen 127.0.0.1:$BACK >"$W/back.log" 2>&1 & PIDS="$PIDS $!"
"$THROTTLE" $LINK $BACK "$LINK_BPS" "$CONN_BPS" "$FIRST_BYTE_MS" >"$W/throttle.log" 2>&1 & PIDS="$PIDS $!"
health http://127.0.0.1:$BACK/_/health
drop() { [ "$DROP" = 1 ] && sync && echo 1 >/proc/sys/vm/drop_caches; }
# one reader's share in the small-object mode: a curl -K list, one keep-alive connection
small_reader() { # PORT INDEX
  printf '%s\n' $SHARDS | awk -v p="$PAR" -v i="$2" -v port="$1" \
    'NR % p == i { printf "url = \"http://127.0.0.1:%s/bench/%s\"\noutput = \"/dev/null\"\nfail\n", port, $0 }' |
    curl -s -K - || echo "a GET failed (reader $2)" >&2; }
# one object as RANGES ranged GETs at once, the way the AWS CRT and s5cmd read (SIZE PORT KEY)
ranged_get() {
  python3 -c 'import sys
size, n, url = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
step = -(-size // n)
for a in range(0, size, step):
    print("url = \"%s\"\nrange = \"%d-%d\"\noutput = \"/dev/null\"\nfail" % (url, a, min(size, a + step) - 1))' \
    "$1" "$RANGES" "http://127.0.0.1:$2/bench/$3" | curl -s --no-progress-meter --parallel --parallel-max "$RANGES" -K - ||
    echo "a ranged GET failed ($3)" >&2; }
export -f ranged_get; export RANGES
# PLAN=1: each reader's read plan (POST /_/plan, docs/plans.md) at the start of s3cached's
# epochs: in the small-object mode its share, in its order; with shards one plan of the list.
# The bodies are made here, before any clock runs; each epoch posts them (curl, at once).
NPLAN=1; [ "$SMALL" -gt 0 ] && NPLAN=$PAR
if [ "${PLAN:-0}" = 1 ]; then
  for i in $(seq 0 $((NPLAN - 1))); do
    printf '%s\n' $SHARDS | awk -v p="$NPLAN" -v i="$i" 'NR % p == i' |
      python3 -c 'import json, sys; print(json.dumps({"bucket": "bench", "name": "rank-" + sys.argv[1],
  "keys": sys.stdin.read().split()}))' "$i" >"$W/plan-$i.json"
  done
fi
post_plans() { # PORT: one curl for all of them (a process each would cost more than the POSTs)
  local i args=()
  for i in $(seq 0 $((NPLAN - 1))); do
    [ "$i" = 0 ] || args+=(--next)
    args+=(-sf -o /dev/null -X POST --data-binary @"$W/plan-$i.json" "http://127.0.0.1:$1/_/plan")
  done
  curl "${args[@]}" || echo "POST /_/plan failed" >&2; }
epoch() { # LABEL PORT [ranged]
  local t0 t1; t0=$(date +%s.%N)
  [ "${PLAN:-0}" = 1 ] && [ "${1#s3cached}" != "$1" ] && post_plans "$2"
  if [ "$SMALL" -gt 0 ]; then
    local rp=""
    for i in $(seq 0 $((PAR - 1))); do small_reader "$2" "$i" & rp="$rp $!"; done
    wait $rp # the readers only: the servers are children too
  elif [ "${3:-}" = ranged ]; then
    (cd "$W/store/bench" && stat -c '%s %n' $SHARDS) |
      xargs -P "$PAR" -L1 bash -c 'ranged_get "$0" '"$2"' "$1"'
  else
    printf '%s\n' $SHARDS | xargs -P "$PAR" -I{} curl -sf -o /dev/null http://127.0.0.1:$2/bench/{} || echo "a GET failed ($1)" >&2
  fi
  t1=$(date +%s.%N)
  python3 -c "import sys; s=$t1-$t0; print('{\"label\":\"%s\",\"s\":%.3f,\"GBps\":%.3f}' % (sys.argv[1], s, $BYTES/s/1e9))" "$1" | tee -a "$RES"; }
backstats() { curl -s http://127.0.0.1:$BACK/_/stats | python3 -c 'import json, sys; c = json.load(sys.stdin)["cache"]
print("the backend store cache (%s): %d hits, %d misses" % (sys.argv[1], c["hits"], c["misses"]))' "$1"; }
epoch backend-warm $BACK; backstats "after its warm-up"; epoch direct-1 $LINK
SLOWCONN=0; [ "$CONN_BPS" != 0 ] || [ "$FIRST_BYTE_MS" != 0 ] && SLOWCONN=1
[ "$SLOWCONN" = 1 ] && [ "$SMALL" = 0 ] && epoch direct-ranged-1 $LINK ranged
slowed "$W/cache-s3c"; "${SLOWED[@]}" "$S3CACHED" serve --anonymous --backend http://127.0.0.1:$LINK --cache-dir "$W/cache-s3c" --cache-size 100G \
  --revalidate-after never $S3C_ARGS --listen 127.0.0.1:$GW >"$W/gw.log" 2>&1 & S3C=$!; PIDS="$PIDS $S3C"
health http://127.0.0.1:$GW/_/health
gwstats() { curl -s http://127.0.0.1:$GW/_/stats; }
for e in $(seq "$EPOCHS"); do
  [ $e -gt 1 ] && drop
  gwstats >"$W/before.json"
  T0=$(date +%s.%N)
  epoch s3cached-$e $GW
  # the fills of the epoch end (synced, indexed) before the next one: wait for no reservation
  for _ in $(seq 600); do
    gwstats | python3 -c 'import json,sys; sys.exit(json.load(sys.stdin)["cache"].get("reserved_bytes",0)!=0)' && break
    sleep 0.1
  done
  FILL_S=$(python3 -c "print($(date +%s.%N)-$T0)")
  gwstats | python3 -c '
import json, sys
b = json.load(open(sys.argv[1])); a = json.load(sys.stdin); c = a["cache"]
d = lambda sec, k: a[sec].get(k, 0) - b[sec].get(k, 0)
print(json.dumps({"label": "s3cached-cache-after-" + sys.argv[2],
  "used_bytes": c["used_bytes"], "uncached_bytes": d("cache", "uncached_bytes"),
  "backend_bytes": d("backend", "bytes_read"), "fill_bytes": d("cache", "fill_bytes"),
  "hits": d("cache", "hits"), "misses": d("cache", "misses"), "partial": d("cache", "partial"),
  "fill_s": float(sys.argv[3]),
  **({"plans": {k: v for k, v in a["plans"].items() if k != "list"}} if a.get("plans", {}).get("held") else {})}))' \
    "$W/before.json" $e "$FILL_S" | tee -a "$RES"
done
backstats "after the s3cached epochs"
[ "$PAIRED" -gt 0 ] && [ "$WITH_NGINX" = 1 ] || kill $S3C # else idle until the paired rounds
if [ "$WITH_NGINX" = 1 ]; then
  mkdir -p "$W/ngx/cache"
  # the shim's cap holds per process: one worker under SLOW_DISK_BPS, so that nginx's disk is as
  # slow as s3cached's (the link, not the worker, bounds its epoch 1)
  NGX_WORKERS=auto; [ "$SLOW_DISK_BPS" = 0 ] || NGX_WORKERS=1
  cat >"$W/ngx/nginx.conf" <<EOF
worker_processes $NGX_WORKERS; pid $W/ngx/pid; error_log $W/ngx/err;
events { worker_connections 4096; }
http { access_log off; sendfile on; client_body_temp_path $W/ngx;
  proxy_temp_path $W/ngx/cache/tmp; fastcgi_temp_path $W/ngx; uwsgi_temp_path $W/ngx; scgi_temp_path $W/ngx;
  proxy_cache_path $W/ngx/cache levels=1:2 keys_zone=c:64m max_size=100g inactive=1d use_temp_path=off;
  server { listen 127.0.0.1:$NGX;
    location / { proxy_pass http://127.0.0.1:$LINK; proxy_http_version 1.1; proxy_set_header Connection "";
      proxy_cache c; proxy_cache_key \$uri; proxy_cache_valid 200 1d; proxy_cache_lock on;
      proxy_cache_lock_timeout 600s; } } }
EOF
  [ "$(id -u)" = 0 ] && sed -i '1s/^/user root; /' "$W/ngx/nginx.conf"
  slowed "$W/ngx/cache"; "${SLOWED[@]}" "$NGINX_BIN" -e "$W/ngx/err" -c "$W/ngx/nginx.conf" -p "$W/ngx"; sleep 0.3; PIDS="$PIDS $(cat "$W/ngx/pid")"
  for e in $(seq "$EPOCHS"); do [ $e -gt 1 ] && drop; epoch nginx-proxy_cache-$e $NGX; done
  # paired rounds: both caches full, each read once a round, one after the other (with DROP=1
  # each from the disk): run-to-run noise on a shared VM (+-15 %) cancels out of the pairs
  for r in $(seq "$PAIRED"); do
    drop; epoch s3cached-round-$r $GW; drop; epoch nginx-proxy_cache-round-$r $NGX
  done
fi
epoch direct-2 $LINK
[ "$SLOWCONN" = 1 ] && [ "$SMALL" = 0 ] && epoch direct-ranged-2 $LINK ranged
[ -z "$PR_STATE" ] || echo "free pages reported to the host during the run: $(( ($(page_reporting_kib) - PR_KIB0) >> 10 )) MiB"
python3 - "$RES" "$BYTES" "${DDW:-}" "$SLOW_DISK_BPS" <<'EOF'
import json, sys
r = {j["label"]: j for j in map(json.loads, open(sys.argv[1]))}
total, ddw, slow = int(sys.argv[2]), sys.argv[3], float(sys.argv[4])
# the disk the writer is compared with: the slowed one, else dd's O_DIRECT write
disk, disk_name = (slow / 1e9, "slowed disk") if slow else (float(ddw or 0), "disk O_DIRECT")
d = (r["direct-1"]["GBps"] + r["direct-2"]["GBps"]) / 2
print(f"\ndirect across the link: {d:.3f} GB/s (one GET per object)")
if "direct-ranged-1" in r:
    dr = (r["direct-ranged-1"]["GBps"] + r["direct-ranged-2"]["GBps"]) / 2
    print(f"direct across the link: {dr:.3f} GB/s (ranged GETs per object at once)")
    for who in ("s3cached", "nginx-proxy_cache"):
        if f"{who}-1" in r:
            print(f"{who:18s} epoch 1 = {r[f'{who}-1']['GBps']/dr:.2f} of the ranged direct read")
e = {who: [r.get(f"{who}-{i}", {}).get("GBps", 0.0) for i in (1, 2, 3)] for who in ("s3cached", "nginx-proxy_cache")
     if f"{who}-1" in r}
for who, v in e.items():
    print(f"{who:18s} epoch 1 {v[0]:6.3f} GB/s ({v[0]/d:.2f} of direct)   epoch 2 {v[1]:6.2f}   epoch 3 {v[2]:6.2f}")
if len(e) == 2:
    s, n = e["s3cached"], e["nginx-proxy_cache"]
    q = lambda i: f"{s[i]/n[i]:.2f}" if n[i] else "-"
    print(f"s3cached / nginx    epoch 1 {q(0)}   epoch 2 {q(1)}   epoch 3 {q(2)}")
rounds = [(r[f"s3cached-round-{i}"]["GBps"], r[f"nginx-proxy_cache-round-{i}"]["GBps"])
          for i in range(1, 100) if f"nginx-proxy_cache-round-{i}" in r]
if rounds:
    print("paired rounds, s3cached / nginx GB/s: " + "  ".join(f"{a:.2f}/{b:.2f}" for a, b in rounds))
    sa, sb = sum(a for a, _ in rounds), sum(b for _, b in rounds)
    print(f"paired rounds: s3cached {sa/len(rounds):.2f} GB/s, nginx {sb/len(rounds):.2f} GB/s, "
          f"ratio of the means {sa/sb:.2f}")
for i in (1, 2, 3):
    c = r.get(f"s3cached-cache-after-{i}")
    if c:
        # written over the epoch and the tail the writer still had after its last GET
        w = c["fill_bytes"] / c.get("fill_s", r[f"s3cached-{i}"]["s"]) / 1e9
        of = f" = {w/disk:.2f} of the {disk_name} {disk:.2f} GB/s" if disk else ""
        print(f"s3cached epoch {i}: backend {c['backend_bytes']/1e9:.2f} GB, written {c['fill_bytes']/1e9:.2f} GB "
              f"({w:.2f} GB/s{of}), left uncached "
              f"{c['uncached_bytes']/1e9:.2f} GB; cached {c['used_bytes']/total:.0%} of the set; "
              f"hits {c['hits']} partial {c['partial']} misses {c['misses']}")
EOF