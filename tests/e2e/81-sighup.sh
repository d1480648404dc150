#!/usr/bin/env bash
# 81-sighup: `kill -HUP` re-reads the --credentials file (what `systemctl reload` and
# deploy/README.md "Reloading keys" rely on): a key added to the file works after the
# signal, a removed key stops working, a download in flight (signed by the removed key)
# finishes with the right bytes, and a keep-alive connection open across the signal
# serves its next request without reconnecting; the server keeps its pid and port.
. "$(dirname "$0")/lib.sh"

AK_B=AKB$(od -An -N6 -tx1 /dev/urandom | tr -d ' \n' | tr a-f A-F)
SK_B=$(od -An -N20 -tx1 /dev/urandom | tr -d ' \n')
CREDS=$T/credentials
printf '# key A\n%s %s admin\n' "$S3_AK" "$S3_SK" >"$CREDS"
E2E_AUTH_ARGS="--credentials $CREDS"
start_server
PID0=$S3_PID

# get_as AK SK KEY OUT — signed GET, prints the status code
get_as() {
    timeout "$CT" curl -s -o "$4" -w '%{http_code}' --aws-sigv4 "aws:amz:$S3_REGION:s3" --user "$1:$2" \
        -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' "$S3_EP/$3"
}
hup_and_wait() { # SIGHUP, then wait for the "reloaded" log line number N
    local want=$1 i
    kill -HUP "$S3_PID"
    for ((i = 0; i < 50; i++)); do
        [[ $(grep -c 'SIGHUP: credentials reloaded' "$S3_LOG") -ge $want ]] && return 0
        sleep 0.1
    done
    echo "no 'SIGHUP: credentials reloaded' line #$want in the log:"
    grep -i sighup "$S3_LOG" | tail -n 5
    return 1
}

mkdir -p "$S3_STORE/keys"
mkfile "$S3_STORE/keys/small" 64K
mkfile "$S3_STORE/keys/big" 96M

check "key A reads" expect_eq "status A" "$(get_as "$S3_AK" "$S3_SK" keys/small "$T/a1")" 200
check "key B (not yet in the file) → 403" expect_eq "status B" "$(get_as "$AK_B" "$SK_B" keys/small "$T/b0")" 403

# add B, reload
printf '%s %s\n' "$AK_B" "$SK_B" >>"$CREDS"
check "SIGHUP after adding key B reloads" hup_and_wait 1
check "key B reads after SIGHUP" expect_eq "status B" "$(get_as "$AK_B" "$SK_B" keys/small "$T/b1")" 200
check "key B's bytes are right" sha_eq "$T/b1" "$S3_STORE/keys/small"
check "key A still reads" expect_eq "status A" "$(get_as "$S3_AK" "$S3_SK" keys/small "$T/a2")" 200

# a slow download signed by A is in flight while A is removed
timeout 120 curl -s -o "$T/inflight" -w '%{http_code}' --limit-rate 24M --aws-sigv4 "aws:amz:$S3_REGION:s3" \
    --user "$S3_AK:$S3_SK" -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' "$S3_EP/keys/big" >"$T/inflight.code" 2>&1 &
DLPID=$!
# and a keep-alive connection signed by B: the big object, then (on the same connection,
# after the reload) a small one. %{num_connects} is 0 when curl reused the connection.
timeout 120 curl -s --limit-rate 24M --aws-sigv4 "aws:amz:$S3_REGION:s3" --user "$AK_B:$SK_B" \
    -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' -w '%{http_code} %{num_connects}\n' \
    -o "$T/ka.big" "$S3_EP/keys/big" -o "$T/ka.small" "$S3_EP/keys/small" >"$T/ka.codes" 2>&1 &
KAPID=$!
for ((i = 0; i < 300; i++)); do   # both under way, at most 30 s (each takes 4 s at 24 MiB/s)
    [[ $(stat -c %s "$T/inflight" 2>/dev/null || echo 0) -gt 1000000 &&
       $(stat -c %s "$T/ka.big" 2>/dev/null || echo 0) -gt 1000000 ]] && break
    sleep 0.1
done
got=$(stat -c %s "$T/inflight" 2>/dev/null || echo 0)
kagot=$(stat -c %s "$T/ka.big" 2>/dev/null || echo 0)
check "downloads are in flight before the reload ($got and $kagot of $((96 << 20)) bytes)" \
    bash -c "[[ $got -gt 0 && $got -lt $((96 << 20)) && $kagot -gt 0 && $kagot -lt $((96 << 20)) ]]"

printf '# key A removed\n%s %s admin\n' "$AK_B" "$SK_B" >"$CREDS.new" && mv "$CREDS.new" "$CREDS"
check "SIGHUP after removing key A reloads" hup_and_wait 2
check "removed key A → 403" expect_eq "status A" "$(get_as "$S3_AK" "$S3_SK" keys/small "$T/a3")" 403
check "key B (now admin) reads /_/stats signed" expect_eq "status" \
    "$(timeout "$CT" curl -s -o "$T/st" -w '%{http_code}' --aws-sigv4 "aws:amz:$S3_REGION:s3" --user "$AK_B:$SK_B" \
        -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' "$S3_EP/_/stats")" 200

wait "$DLPID"
dlrc=$?
check "the in-flight download (signed by the removed key) completed: curl exit $dlrc, status $(cat "$T/inflight.code")" \
    bash -c "[[ $dlrc -eq 0 && \$(cat '$T/inflight.code') == 200 ]]"
check "the in-flight download's bytes are right" sha_eq "$T/inflight" "$S3_STORE/keys/big"
wait "$KAPID"
karc=$?
check "keep-alive connection across the SIGHUP: both requests 200, the second on the same connection" \
    bash -c "[[ $karc -eq 0 && \$(tr '\n' ' ' <'$T/ka.codes') == '200 1 200 0 ' ]] || { echo \"curl exit $karc; status/connects:\"; cat '$T/ka.codes'; exit 1; }"
check "keep-alive: first object's bytes are right" sha_eq "$T/ka.big" "$S3_STORE/keys/big"
check "keep-alive: second object's bytes are right" sha_eq "$T/ka.small" "$S3_STORE/keys/small"

# A file that does not parse is refused, loudly (an error-level log line, /_/stats and
# /_/metrics say the last reload failed), and the previous keys stay in force: B, still named
# by the file, reads; D, added by the broken file, waits for a reload that succeeds. But a key
# the broken file no longer names at all (C) is revoked at once: deleting its line is how a
# key is revoked, and a typo on another line must not keep a leaked key alive.
AK_C=AKC$(od -An -N6 -tx1 /dev/urandom | tr -d ' \n' | tr a-f A-F)
SK_C=$(od -An -N20 -tx1 /dev/urandom | tr -d ' \n')
AK_D=AKD$(od -An -N6 -tx1 /dev/urandom | tr -d ' \n' | tr a-f A-F)
SK_D=$(od -An -N20 -tx1 /dev/urandom | tr -d ' \n')
printf '%s %s admin\n%s %s\n' "$AK_B" "$SK_B" "$AK_C" "$SK_C" >"$CREDS.new" && mv "$CREDS.new" "$CREDS"
check "SIGHUP after adding key C reloads" hup_and_wait 3
check "key C reads" expect_eq "status C" "$(get_as "$AK_C" "$SK_C" keys/small "$T/c1")" 200
printf '%s %s admin\n%s %s\nonly-one-field\n' "$AK_B" "$SK_B" "$AK_D" "$SK_D" >"$CREDS.new" &&
    mv "$CREDS.new" "$CREDS"
kill -HUP "$S3_PID"
for ((i = 0; i < 100; i++)); do   # the log line, waited for (at most 10 s)
    grep -q 'SIGHUP: credentials not reloaded' "$S3_LOG" && break
    sleep 0.1
done
check "a malformed credentials file is reported at error level, naming the key it revoked" bash -c \
    "grep 'SIGHUP: credentials not reloaded' '$S3_LOG' | grep -w error | grep -q 'revoked: $AK_C' ||
     { grep -i sighup '$S3_LOG' | tail -3; exit 1; }"
check "key B (still in the file) reads after the failed reload" expect_eq "status B" "$(get_as "$AK_B" "$SK_B" keys/small "$T/b2")" 200
check "key C (no longer in the broken file) → 403 after the failed reload" expect_eq "status C" "$(get_as "$AK_C" "$SK_C" keys/small "$T/c2")" 403
check "key D (added by the broken file) → 403 until a reload succeeds" expect_eq "status D" "$(get_as "$AK_D" "$SK_D" keys/small "$T/d1")" 403
reload_state() { # WANT_FAILED WANT_FAILURES WANT_REVOKED — /_/stats "credentials", /_/metrics
    timeout "$CT" curl -s -H "Authorization: Bearer $S3_ADMIN_TOKEN" "$S3_EP/_/stats" >"$T/st.json" || return 1
    "$PY" - "$T/st.json" "$1" "$2" "$3" <<'EOF' || return 1
import json, sys
c = json.load(open(sys.argv[1])).get("credentials")
want = (sys.argv[2] == "true", int(sys.argv[3]), int(sys.argv[4]))
got = c and (c["last_reload_failed"], c["reload_failures"], c["revoked_by_failed_reload"])
if got != want or (want[0] and ":3: expected" not in c["last_reload_error"]):
    print("/_/stats credentials: %r, want failed/failures/revoked %r" % (c, want)); sys.exit(1)
EOF
    timeout "$CT" curl -s -H "Authorization: Bearer $S3_ADMIN_TOKEN" "$S3_EP/_/metrics" >"$T/m.txt" || return 1
    grep -qx "s3cached_credentials_last_reload_failed $([[ $1 == true ]] && echo 1 || echo 0)" "$T/m.txt" ||
        { echo "/_/metrics:"; grep s3cached_credentials "$T/m.txt"; return 1; }
}
check "/_/stats and /_/metrics say the last reload failed" reload_state true 1 1
printf '%s %s admin\n%s %s\n' "$AK_B" "$SK_B" "$AK_D" "$SK_D" >"$CREDS.new" && mv "$CREDS.new" "$CREDS"
check "SIGHUP after fixing the file reloads" hup_and_wait 4
check "key D reads once the file is fixed" expect_eq "status D" "$(get_as "$AK_D" "$SK_D" keys/small "$T/d2")" 200
check "/_/stats and /_/metrics say the last reload took effect" reload_state false 1 0
check "same process after five SIGHUPs" bash -c "[[ $S3_PID == $PID0 ]] && kill -0 $PID0 && [[ \$(curl -s '$S3_EP/_/health') == ok* ]]"
stop_server TERM
