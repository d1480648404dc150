#!/usr/bin/env bash
# 80-tls: --tls-cert/--tls-key serve HTTPS. A throwaway CA (openssl) signs a certificate
# for IP 127.0.0.1; awscli with --ca-bundle copies 20 MiB up and down (SHA-256 equal),
# clients that do not trust the CA are refused, plain HTTP to the TLS port gets no
# answer, and the server stays healthy. Then it measures GET MB/s of a 256 MiB cached
# object over HTTPS and over plain HTTP in the same run (deploy/README.md, TLS cost);
# E2E_TLS_BENCH=0 skips that part (it is also skipped under ASan).
. "$(dirname "$0")/lib.sh"

for tool in openssl "$AWS" curl; do
    if ! command -v "$tool" >/dev/null; then
        skip "TLS" "$tool not installed (apt-get install openssl awscli curl)"
        exit 0
    fi
done

# --- a CA and a server certificate for 127.0.0.1 --------------------------------------------
P=$T/pki
mkdir -p "$P"
mkpki() {
    openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=s3cached e2e test CA" \
        -keyout "$P/ca.key" -out "$P/ca.pem" \
        -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" &&
    openssl req -newkey rsa:2048 -nodes -subj "/CN=127.0.0.1" -keyout "$P/key.pem" -out "$P/server.csr" &&
    printf '%s\n' "basicConstraints=CA:FALSE" "keyUsage=critical,digitalSignature,keyEncipherment" \
        "extendedKeyUsage=serverAuth" "subjectAltName=IP:127.0.0.1,DNS:localhost" >"$P/ext.cnf" &&
    openssl x509 -req -in "$P/server.csr" -CA "$P/ca.pem" -CAkey "$P/ca.key" -CAcreateserial \
        -days 2 -extfile "$P/ext.cnf" -out "$P/cert.pem" &&
    openssl verify -CAfile "$P/ca.pem" "$P/cert.pem"
}
check "openssl makes a CA and a certificate for 127.0.0.1" mkpki
[[ -s $P/cert.pem && -s $P/key.pem ]] || exit 1

# --- start the gateway with TLS (lib.sh's start_server probes plain HTTP) -------------------
TLS_PID=
cleanup80() {
    local rc=$?
    [[ -n $TLS_PID ]] && { kill -TERM "$TLS_PID" 2>/dev/null; wait "$TLS_PID" 2>/dev/null; }
    (exit $rc)
    _e2e_exit
}
trap cleanup80 EXIT

start_tls() {
    local try i
    for try in 1 2 3; do
        E2E_SERVERS=$((E2E_SERVERS + 1))
        TLS_PORT=$(free_port)
        TLS_EP=https://127.0.0.1:$TLS_PORT
        TLS_LOG=$T/server-tls.$E2E_SERVERS.log
        "$S3CACHED_BIN" serve --listen "127.0.0.1:$TLS_PORT" --backend "file://$S3_STORE" \
            --cache-dir "$S3_CACHE" --region "$S3_REGION" --admin-token "$S3_ADMIN_TOKEN" \
            --access-key "$S3_AK" --secret-key "$S3_SK" --log-level debug \
            --tls-cert "$P/cert.pem" --tls-key "$P/key.pem" "$@" >"$TLS_LOG" 2>&1 </dev/null &
        TLS_PID=$!
        _watchdog "$TLS_PID"
        for ((i = 0; i < 100; i++)); do
            kill -0 "$TLS_PID" 2>/dev/null || break
            if [[ $(curl -s --cacert "$P/ca.pem" --max-time 1 "$TLS_EP/_/health" 2>/dev/null) == ok* ]]; then
                return 0
            fi
            sleep 0.1
        done
        kill -KILL "$TLS_PID" 2>/dev/null
        wait "$TLS_PID" 2>/dev/null
        TLS_PID=
        grep -qi 'in use' "$TLS_LOG" && continue
        break
    done
    echo "TLS server did not come up; log tail:"
    tail -n 20 "$TLS_LOG"
    return 1
}
check "s3cached serve --tls-cert --tls-key answers /_/health over HTTPS" start_tls
[[ -n $TLS_PID ]] || exit 1

# aws config files for this endpoint (lib.sh writes them from S3_*)
S3_PORT=$TLS_PORT S3_EP=$TLS_EP write_client_configs
awst() { timeout "$CT" "$AWS" --endpoint-url "$TLS_EP" --ca-bundle "$P/ca.pem" --cli-read-timeout 30 "$@"; }

check "startup line says https" bash -c "grep -qi 'https' '$TLS_LOG'"
check "curl trusting the CA: 200 ok" expect_eq "body" "$(curl -s --cacert "$P/ca.pem" "$TLS_EP/_/health")" ok
check "curl without the CA: certificate refused" bash -c \
    "curl -s -o /dev/null '$TLS_EP/_/health'; rc=\$?; [[ \$rc == 60 || \$rc == 35 ]] || { echo \"curl exit \$rc, want 60\"; exit 1; }"
check "bearer /_/metrics over HTTPS" expect_eq "status" \
    "$(curl -s -o /dev/null -w '%{http_code}' --cacert "$P/ca.pem" -H "Authorization: Bearer $S3_ADMIN_TOKEN" "$TLS_EP/_/metrics")" 200

mkfile "$T/up20" 20M
check "aws s3 mb over HTTPS (--ca-bundle)" awst s3 mb s3://tls
check "aws s3 cp up 20 MiB over HTTPS" awst s3 cp --only-show-errors "$T/up20" s3://tls/obj20
check "stored bytes equal the upload" sha_eq "$S3_STORE/tls/obj20" "$T/up20"
check "aws s3 cp down 20 MiB over HTTPS" awst s3 cp --only-show-errors s3://tls/obj20 "$T/down20"
check "downloaded SHA-256 equals the upload" sha_eq "$T/down20" "$T/up20"
check "second download (cache hit) over HTTPS is equal" bash -c \
    "timeout $CT '$AWS' --endpoint-url '$TLS_EP' --ca-bundle '$P/ca.pem' s3 cp --only-show-errors s3://tls/obj20 '$T/down20b' && cmp '$T/down20b' '$T/up20'"
check "aws without the CA bundle fails certificate verification" bash -c \
    "! timeout $CT '$AWS' --endpoint-url '$TLS_EP' s3 ls s3://tls/ >'$T/noca.out' 2>&1 && grep -qi 'ssl\|certificate' '$T/noca.out' || { cat '$T/noca.out'; exit 1; }"

# plain HTTP to the TLS port: no HTTP answer
plain=$(curl -s --max-time 5 -o "$T/plain.body" -w '%{http_code}' "http://127.0.0.1:$TLS_PORT/_/health")
check "plain HTTP to the TLS port gets no 200 (got '$plain')" bash -c "[[ '$plain' != 200 ]] && ! grep -q '^ok' '$T/plain.body'"
plain2=$(printf 'GET /_/health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n' | timeout 5 nc -q 2 127.0.0.1 "$TLS_PORT" 2>/dev/null | head -c 200 | tr -d '\0')
check "raw HTTP/1.1 to the TLS port gets no HTTP response" bash -c "[[ '${plain2:0:5}' != HTTP/ ]]"
check "still healthy over HTTPS after plain-HTTP attempts" expect_eq "body" \
    "$(curl -s --cacert "$P/ca.pem" "$TLS_EP/_/health")" ok

# half a TLS configuration is refused at startup
check "--tls-cert without --tls-key: serve refuses to start" bash -c \
    "! timeout 10 '$S3CACHED_BIN' serve --listen 127.0.0.1:$(free_port) --backend 'file://$S3_STORE' --cache-dir '$T/cache-bad' --anonymous --tls-cert '$P/cert.pem' >'$T/bad.log' 2>&1 && grep -qi 'tls' '$T/bad.log' || { cat '$T/bad.log'; exit 1; }"

# --- TLS throughput cost: GET of a cached 256 MiB object, HTTPS vs HTTP, same run ------------
if [[ ${E2E_TLS_BENCH:-1} == 1 && ${E2E_ASAN:-0} != 1 ]]; then
    mkfile "$S3_STORE/tls/big256" 256M
    S3_CACHE=$T/cache-plain
    mkdir -p "$S3_CACHE"
    start_server --revalidate-after never
    get_speed() { # URL [curl args] — bytes/s of a signed GET to /dev/null (best of 2)
        local url=$1 best=0 s i
        shift
        for i in 1 2; do
            s=$(timeout 120 curl -s -o /dev/null -w '%{speed_download} %{http_code}' "$@" \
                --aws-sigv4 "aws:amz:$S3_REGION:s3" --user "$S3_AK:$S3_SK" \
                -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' "$url")
            [[ ${s#* } == 200 ]] || { echo 0; return; }
            s=${s%% *}; s=${s%.*}
            ((s > best)) && best=$s
        done
        echo "$best"
    }
    # first GETs fill both caches; then best of two timed reads each
    curl -s -o /dev/null --cacert "$P/ca.pem" --aws-sigv4 "aws:amz:$S3_REGION:s3" --user "$S3_AK:$S3_SK" \
        -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' "$TLS_EP/tls/big256"
    curl -s -o /dev/null --aws-sigv4 "aws:amz:$S3_REGION:s3" --user "$S3_AK:$S3_SK" \
        -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' "$S3_EP/tls/big256"
    http_bps=$(get_speed "$S3_EP/tls/big256")
    tls_bps=$(get_speed "$TLS_EP/tls/big256" --cacert "$P/ca.pem")
    cipher=$(curl -sv --cacert "$P/ca.pem" -o /dev/null "$TLS_EP/_/health" 2>&1 | sed -n 's/.*SSL connection using \(.*\)$/\1/p' | head -1)
    echo "       TLS cost, GET 256 MiB cached object over loopback (curl, best of 2):"
    echo "         http : $((http_bps / 1048576)) MiB/s"
    echo "         https: $((tls_bps / 1048576)) MiB/s ($cipher)"
    if ((http_bps > 0)); then
        echo "         https/http = $(awk -v a="$tls_bps" -v b="$http_bps" 'BEGIN { printf "%.2f", a / b }')"
    fi
    check "256 MiB GETs over HTTP and HTTPS both completed" bash -c "[[ $http_bps -gt 0 && $tls_bps -gt 0 ]]"
fi
