#!/usr/bin/env bash
# 10-health-cli: the binary's command line and lifecycle — health, admin auth,
# bad flags, unusable directories, port in use, generated credentials, SIGTERM/SIGINT.
. "$(dirname "$0")/lib.sh"

# run_serve OUT ARGS... — runs `s3cached serve ARGS` expecting it to exit by itself
# within 5 s; prints its exit status (124 = still running, was killed).
run_serve() {
    local out=$1
    shift
    timeout -k 2 5 "$S3CACHED_BIN" serve "$@" >"$out.stdout" 2>"$out.stderr" </dev/null
    echo $?
}

t_health() {
    local body code
    body=$(curl -s --max-time 5 -D "$T/h.hdr" "$S3_EP/_/health")
    code=$(sed -n '1s/^HTTP[^ ]* \([0-9]*\).*/\1/p' "$T/h.hdr")
    expect_eq "GET /_/health status" "$code" 200 || return 1
    expect_eq "GET /_/health body" "$(tr -d '\r\n' <<<"$body")" ok
}

t_unsigned_refused() {
    local st
    st=$(timeout 10 curl -s -D "$T/u.hdr" -o "$T/u.body" -w '%{http_code}' "$S3_EP/b1/x")
    expect_error 403 AccessDenied "$T/u.hdr" "$T/u.body" "$st"
}

t_stats_auth() {
    local st
    st=$(http_code "$S3_EP/_/stats")
    expect_eq "GET /_/stats without credentials" "$st" 403 || return 1
    st=$(http_code -H "Authorization: Bearer wrong$S3_ADMIN_TOKEN" "$S3_EP/_/stats")
    expect_eq "GET /_/stats with a wrong bearer token" "$st" 403 || return 1
    st=$(http_code -H "Authorization: Bearer $S3_ADMIN_TOKEN" "$S3_EP/_/stats")
    expect_eq "GET /_/stats with the bearer token" "$st" 200 || return 1
    # SigV4 by the admin key (--access-key keys are admin)
    st=$(s3req /_/stats -o "$T/stats.json")
    expect_eq "GET /_/stats signed by the admin key" "$st" 200 || return 1
    "$PY" - "$T/stats.json" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))
def get(v, path):
    for k in path.split("."):
        v = v.get(k) if isinstance(v, dict) else None
    return v
missing = [p for p in ("uptime_s", "cache.hits", "cache.misses", "cache.coalesced", "cache.objects",
                       "cache.used_bytes", "backend.requests", "backend.bytes_read", "clients")
           if get(s, p) is None]
if missing:
    print("/_/stats lacks", missing, "in", json.dumps(s)[:500]); sys.exit(1)
if not isinstance(s["clients"], list):
    print("clients is not a list:", s["clients"]); sys.exit(1)
EOF
}

t_bad_flag() {
    local st lines
    st=$(run_serve "$T/bad" --no-such-flag 1 --cache-dir "$T/c-bad")
    [[ $st != 0 && $st != 124 ]] || { echo "expected a non-zero exit at once, got status $st"; return 1; }
    lines=$(grep -c . "$T/bad.stderr")
    [[ $lines -eq 1 ]] || { echo "expected one line on stderr, got $lines:"; cat "$T/bad.stderr"; return 1; }
    grep -q -- 'no-such-flag' "$T/bad.stderr" ||
        { echo "the message should name the bad flag: $(cat "$T/bad.stderr")"; return 1; }
}

t_bad_value() {
    local st
    st=$(run_serve "$T/badv" --listen 127.0.0.1:0 --cache-size 12Q --anonymous \
        --backend "file://$S3_STORE" --cache-dir "$T/c-badv")
    [[ $st != 0 && $st != 124 ]] || { echo "--cache-size 12Q: expected a non-zero exit at once, got $st"; return 1; }
    grep -q -- 'cache-size' "$T/badv.stderr" "$T/badv.stdout" ||
        { echo "the message should name the option: $(cat "$T/badv.stderr")"; return 1; }
}

t_backend_not_dir() {
    local st
    echo notadir >"$T/plainfile"
    st=$(run_serve "$T/nd" --listen "127.0.0.1:$(free_port)" --anonymous \
        --backend "file://$T/plainfile" --cache-dir "$T/c-nd")
    [[ $st != 0 && $st != 124 ]] ||
        { echo "--backend file://<a regular file>: expected non-zero exit, got $st"; cat "$T/nd.stderr"; return 1; }
    st=$(run_serve "$T/nx" --listen "127.0.0.1:$(free_port)" --anonymous \
        --backend "file://$T/does/not/exist" --cache-dir "$T/c-nx")
    [[ $st != 0 && $st != 124 ]] ||
        { echo "--backend file://<missing dir>: expected non-zero exit, got $st"; cat "$T/nx.stderr"; return 1; }
}

t_cache_not_dir() {
    local st
    echo notadir >"$T/plainfile2"
    st=$(run_serve "$T/cnd" --listen "127.0.0.1:$(free_port)" --anonymous \
        --backend "file://$S3_STORE" --cache-dir "$T/plainfile2")
    [[ $st != 0 && $st != 124 ]] ||
        { echo "--cache-dir <a regular file>: expected non-zero exit, got $st"; cat "$T/cnd.stderr"; return 1; }
}

t_port_in_use() {
    local st
    # our own running server holds $S3_PORT
    st=$(run_serve "$T/piu" --listen "127.0.0.1:$S3_PORT" --anonymous \
        --backend "file://$S3_STORE" --cache-dir "$T/c-piu")
    [[ $st != 0 && $st != 124 ]] ||
        { echo "listening on a port in use: expected a non-zero exit within 5 s, got $st"; return 1; }
    grep -q -- "$S3_PORT" "$T/piu.stderr" "$T/piu.stdout" ||
        { echo "the message should name the address: $(cat "$T/piu.stderr")"; return 1; }
}

t_version_help() {
    timeout 5 "$S3CACHED_BIN" version >"$T/v.out" 2>&1 || { echo "version: exit $?"; return 1; }
    [[ -s $T/v.out ]] || { echo "version printed nothing"; return 1; }
    timeout 5 "$S3CACHED_BIN" help >"$T/help.out" 2>&1 || { echo "help: exit $?"; return 1; }
    grep -q -- '--cache-dir' "$T/help.out" || { echo "help does not list --cache-dir"; return 1; }
}

# generated credentials: no keys given -> CACHE_DIR/credentials, printed, and usable
t_generated_credentials() {
    local saved_pid=$S3_PID saved_ep=$S3_EP saved_port=$S3_PORT saved_log=$S3_LOG
    local saved_cache=$S3_CACHE ak sk st rc=0
    S3_CACHE=$T/cache-gen
    mkdir -p "$S3_CACHE"
    S3_PID=
    E2E_AUTH_ARGS="" start_server
    if [[ ! -s $S3_CACHE/credentials ]]; then
        echo "expected generated keys in $S3_CACHE/credentials"; rc=1
    else
        read -r ak sk _ < <(grep -v "^[[:space:]]*#" "$S3_CACHE/credentials" | grep . | head -1)
        if ! grep -q -- "$ak" "$S3_LOG"; then
            echo "the generated access key '$ak' is not printed; output was:"; head -5 "$S3_LOG"; rc=1
        fi
        st=$(timeout 10 "$PY" "$E2E_HERE/e2elib.py" req --endpoint "$S3_EP" --ak "$ak" --sk "$sk" /)
        expect_eq "ListBuckets signed with the generated key" "$st" 200 || rc=1
        st=$(timeout 10 "$PY" "$E2E_HERE/e2elib.py" req --endpoint "$S3_EP" --ak "$ak" --sk "x$sk" /)
        expect_eq "ListBuckets with a wrong secret for the generated key" "$st" 403 || rc=1
    fi
    stop_server TERM >/dev/null
    S3_PID=$saved_pid S3_EP=$saved_ep S3_PORT=$saved_port S3_LOG=$saved_log S3_CACHE=$saved_cache
    return $rc
}

# SIGTERM while a download is in flight: the server finishes or cuts it, and exits 0 within 5 s.
t_sigterm_in_flight() {
    mkdir -p "$S3_STORE/b1"
    # 32 MiB at 16 MiB/s: the download lasts 2 s whatever the machine, so the server (which
    # lets it finish, up to --shutdown-timeout 10s) exits well within the 5 s stop_server allows
    head -c 32M /dev/urandom >"$S3_STORE/b1/big"
    CT=30 s3curl --limit-rate 16M -o "$T/inflight" "$S3_EP/b1/big" &
    local cpid=$! i
    for ((i = 0; i < 100; i++)); do   # SIGTERM once the body is flowing (at most 10 s)
        [[ $(stat -c %s "$T/inflight" 2>/dev/null || echo 0) -gt 0 ]] && break
        sleep 0.1
    done
    stop_server TERM
    wait "$cpid" 2>/dev/null
    return 0
}

mkdir -p "$S3_STORE/b1"
start_server
check "GET /_/health answers 200 ok without auth" t_health
check "unsigned GET answers 403 AccessDenied with RequestId" t_unsigned_refused
check "/_/stats needs admin (bearer or admin SigV4) and has the documented fields" t_stats_auth
check "bad flag: non-zero exit, one line naming it" t_bad_flag
check "bad option value: non-zero exit naming the option" t_bad_value
check "backend dir missing or a file: non-zero exit" t_backend_not_dir
check "cache dir is a file: non-zero exit" t_cache_not_dir
check "port in use: non-zero exit naming the address" t_port_in_use
check "version and help exit 0" t_version_help
check "no keys given: generates, stores, prints usable credentials" t_generated_credentials
stop_server TERM

# SIGINT also exits 0
start_server
stop_server INT

# SIGTERM with a slow download in flight
start_server
t_sigterm_in_flight
