# tests/e2e/lib.sh: the harness every shell e2e test sources.
# Owns: temp dirs, starting/stopping build/s3cached by pid, client configs
# (aws, s3cmd, rclone) inside the temp dir, and the pass/fail tally.
# Does not own: the server itself or anything outside ${TMPDIR:-/tmp}/s3c-e2e.*.
#   . "$(dirname "$0")/lib.sh"; start_server; check "name" cmd...; (tally printed on exit)
# Every client invocation goes through `timeout`; every process is stopped by pid.

set -u
E2E_HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
E2E_REPO=$(cd "$E2E_HERE/../.." && pwd)
S3CACHED_BIN=${S3CACHED_BIN:-$E2E_REPO/build/s3cached}
PY=/usr/bin/python3
AWS=/usr/bin/aws
E2E_NAME=$(basename "$0")
CT=${CT:-60}                 # default per-client timeout, seconds

# Tests talk to 127.0.0.1 directly: never through a proxy, never with the
# machine's AWS settings.
unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY all_proxy ALL_PROXY
unset AWS_CA_BUNDLE AWS_PROFILE AWS_DEFAULT_PROFILE AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY \
      AWS_SESSION_TOKEN AWS_ENDPOINT_URL AWS_REGION
export no_proxy='*' NO_PROXY='*' AWS_EC2_METADATA_DISABLED=true AWS_PAGER=''

T=$(mktemp -d "${TMPDIR:-/tmp}/s3c-e2e.XXXXXX")
mkdir -p "$T/store" "$T/cache"
S3_STORE=$T/store
S3_CACHE=$T/cache
S3_REGION=us-east-1
S3_AK=AKE2E$(od -An -N6 -tx1 /dev/urandom | tr -d ' \n' | tr a-f A-F)
S3_SK=$(od -An -N20 -tx1 /dev/urandom | tr -d ' \n')
S3_ADMIN_TOKEN=tok$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')
export S3_AK S3_SK S3_REGION S3_STORE S3_CACHE S3_ADMIN_TOKEN
S3_PID=
S3_PORT=
S3_EP=
S3_LOG=
E2E_PASS=0
E2E_FAIL=0
E2E_SKIP=
E2E_SERVERS=0
_E2E_WATCHDOGS=()

# --- tally ------------------------------------------------------------------------------

# check NAME CMD... — runs CMD in this shell, output captured; prints "ok - NAME"
# or "FAIL - NAME" followed by CMD's output (which should say expected vs got).
check() {
    local name=$1 rc out
    shift
    out=$(mktemp "$T/check.XXXXXX")
    "$@" >"$out" 2>&1
    rc=$?
    if [[ $rc -eq 0 ]]; then
        E2E_PASS=$((E2E_PASS + 1))
        echo "ok   - $name"
    else
        E2E_FAIL=$((E2E_FAIL + 1))
        echo "FAIL - $name (exit $rc)"
        tail -n 25 "$out" | sed 's/^/       | /'
    fi
    rm -f "$out"
    return 0
}

# pass NAME / fail NAME MSG — record an outcome computed elsewhere. skip NAME WHY — a check
# that cannot run here: counted as skipped, never as passed.
skip() { E2E_SKIP=$((E2E_SKIP + 1)); echo "skip - $1: $2"; }
pass() { E2E_PASS=$((E2E_PASS + 1)); echo "ok   - $1"; }
fail() { E2E_FAIL=$((E2E_FAIL + 1)); echo "FAIL - $1"; shift; [[ $# -gt 0 ]] && printf '       | %s\n' "$@"; return 0; }

# expect_eq WHAT GOT WANT — 0 when equal, else explains.
expect_eq() {
    [[ "$2" == "$3" ]] && return 0
    echo "$1: expected '$3', got '$2'"
    return 1
}
# expect_match WHAT GOT REGEX
expect_match() {
    [[ "$2" =~ $3 ]] && return 0
    echo "$1: expected to match /$3/, got '$2'"
    return 1
}

# sha_eq FILE1 FILE2 — same bytes, by SHA-256.
sha_eq() {
    local a b
    [[ -f $1 ]] || { echo "sha_eq: '$1' does not exist"; return 1; }
    [[ -f $2 ]] || { echo "sha_eq: '$2' does not exist"; return 1; }
    a=$(sha256sum <"$1" | cut -c1-64)
    b=$(sha256sum <"$2" | cut -c1-64)
    [[ $a == "$b" ]] && return 0
    echo "sha256 differs: $1 ($(stat -c %s "$1") bytes) $a"
    echo "                $2 ($(stat -c %s "$2") bytes) $b"
    return 1
}

# absent PATH — fails (explaining) if PATH exists.
absent() {
    [[ ! -e $1 ]] && return 0
    echo "expected '$1' not to exist, but it does ($(stat -c %s "$1" 2>/dev/null) bytes)"
    return 1
}

# --- HTTP helpers -----------------------------------------------------------------------

# http_code CURL_ARGS... — prints the status code (000 when no answer).
http_code() { timeout "$CT" curl -s -o /dev/null -w '%{http_code}' "$@"; }

# s3curl CURL_ARGS... — curl signed with SigV4 by the test key (what users type).
s3curl() {
    timeout "$CT" curl -sS --aws-sigv4 "aws:amz:$S3_REGION:s3" --user "$S3_AK:$S3_SK" \
        -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' "$@"
}

# s3req ARGS... — the Python SigV4 client (e2elib.py req --help): raw paths, any
# header, tampering, presigning, mid-body disconnects. Prints the status code.
s3req() {
    timeout "$CT" "$PY" "$E2E_HERE/e2elib.py" req --endpoint "$S3_EP" --ak "$S3_AK" --sk "$S3_SK" "$@"
}

# hdr FILE NAME — value of header NAME (case-insensitive) in a dumped header file.
hdr() { tr -d '\r' <"$1" | awk -v n="$(tr A-Z a-z <<<"$2")" -F': ' 'tolower($1)==n {sub(/^[^:]*: */,""); v=$0} END {print v}'; }

# xml_code FILE — the <Code> of an S3 error body.
xml_code() { sed -n 's:.*<Code>\([^<]*\)</Code>.*:\1:p' "$1" | head -1; }

# expect_error STATUS CODE HDRFILE BODYFILE GOTSTATUS — checks an S3 error answer:
# status, <Code>, and <RequestId> equal to the x-amz-request-id header.
expect_error() {
    local want_st=$1 want_code=$2 h=$3 b=$4 got_st=$5 code rid hrid
    code=$(xml_code "$b")
    if [[ $got_st != "$want_st" || $code != "$want_code" ]]; then
        echo "expected $want_st $want_code, got $got_st '${code}'"
        echo "body: $(head -c 400 "$b")"
        return 1
    fi
    rid=$(sed -n 's:.*<RequestId>\([^<]*\)</RequestId>.*:\1:p' "$b" | head -1)
    hrid=$(hdr "$h" x-amz-request-id)
    if [[ -z $rid || $rid != "$hrid" ]]; then
        echo "error XML <RequestId> '$rid' must equal header x-amz-request-id '$hrid'"
        return 1
    fi
    return 0
}

# stats_json — GET /_/stats with the admin token.
stats_json() { timeout "$CT" curl -sf -H "Authorization: Bearer $S3_ADMIN_TOKEN" "$S3_EP/_/stats"; }

# stats_field PATH — one field of /_/stats, e.g. stats_field cache.hits (prints the number).
stats_field() {
    stats_json | "$PY" -c '
import json, sys
v = json.load(sys.stdin)
for p in sys.argv[1].split("."):
    v = v[int(p)] if isinstance(v, list) else v[p]
print(v)' "$1"
}

# --- server lifecycle -------------------------------------------------------------------

free_port() {
    "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# start_server [EXTRA SERVE ARGS...] — starts s3cached on S3_STORE/S3_CACHE with the test
# key and admin token (unless E2E_AUTH_ARGS overrides the auth args), waits for
# /_/health (≤10 s). Sets S3_PID S3_PORT S3_EP S3_LOG. Exits the test if it fails.
start_server() {
    local try i auth
    if [[ ! -x $S3CACHED_BIN ]]; then
        fail "start server" "no executable at S3CACHED_BIN=$S3CACHED_BIN (run make)"
        exit 1
    fi
    if [[ -n ${E2E_AUTH_ARGS+x} ]]; then
        read -r -a auth <<<"$E2E_AUTH_ARGS"
    else
        auth=(--access-key "$S3_AK" --secret-key "$S3_SK")
    fi
    for try in 1 2 3; do
        E2E_SERVERS=$((E2E_SERVERS + 1))
        S3_PORT=$(free_port)
        S3_EP=http://127.0.0.1:$S3_PORT
        S3_LOG=$T/server.$E2E_SERVERS.log
        "$S3CACHED_BIN" serve --listen "127.0.0.1:$S3_PORT" --backend "file://$S3_STORE" \
            --cache-dir "$S3_CACHE" --region "$S3_REGION" --admin-token "$S3_ADMIN_TOKEN" \
            "${auth[@]}" --log-level debug "$@" >"$S3_LOG" 2>&1 </dev/null &
        S3_PID=$!
        _watchdog "$S3_PID"
        for ((i = 0; i < 100; i++)); do
            if ! kill -0 "$S3_PID" 2>/dev/null; then break; fi
            if [[ $(curl -s --max-time 1 "$S3_EP/_/health" 2>/dev/null) == ok* ]]; then
                export S3_PID S3_PORT S3_EP S3_LOG
                write_client_configs
                return 0
            fi
            sleep 0.1
        done
        if kill -0 "$S3_PID" 2>/dev/null; then
            fail "start server" "no 'ok' from $S3_EP/_/health within 10 s; log tail:" \
                "$(tail -n 20 "$S3_LOG")"
            kill -KILL "$S3_PID" 2>/dev/null; wait "$S3_PID" 2>/dev/null; S3_PID=
            exit 1
        fi
        wait "$S3_PID" 2>/dev/null
        S3_PID=
        grep -qi 'in use' "$S3_LOG" && continue          # lost a port race: retry
        break
    done
    fail "start server" "s3cached exited during startup; log tail ($S3_LOG):" "$(tail -n 20 "$S3_LOG")"
    exit 1
}

# _watchdog PID — if this script is killed hard, the server still dies after 15 min.
_watchdog() {
    local pid=$1 bin=$S3CACHED_BIN
    local n=${#_E2E_WATCHDOGS[@]}
    (
        exec >/dev/null 2>&1 </dev/null
        sleep 900 &
        echo $! >"$T/watchdog.$n.sleep"
        wait $!
        if [[ $(readlink "/proc/$pid/exe" 2>/dev/null) == "$(readlink -f "$bin")" ]]; then
            kill -KILL "$pid"
        fi
    ) &
    _E2E_WATCHDOGS+=($!)
    disown $! 2>/dev/null
}

# stop_server [SIGNAL] — TERM (or SIGNAL) the server, wait ≤5 s, then KILL; records a
# check that it exited with status 0 after the signal.
stop_server() {
    local sig=${1:-TERM} i st pid=$S3_PID
    [[ -n $pid ]] || return 0
    S3_PID=
    if ! kill -0 "$pid" 2>/dev/null; then
        wait "$pid"
        st=$?
        fail "server exits 0 on SIG$sig" "the server had already died (exit status $st$( ((st > 128)) && echo ", signal $((st - 128))")) before SIG$sig; last lines of $S3_LOG:" \
            "$(grep -v ' access ' "$S3_LOG" | tail -n 8)" "--- last access lines:" "$(grep ' access ' "$S3_LOG" | tail -n 4)"
        return 1
    fi
    kill "-$sig" "$pid" 2>/dev/null
    for ((i = 0; i < 50; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
        kill -KILL "$pid" 2>/dev/null
        wait "$pid" 2>/dev/null
        fail "server exits 0 on SIG$sig" "still running 5 s after SIG$sig; killed. log tail:" \
            "$(tail -n 10 "$S3_LOG")"
        return 1
    fi
    wait "$pid"
    st=$?
    if [[ $st -eq 0 ]]; then
        pass "server exits 0 on SIG$sig"
    else
        fail "server exits 0 on SIG$sig" "exit status $st; log tail:" "$(tail -n 10 "$S3_LOG")"
    fi
}

write_client_configs() {
    mkdir -p "$T/aws"
    cat >"$T/aws/config" <<EOF
[default]
region = $S3_REGION
output = json
s3 =
    addressing_style = path
EOF
    cat >"$T/aws/credentials" <<EOF
[default]
aws_access_key_id = $S3_AK
aws_secret_access_key = $S3_SK
EOF
    export AWS_CONFIG_FILE=$T/aws/config AWS_SHARED_CREDENTIALS_FILE=$T/aws/credentials
    cat >"$T/s3cfg" <<EOF
[default]
access_key = $S3_AK
secret_key = $S3_SK
host_base = 127.0.0.1:$S3_PORT
host_bucket = 127.0.0.1:$S3_PORT
use_https = False
signature_v2 = False
bucket_location = $S3_REGION
check_ssl_certificate = False
progress_meter = False
EOF
    cat >"$T/rclone.conf" <<EOF
[s3c]
type = s3
provider = Other
access_key_id = $S3_AK
secret_access_key = $S3_SK
endpoint = $S3_EP
region = $S3_REGION
force_path_style = true
EOF
}

# Client wrappers: bounded in time, configured only through files in $T.
awsc() { timeout "$CT" "$AWS" --endpoint-url "$S3_EP" --cli-read-timeout 30 "$@"; }
s3cmdc() { timeout "$CT" s3cmd -c "$T/s3cfg" "$@"; }
rclonec() { timeout "$CT" env -u AWS_CA_BUNDLE rclone --config "$T/rclone.conf" --retries 1 --low-level-retries 1 "$@"; }

# mkfile PATH SIZE — random bytes (SIZE as for head -c: 100M, 12K, 1000).
mkfile() { mkdir -p "$(dirname "$1")"; head -c "$2" /dev/urandom >"$1"; }

_e2e_exit() {
    local rc=$? w
    trap - EXIT INT TERM HUP
    [[ -n $S3_PID ]] && stop_server TERM
    for w in "${!_E2E_WATCHDOGS[@]}"; do
        kill -KILL "${_E2E_WATCHDOGS[$w]}" 2>/dev/null
        [[ -s $T/watchdog.$w.sleep ]] && kill -KILL "$(cat "$T/watchdog.$w.sleep")" 2>/dev/null
    done
    if [[ $rc -ne 0 && $E2E_FAIL -eq 0 ]]; then
        fail "$E2E_NAME ran to the end" "script exited with status $rc"
    fi
    if [[ ${E2E_KEEP:-0} == 1 ]]; then
        echo "kept temp dir: $T"
    else
        rm -rf "$T"
    fi
    echo "$E2E_NAME: $E2E_PASS passed, $E2E_FAIL failed${E2E_SKIP:+, $E2E_SKIP skipped}"
    [[ $E2E_FAIL -eq 0 ]]
    exit $?
}
trap _e2e_exit EXIT
trap 'exit 143' TERM
trap 'exit 130' INT
trap 'exit 129' HUP
trap 'exit 141' PIPE
