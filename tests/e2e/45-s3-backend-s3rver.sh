#!/usr/bin/env bash
# 45-s3-backend-s3rver: the gateway in front of a real S3 implementation (s3rver, an npm S3
# server) through be_s3.c: CreateBucket, small and 100 MiB (awscli multipart both ways, then
# be_s3.c's own multipart upstream) objects land upstream byte for byte, a second GET is a hit,
# HEAD, ranged GET, CopyObject, listing v2 and v1 paged 2 keys at a time (s3rver's continuation
# tokens) and with a delimiter, DELETE. Skipped (one "ok - skip" line) when s3rver is not
# installed: `make deps-test` installs it (npm install --no-save s3rver in tests/e2e), or point
# S3RVER_BIN at its bin/s3rver.js. s3rver does not verify SigV4 signatures, nor implement
# UploadPartCopy, ListParts, ListMultipartUploads or AbortMultipartUpload: not tested here.
. "$(dirname "$0")/lib.sh"

UP_BIN=${S3RVER_BIN:-}
if [[ -z $UP_BIN && -x $E2E_HERE/node_modules/.bin/s3rver ]]; then
    UP_BIN=$E2E_HERE/node_modules/.bin/s3rver
fi
if [[ -z $UP_BIN ]]; then
    skip "the gateway in front of s3rver" "s3rver not installed (cd tests/e2e && npm install --no-save s3rver)"
    exit 0
fi

UP_PID=
_up_exit() {
    local rc=$?
    if [[ -n $UP_PID ]]; then
        kill -TERM "$UP_PID" 2>/dev/null
        wait "$UP_PID" 2>/dev/null
        UP_PID=
    fi
    (exit $rc)
    _e2e_exit
}
trap _up_exit EXIT

UP_PORT=$(free_port)
UP_EP=http://127.0.0.1:$UP_PORT
mkdir -p "$T/up"
# s3rver's continuation tokens use a cipher OpenSSL 3 keeps in the legacy provider.
NODE_OPTIONS=--openssl-legacy-provider node "$UP_BIN" -d "$T/up" -a 127.0.0.1 -p "$UP_PORT" \
    >"$T/s3rver.log" 2>&1 </dev/null &
UP_PID=$!
for ((i = 0; i < 100; i++)); do
    [[ $(http_code "$UP_EP/") != 000 ]] && break
    sleep 0.1
done
[[ $(http_code "$UP_EP/") != 000 ]] || { fail "start s3rver" "$(tail -n 20 "$T/s3rver.log")"; exit 1; }

start_server --backend "$UP_EP" --backend-access-key S3RVER --backend-secret-key S3RVER \
    --backend-timeout 10s

# The bytes s3rver stored for BUCKET/KEY.
up_file() { echo "$T/up/$1/$2._S3rver_object"; }

t_bucket() {
    awsc s3api create-bucket --bucket upb >/dev/null || return 1
    [[ -d $T/up/upb ]] || { echo "bucket upb not created upstream"; ls "$T/up"; return 1; }
}

t_small_roundtrip() {
    mkfile "$T/small" 123457
    awsc s3 cp "$T/small" "s3://upb/dir/small one.bin" >/dev/null || return 1
    sha_eq "$T/small" "$(up_file upb "dir/small one.bin")" || return 1
    awsc s3 cp "s3://upb/dir/small one.bin" "$T/small.back" >/dev/null || return 1
    sha_eq "$T/small" "$T/small.back"
}

t_large_multipart() {
    mkfile "$T/large" 100M
    awsc s3 cp "$T/large" s3://upb/big/large.bin >/dev/null || return 1
    sha_eq "$T/large" "$(up_file upb big/large.bin)" || return 1
    awsc s3 cp s3://upb/big/large.bin "$T/large.back" >/dev/null || return 1
    sha_eq "$T/large" "$T/large.back"
}

t_second_get_hit() {
    local xc
    awsc s3api get-object --bucket upb --key big/large.bin "$T/large.back2" >/dev/null || return 1
    sha_eq "$T/large" "$T/large.back2" || return 1
    s3curl -o /dev/null -D "$T/hit.h" "$S3_EP/upb/big/large.bin" || return 1
    xc=$(hdr "$T/hit.h" x-cache)
    expect_eq "x-cache of a GET after the object was read whole" "$xc" hit
}

t_head_range() {
    local len
    len=$(awsc s3api head-object --bucket upb --key big/large.bin --query ContentLength \
        --output text) || return 1
    expect_eq "ContentLength" "$len" $((100 * 1048576)) || return 1
    awsc s3api get-object --bucket upb --key big/large.bin --range bytes=1000000-1999999 \
        "$T/range.out" >/dev/null || return 1
    tail -c +1000001 "$T/large" | head -c 1000000 >"$T/range.want"
    sha_eq "$T/range.want" "$T/range.out"
}

t_copy() {
    awsc s3api copy-object --bucket upb --key "copies/small copy" \
        --copy-source "upb/dir/small one.bin" >/dev/null || return 1
    sha_eq "$T/small" "$(up_file upb "copies/small copy")" || return 1
    awsc s3 cp "s3://upb/copies/small copy" "$T/copy.back" >/dev/null || return 1
    sha_eq "$T/small" "$T/copy.back"
}

t_paged() {
    local i out want tok
    for i in 0 1 2 3 4 5 6; do
        printf 'p%d' "$i" >"$T/p.$i"
        awsc s3 cp "$T/p.$i" "s3://upb/paged/k$i" >/dev/null || return 1
    done
    want="paged/k0 paged/k1 paged/k2 paged/k3 paged/k4 paged/k5 paged/k6"
    # awscli follows NextContinuationToken / NextMarker; each request asks for 2 keys
    out=$(awsc s3api list-objects-v2 --bucket upb --prefix paged/ --page-size 2 \
        --query 'Contents[].Key' --output text | tr '\t\n' '  ' | xargs) || return 1
    expect_eq "ListObjectsV2 paged by 2" "$out" "$want" || return 1
    out=$(awsc s3api list-objects --bucket upb --prefix paged/ --page-size 2 \
        --query 'Contents[].Key' --output text | tr '\t\n' '  ' | xargs) || return 1
    expect_eq "ListObjects (v1) paged by 2" "$out" "$want" || return 1
    # a page that ends mid-prefix: the gateway's continuation token resumes at k3
    awsc s3api list-objects-v2 --bucket upb --prefix paged/ --max-keys 3 --no-paginate \
        --output json >"$T/page1.json" || return 1
    out=$("$PY" -c 'import json,sys; d=json.load(open(sys.argv[1])); print(" ".join(o["Key"] for o in d["Contents"]), d["IsTruncated"], bool(d.get("NextContinuationToken")))' "$T/page1.json")
    expect_eq "first page of 3" "$out" "paged/k0 paged/k1 paged/k2 True True" || return 1
    tok=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["NextContinuationToken"])' "$T/page1.json")
    out=$(awsc s3api list-objects-v2 --bucket upb --prefix paged/ --max-keys 3 --no-paginate \
        --continuation-token "$tok" --query 'Contents[].Key' --output text | tr '\t\n' '  ' | xargs) || return 1
    expect_eq "second page of 3" "$out" "paged/k3 paged/k4 paged/k5"
}

t_listing() {
    local out
    out=$(awsc s3api list-objects-v2 --bucket upb --delimiter / --query \
        '[CommonPrefixes[].Prefix, Contents[].Key]' --output text) || return 1
    expect_match "listing of upb with delimiter" "$out" "big/.*dir/" || return 1
    out=$(awsc s3api list-objects-v2 --bucket upb --prefix dir/ --query 'Contents[].Key' \
        --output text) || return 1
    expect_eq "listing of dir/" "$out" "dir/small one.bin" || return 1
    out=$(awsc s3api list-objects-v2 --bucket upb --delimiter / --page-size 1 --query \
        'CommonPrefixes[].Prefix' --output text | tr '\t\n' '  ' | xargs) || return 1
    expect_eq "common prefixes, one entry a page" "$out" "big/ copies/ dir/ paged/"
}

t_delete() {
    awsc s3 rm "s3://upb/dir/small one.bin" >/dev/null || return 1
    absent "$(up_file upb "dir/small one.bin")" || return 1
    if awsc s3api head-object --bucket upb --key "dir/small one.bin" >/dev/null 2>&1; then
        echo "HEAD after DELETE still finds the object"
        return 1
    fi
}

check "CreateBucket reaches the upstream" t_bucket
check "small object: PUT lands upstream, GET returns it" t_small_roundtrip
check "100 MiB object (awscli multipart, then upstream multipart) byte for byte" t_large_multipart
check "GET again: the same bytes, x-cache hit" t_second_get_hit
check "HEAD size and ranged GET" t_head_range
check "CopyObject lands upstream, reads back" t_copy
check "listing v2 and v1 paged 2 keys at a time" t_paged
check "ListObjectsV2 with delimiter and prefix" t_listing
check "DELETE removes the upstream object" t_delete
