#!/usr/bin/env bash
# 24-curl-sigv4: curl 7.88 --aws-sigv4 as users type it — PUT (-T, 40 MiB, UNSIGNED-PAYLOAD
# and a real hex sha256), GET, Range, HEAD, list-type=2, DELETE.
. "$(dirname "$0")/lib.sh"
B=curlb
mkdir -p "$S3_STORE/$B"
SIG=(--aws-sigv4 "aws:amz:$S3_REGION:s3" --user "$S3_AK:$S3_SK")

t_put_unsigned_40m() {
    local st
    mkfile "$T/big" 40M
    st=$(timeout 120 curl -sS "${SIG[@]}" -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' -T "$T/big" \
        -o "$T/out" -w '%{http_code}' "$S3_EP/$B/big.bin")
    expect_eq "PUT 40 MiB UNSIGNED-PAYLOAD" "$st" 200 || { cat "$T/out"; return 1; }
    sha_eq "$T/big" "$S3_STORE/$B/big.bin"
}

t_put_signed_hash() {
    local st h
    mkfile "$T/small" 70000
    h=$(sha256sum <"$T/small" | cut -c1-64)
    st=$(timeout 60 curl -sS "${SIG[@]}" -H "x-amz-content-sha256: $h" -T "$T/small" \
        -o "$T/out" -w '%{http_code}' "$S3_EP/$B/dir/small.bin")
    expect_eq "PUT with a signed hex sha256" "$st" 200 || { cat "$T/out"; return 1; }
    sha_eq "$T/small" "$S3_STORE/$B/dir/small.bin"
}

t_get() {
    local st
    st=$(timeout 120 curl -sS "${SIG[@]}" -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' -o "$T/got" \
        -w '%{http_code}' "$S3_EP/$B/big.bin")
    expect_eq "GET status" "$st" 200 || return 1
    sha_eq "$T/big" "$T/got" || return 1
    st=$(timeout 60 curl -sS "${SIG[@]}" -H "x-amz-content-sha256: $(sha256sum </dev/null | cut -c1-64)" \
        -o "$T/got2" -w '%{http_code}' "$S3_EP/$B/dir/small.bin")
    expect_eq "GET with the empty-body hash" "$st" 200 || return 1
    sha_eq "$T/small" "$T/got2"
}

t_range() {
    local st
    st=$(timeout 60 curl -sS "${SIG[@]}" -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' \
        -H 'Range: bytes=30000000-30999999' -o "$T/rg" -w '%{http_code}' "$S3_EP/$B/big.bin")
    expect_eq "Range GET status" "$st" 206 || return 1
    tail -c +30000001 "$T/big" | head -c 1000000 >"$T/rg.want"
    sha_eq "$T/rg.want" "$T/rg"
}

t_head() {
    local st
    st=$(timeout 30 curl -sS -I "${SIG[@]}" -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' -D "$T/hh" \
        -o /dev/null -w '%{http_code}' "$S3_EP/$B/big.bin")
    expect_eq "HEAD status" "$st" 200 || return 1
    expect_eq "HEAD Content-Length" "$(hdr "$T/hh" content-length)" 41943040
}

t_list() {
    local st
    st=$(timeout 30 curl -sS "${SIG[@]}" -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' -o "$T/ls" \
        -w '%{http_code}' "$S3_EP/$B?list-type=2&prefix=dir")
    expect_eq "ListObjectsV2 status" "$st" 200 || { cat "$T/ls"; return 1; }
    grep -q '<Key>dir/small.bin</Key>' "$T/ls" || { echo "listing lacks dir/small.bin: $(head -c 500 "$T/ls")"; return 1; }
    grep -q '<Key>big.bin</Key>' "$T/ls" && { echo "prefix=dir listed big.bin"; return 1; }
    grep -q '<KeyCount>1</KeyCount>' "$T/ls" || { echo "KeyCount should be 1: $(head -c 500 "$T/ls")"; return 1; }
}

t_delete() {
    local st
    st=$(timeout 30 curl -sS -X DELETE "${SIG[@]}" -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' \
        -o /dev/null -w '%{http_code}' "$S3_EP/$B/dir/small.bin")
    expect_eq "DELETE status" "$st" 204 || return 1
    absent "$S3_STORE/$B/dir/small.bin"
}

t_wrong_key() {
    local st
    st=$(timeout 30 curl -sS --aws-sigv4 "aws:amz:$S3_REGION:s3" --user "$S3_AK:bad$S3_SK" \
        -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' -D "$T/eh" -o "$T/eb" -w '%{http_code}' "$S3_EP/$B/big.bin")
    expect_error 403 SignatureDoesNotMatch "$T/eh" "$T/eb" "$st"
}

start_server
check "curl -T 40 MiB with UNSIGNED-PAYLOAD" t_put_unsigned_40m
check "curl -T with a signed hex sha256" t_put_signed_hash
check "curl GET (sha256)" t_get
check "curl Range GET" t_range
check "curl HEAD" t_head
check "curl ?list-type=2&prefix=" t_list
check "curl -X DELETE" t_delete
check "curl with a wrong secret: 403 SignatureDoesNotMatch" t_wrong_key
