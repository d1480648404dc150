#!/usr/bin/env bash
# 35-auth-errors: SigV4 failures answer the right 403/400 and write nothing — wrong secret,
# unknown key, tampered signature, unsigned, skewed date, expired/tampered presigned URLs;
# s3cmd-style Authorization without spaces; --credentials file with admin and non-admin keys.
. "$(dirname "$0")/lib.sh"
B=auth
mkdir -p "$S3_STORE/$B"
echo "secret data" >"$S3_STORE/$B/existing"
USER_AK=AKUSER$(od -An -N4 -tx1 /dev/urandom | tr -d ' \n' | tr a-f A-F)
USER_SK=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
cat >"$T/creds" <<EOF
# e2e keys
$S3_AK $S3_SK admin
$USER_AK $USER_SK
EOF

# req_err STATUS CODE REQARGS... — a request that must fail with STATUS CODE (+RequestId)
req_err() {
    local want_st=$1 want_code=$2 st
    shift 2
    st=$(s3req -D "$T/eh" -o "$T/eb" "$@")
    expect_error "$want_st" "$want_code" "$T/eh" "$T/eb" "$st"
}

t_sanity_ok() {
    local st
    st=$(s3req -o "$T/ok" "/$B/existing")
    expect_eq "signed GET with the right key (proves the failures below are about auth)" "$st" 200 || return 1
    grep -q "secret data" "$T/ok" || { echo "wrong body: $(cat "$T/ok")"; return 1; }
    st=$(s3req -X PUT -d hello "/$B/ok-put")
    expect_eq "signed PUT with the right key" "$st" 200 || return 1
    st=$(timeout 10 "$PY" "$E2E_HERE/e2elib.py" req --endpoint "$S3_EP" --ak "$USER_AK" --sk "$USER_SK" "/$B/existing")
    expect_eq "GET by the non-admin key from the credentials file" "$st" 200
}

t_wrong_secret() {
    req_err 403 SignatureDoesNotMatch --sk "wrong$S3_SK" "/$B/existing" || return 1
    req_err 403 SignatureDoesNotMatch --sk "wrong$S3_SK" -X PUT -d "must not land" "/$B/ws-put" || return 1
    absent "$S3_STORE/$B/ws-put"
}

t_unknown_key() {
    req_err 403 InvalidAccessKeyId --ak AKNOSUCHKEY000000000 "/$B/existing" || return 1
    req_err 403 InvalidAccessKeyId --ak AKNOSUCHKEY000000000 -X PUT -d "must not land" "/$B/uk-put" || return 1
    absent "$S3_STORE/$B/uk-put"
}

t_tampered() {
    req_err 403 SignatureDoesNotMatch --tamper-sig "/$B/existing" || return 1
    req_err 403 SignatureDoesNotMatch --tamper-sig -X PUT -d "must not land" "/$B/ts-put" || return 1
    absent "$S3_STORE/$B/ts-put"
}

t_unsigned() {
    local st
    st=$(s3req --anon -D "$T/eh" -o "$T/eb" "/$B/existing")
    expect_error 403 AccessDenied "$T/eh" "$T/eb" "$st" || return 1
    st=$(s3req --anon -X PUT -d x -D "$T/eh" -o "$T/eb" "/$B/anon-put")
    expect_error 403 AccessDenied "$T/eh" "$T/eb" "$st" || return 1
    absent "$S3_STORE/$B/anon-put"
}

t_skew() {
    req_err 403 RequestTimeTooSkewed --date-offset -3600 "/$B/existing" || return 1
    req_err 403 RequestTimeTooSkewed --date-offset 3600 -X PUT -d x "/$B/skew-put" || return 1
    absent "$S3_STORE/$B/skew-put"
}

t_no_spaces() {
    local st
    st=$(s3req --no-spaces -o "$T/ns" "/$B/existing")
    expect_eq "Authorization without spaces after commas (s3cmd)" "$st" 200
}

t_presigned() {
    local url st
    url=$(s3req --presign 300 "/$B/existing")
    st=$(timeout 10 curl -s -o "$T/p" -w '%{http_code}' "$url")
    expect_eq "valid presigned GET" "$st" 200 || return 1
    sha_eq "$S3_STORE/$B/existing" "$T/p" || return 1
    # expired: signed two hours ago for 60 s
    url=$(s3req --presign 60 --date-offset -7200 "/$B/existing")
    st=$(timeout 10 curl -s -D "$T/eh" -o "$T/eb" -w '%{http_code}' "$url")
    expect_error 403 AccessDenied "$T/eh" "$T/eb" "$st" || return 1
    grep -qi 'expired' "$T/eb" || { echo "message should say the request has expired: $(cat "$T/eb")"; return 1; }
    # tampered signature
    url=$(s3req --presign 300 "/$B/existing")
    url=${url%?}$([[ ${url: -1} == 0 ]] && echo 1 || echo 0)
    st=$(timeout 10 curl -s -D "$T/eh" -o "$T/eb" -w '%{http_code}' "$url")
    expect_error 403 SignatureDoesNotMatch "$T/eh" "$T/eb" "$st" || return 1
    # wrong secret
    url=$(timeout 10 "$PY" "$E2E_HERE/e2elib.py" req --endpoint "$S3_EP" --ak "$S3_AK" --sk "x$S3_SK" --presign 300 "/$B/existing")
    st=$(timeout 10 curl -s -D "$T/eh" -o "$T/eb" -w '%{http_code}' "$url")
    expect_error 403 SignatureDoesNotMatch "$T/eh" "$T/eb" "$st" || return 1
    # presigned PUT works and a presigned GET URL can't be used to PUT
    url=$(s3req -X PUT --presign 300 "/$B/presigned-put")
    st=$(timeout 10 curl -s -o /dev/null -w '%{http_code}' -T "$S3_STORE/$B/existing" "$url")
    expect_eq "presigned PUT" "$st" 200 || return 1
    sha_eq "$S3_STORE/$B/existing" "$S3_STORE/$B/presigned-put" || return 1
    url=$(s3req --presign 300 "/$B/presigned-put2")
    st=$(timeout 10 curl -s -o /dev/null -w '%{http_code}' -T "$S3_STORE/$B/existing" "$url")
    expect_eq "PUT with a URL presigned for GET" "$st" 403 || return 1
    absent "$S3_STORE/$B/presigned-put2"
}

t_awscli_wrong_secret() {
    local out
    if out=$(timeout 60 env AWS_ACCESS_KEY_ID="$S3_AK" AWS_SECRET_ACCESS_KEY="nope" \
        "$AWS" --endpoint-url "$S3_EP" s3 ls "s3://$B/" 2>&1); then
        echo "aws s3 ls with a wrong secret succeeded: $out"; return 1
    fi
    grep -q SignatureDoesNotMatch <<<"$out" || { echo "expected SignatureDoesNotMatch in: $out"; return 1; }
}

t_admin_split() {
    local st
    st=$(timeout 10 "$PY" "$E2E_HERE/e2elib.py" req --endpoint "$S3_EP" --ak "$USER_AK" --sk "$USER_SK" /_/stats)
    expect_eq "/_/stats signed by a non-admin key" "$st" 403 || return 1
    st=$(s3req /_/stats)
    expect_eq "/_/stats signed by the admin key" "$st" 200
}

E2E_AUTH_ARGS="--credentials $T/creds" start_server
check "right keys work (baseline)" t_sanity_ok
check "wrong secret: 403 SignatureDoesNotMatch, PUT writes nothing" t_wrong_secret
check "unknown key: 403 InvalidAccessKeyId, PUT writes nothing" t_unknown_key
check "tampered signature: 403 SignatureDoesNotMatch" t_tampered
check "unsigned request: 403 AccessDenied" t_unsigned
check "x-amz-date an hour off: 403 RequestTimeTooSkewed" t_skew
check "Authorization without spaces (s3cmd style)" t_no_spaces
check "presigned: valid, expired, tampered, wrong secret, PUT, GET-URL-for-PUT" t_presigned
check "awscli with a wrong secret reports SignatureDoesNotMatch" t_awscli_wrong_secret
check "admin endpoints: admin key yes, non-admin key no" t_admin_split
