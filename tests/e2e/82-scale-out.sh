#!/usr/bin/env bash
# 82-scale-out: three gateways (one file store, own cache dirs) behind nginx running
# deploy/scale-out/nginx.conf (ports and paths rewritten, `hash $uri consistent`):
# uploads through nginx verify (SigV4 survives the proxy), each object is cached on
# exactly one gateway, and after `kill -9` of one gateway mid-run the reads keep
# returning the right bytes; the survivors keep their keys (only the dead one's move).
. "$(dirname "$0")/lib.sh"

NGINX=$(command -v nginx || true)
[[ -z $NGINX && -x /usr/sbin/nginx ]] && NGINX=/usr/sbin/nginx
if [[ -z $NGINX ]]; then
    skip "scale-out behind nginx" "nginx not installed (apt-get install nginx)"
    exit 0
fi
CONF_SRC=$E2E_REPO/deploy/scale-out/nginx.conf
if [[ ! -f $CONF_SRC ]]; then
    fail "deploy/scale-out/nginx.conf exists"
    exit 1
fi

G_PID=() G_PORT=() G_LOG=() G_EP=()
NGX_PID=
cleanup82() {
    local rc=$? p
    [[ -n $NGX_PID ]] && { kill -TERM "$NGX_PID" 2>/dev/null; wait "$NGX_PID" 2>/dev/null; }
    for p in "${G_PID[@]}"; do
        [[ -n $p && $p != "$S3_PID" ]] && { kill -TERM "$p" 2>/dev/null; wait "$p" 2>/dev/null; }
    done
    (exit $rc)
    _e2e_exit
}
trap cleanup82 EXIT

# --- three gateways on one store ---------------------------------------------------------
for i in 0 1 2; do
    S3_CACHE=$T/cache$i
    mkdir -p "$S3_CACHE"
    start_server --revalidate-after never
    G_PID[$i]=$S3_PID G_PORT[$i]=$S3_PORT G_LOG[$i]=$S3_LOG G_EP[$i]=$S3_EP
done
S3_PID=   # cleanup82 stops them all

# --- nginx from the shipped config ---------------------------------------------------------
NPORT=$(free_port)
mkdir -p "$T/nginx/tmp" "$T/nginx/logs"
CONF=$T/nginx/nginx.conf
{
    awk -v p0="${G_PORT[0]}" -v p1="${G_PORT[1]}" -v p2="${G_PORT[2]}" -v np="$NPORT" -v t="$T/nginx" '
        /^ *server 127\.0\.0\.1:900[1-3] / { n++; sub(/127\.0\.0\.1:900[1-3]/, "127.0.0.1:" (n==1 ? p0 : n==2 ? p1 : p2)) }
        /^ *listen 127\.0\.0\.1:8080;/ { sub(/8080/, np) }
        /^ *worker_processes / { $0 = "worker_processes 2;" }
        { print }
        /^http \{/ {
            print "    client_body_temp_path " t "/tmp/body;"
            print "    proxy_temp_path " t "/tmp/proxy;"
            print "    fastcgi_temp_path " t "/tmp/fastcgi;"
            print "    uwsgi_temp_path " t "/tmp/uwsgi;"
            print "    scgi_temp_path " t "/tmp/scgi;"
        }' "$CONF_SRC"
} >"$CONF"
check "nginx.conf keeps hash \$uri consistent + Host \$http_host" \
    bash -c "grep -q 'hash \$uri consistent;' '$CONF' && grep -q 'proxy_set_header Host \$http_host;' '$CONF' && [[ \$(grep -c 'server 127.0.0.1:' '$CONF') -eq 3 ]]"
gdirs="pid $T/nginx/nginx.pid; error_log $T/nginx/logs/error.log warn; daemon off;"
[[ $(id -u) == 0 ]] && gdirs="$gdirs user root;"
check "nginx -t accepts the config" timeout 20 "$NGINX" -t -p "$T/nginx" -c "$CONF" -g "$gdirs"
"$NGINX" -p "$T/nginx" -c "$CONF" -g "$gdirs" >"$T/nginx/logs/stdout" 2>&1 </dev/null &
NGX_PID=$!
NEP=http://127.0.0.1:$NPORT
up=0
for ((i = 0; i < 50; i++)); do
    [[ $(curl -s --max-time 1 "$NEP/_/health" 2>/dev/null) == ok* ]] && { up=1; break; }
    sleep 0.1
done
if [[ $up != 1 ]]; then
    fail "nginx answers /_/health" "$(cat "$T/nginx/logs/error.log" "$T/nginx/logs/stdout" 2>/dev/null | tail -n 15)"
    exit 1
fi
pass "nginx answers /_/health through the ring"

# --- upload through the proxy (SigV4 must verify on the gateway) -----------------------------
N=30
mkdir -p "$T/up"
for ((i = 0; i < N; i++)); do
    mkfile "$T/up/obj-$(printf %02d $i)" $((100000 + (i * 37813) % 900000))
done
mkfile "$T/up/big-multipart" 20M          # > 8 MiB: awscli uploads it as multipart
NOBJ=$((N + 1))
nawsc() { timeout "$CT" "$AWS" --endpoint-url "$NEP" --cli-read-timeout 30 "$@"; }
check "CreateBucket through nginx" nawsc s3 mb s3://ring
check "upload $NOBJ objects through nginx (SigV4 verifies behind the proxy; one multipart)" \
    nawsc s3 cp --recursive --only-show-errors "$T/up" s3://ring/
check "backend store holds every object" \
    bash -c "[[ \$(ls '$S3_STORE/ring' | grep -c -E '^(obj-|big-)') -eq $NOBJ ]] || { ls -la '$S3_STORE/ring'; exit 1; }"

# a tampered signature through the proxy is still refused (the gateway checks, not nginx)
check "wrong secret through nginx → 403" bash -c \
    "st=\$(timeout $CT curl -s -o /dev/null -w '%{http_code}' --aws-sigv4 'aws:amz:$S3_REGION:s3' --user '$S3_AK:wrong$S3_SK' -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' '$NEP/ring/obj-00'); [[ \$st == 403 ]] || { echo \"status \$st\"; exit 1; }"

# --- read everything through the proxy ------------------------------------------------------
check "download all through nginx, bytes equal" bash -c "
    timeout $CT '$AWS' --endpoint-url '$NEP' s3 cp --recursive --only-show-errors s3://ring/ '$T/down1' || exit 1
    for f in '$T'/up/*; do cmp -s \"\$f\" '$T/down1/'\$(basename \"\$f\") || { echo \"differs: \$f\"; exit 1; }; done"

gstat() { # gstat IDX FIELD
    timeout "$CT" curl -sf -H "Authorization: Bearer $S3_ADMIN_TOKEN" "${G_EP[$1]}/_/stats" |
        "$PY" -c 'import json,sys
v=json.load(sys.stdin)
for p in sys.argv[1].split("."): v=v[p]
print(v)' "$2"
}
objs=() sum=0
for i in 0 1 2; do
    objs[$i]=$(gstat "$i" cache.objects)
    sum=$((sum + ${objs[$i]:-0}))
done
echo "       cache.objects per gateway: ${objs[*]} (sum $sum, $NOBJ objects)"
check "each object is cached once across the gateways (sum of cache.objects = $NOBJ)" expect_eq "sum of cache.objects" "$sum" "$NOBJ"
check "every gateway caches a share of the objects" bash -c "[[ ${objs[0]:-0} -gt 0 && ${objs[1]:-0} -gt 0 && ${objs[2]:-0} -gt 0 ]] || { echo 'objects: ${objs[*]}'; exit 1; }"

owner_of() { # owner_of KEY — the gateways whose access log has GET of KEY
    local i out=()
    for i in 0 1 2; do
        grep -q " GET [A-Za-z]* /ring/$1 " "${G_LOG[$i]}" && out+=("$i")
    done
    echo "${out[*]}"
}
one_owner() {
    local f k o bad=0
    for f in "$T"/up/*; do
        k=$(basename "$f")
        o=$(owner_of "$k")
        [[ $o =~ ^[0-2]$ ]] || { echo "$k served by gateways '$o' (want exactly one)"; bad=1; }
    done
    return $bad
}
check "each key's GETs went to exactly one gateway (access logs)" one_owner

# --- kill -9 one gateway while a reader runs ---------------------------------------------
VICTIM=1
victim_keys=()
for f in "$T"/up/*; do
    k=$(basename "$f")
    [[ $(owner_of "$k") == "$VICTIM" ]] && victim_keys+=("$k")
done
reader() { # three passes over all keys through nginx; a failed read gets one retry
    local pass f k try ok
    for pass in 1 2 3; do
        for f in "$T"/up/*; do
            k=$(basename "$f")
            ok=0
            for try in 1 2; do
                if timeout 30 curl -sf -o "$T/r.$k" --aws-sigv4 "aws:amz:$S3_REGION:s3" --user "$S3_AK:$S3_SK" \
                    -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' "$NEP/ring/$k" && cmp -s "$f" "$T/r.$k"; then
                    ok=1
                    break
                fi
                echo "retry $pass $k"
            done
            [[ $ok == 1 ]] && echo "ok $pass $k" || echo "bad $pass $k"
        done
    done
}
reader >"$T/reader.out" 2>&1 &
RPID=$!
# kill once the reader is into its first pass (5 reads done, at most 60 s): the other two passes
# then run wholly after the kill, so the survivors must take over every one of the dead one's
# keys, however fast this machine reads
for ((i = 0; i < 600; i++)); do
    [[ $(grep -c '^ok' "$T/reader.out") -ge 5 ]] && break
    kill -0 "$RPID" 2>/dev/null || break
    sleep 0.1
done
{ kill -KILL "${G_PID[$VICTIM]}"; wait "${G_PID[$VICTIM]}"; } 2>/dev/null   # no "Killed" job notice
G_PID[$VICTIM]=
echo "       killed gateway $VICTIM (-9) after $(grep -c '^ok' "$T/reader.out") reads; it owned ${#victim_keys[@]} keys"
wait "$RPID"
nok=$(grep -c '^ok' "$T/reader.out")
nbad=$(grep -c '^bad' "$T/reader.out")
nretry=$(grep -c '^retry' "$T/reader.out")
check "every read through nginx returned the right bytes across the kill ($nok/$((3 * NOBJ)))" \
    bash -c "[[ $nbad -eq 0 && $nok -eq $((3 * NOBJ)) ]] || { grep -v '^ok' '$T/reader.out' | head; exit 1; }"
check "at most one read needed a retry (the one in flight at the kill): $nretry" bash -c "[[ $nretry -le 1 ]]"
check "a read after the kill succeeds on the first try" \
    bash -c "timeout 30 curl -sf -o '$T/after' --aws-sigv4 'aws:amz:$S3_REGION:s3' --user '$S3_AK:$S3_SK' -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' '$NEP/ring/${victim_keys[0]:-obj-00}' && cmp '$T/after' '$T/up/${victim_keys[0]:-obj-00}'"

# consistent hashing: the survivors kept their own keys and took over only the dead one's
s0=$(gstat 0 cache.objects) s2=$(gstat 2 cache.objects)
echo "       after the kill: cache.objects gateway0=$s0 gateway2=$s2 (before ${objs[0]} ${objs[2]})"
check "survivors now hold every object exactly once ($s0 + $s2 = $NOBJ)" expect_eq "survivor objects" "$((s0 + s2))" "$NOBJ"
check "survivors lost none of their own objects" bash -c "[[ $s0 -ge ${objs[0]} && $s2 -ge ${objs[2]} ]]"

# the proxy streams: nothing was spooled to nginx temp files
check "nginx buffered no body to disk" bash -c "! find '$T/nginx/tmp' -type f | grep -q ."
