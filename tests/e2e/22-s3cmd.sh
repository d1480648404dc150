#!/usr/bin/env bash
# 22-s3cmd: s3cmd 2.3.0 — mb, put (small, 40 MiB multipart with unquoted ETags), get, ls,
# info, sync, del, rb. Bytes by SHA-256, also against the store.
. "$(dirname "$0")/lib.sh"
CT=120
B=s3cmdb

t_mb() {
    s3cmdc mb "s3://$B" >/dev/null || return 1
    [[ -d $S3_STORE/$B ]] || { echo "no bucket dir"; return 1; }
}

t_put_get_small() {
    mkfile "$T/src/small.bin" 5000
    s3cmdc put "$T/src/small.bin" "s3://$B/a/small.bin" >/dev/null || return 1
    sha_eq "$T/src/small.bin" "$S3_STORE/$B/a/small.bin" || return 1
    s3cmdc get "s3://$B/a/small.bin" "$T/dst/small.bin" >/dev/null || return 1
    sha_eq "$T/src/small.bin" "$T/dst/small.bin"
}

t_put_get_multipart() {
    mkfile "$T/src/big.bin" 40M
    s3cmdc put "$T/src/big.bin" "s3://$B/big.bin" >"$T/put.out" || { cat "$T/put.out"; return 1; }
    # a 3-part multipart upload (15 MiB parts) gives an ETag ending in -3
    s3req -X HEAD -D "$T/ph" "/$B/big.bin" >/dev/null
    expect_match "ETag of the 40 MiB s3cmd upload" "$(hdr "$T/ph" etag)" '^"[0-9a-f]{32}-3"$' || return 1
    sha_eq "$T/src/big.bin" "$S3_STORE/$B/big.bin" || return 1
    s3cmdc get "s3://$B/big.bin" "$T/dst/big.bin" >/dev/null || return 1
    sha_eq "$T/src/big.bin" "$T/dst/big.bin"
}

t_ls_info() {
    local out
    out=$(s3cmdc ls "s3://$B/") || return 1
    grep -q "DIR .*s3://$B/a/" <<<"$out" || { echo "ls lacks DIR a/:"; echo "$out"; return 1; }
    grep -q "41943040 .*s3://$B/big.bin" <<<"$out" || { echo "ls lacks big.bin with its size:"; echo "$out"; return 1; }
    out=$(s3cmdc ls -r "s3://$B/") || return 1
    grep -q "s3://$B/a/small.bin" <<<"$out" || { echo "ls -r lacks a/small.bin:"; echo "$out"; return 1; }
    out=$(s3cmdc info "s3://$B/a/small.bin") || return 1
    grep -q 'File size: *5000' <<<"$out" || { echo "info:"; echo "$out"; return 1; }
    grep -q "MD5 sum: *$(md5sum <"$T/src/small.bin" | cut -c1-32)" <<<"$out" || { echo "info MD5:"; echo "$out"; return 1; }
    out=$(s3cmdc ls) || return 1
    grep -q "s3://$B" <<<"$out" || { echo "bucket list lacks $B: $out"; return 1; }
}

t_sync() {
    mkfile "$T/tree/x.txt" 100
    mkfile "$T/tree/d/y.txt" 200
    mkfile "$T/tree/d/e/z.bin" 100K
    s3cmdc sync "$T/tree/" "s3://$B/tree/" >/dev/null || return 1
    s3cmdc sync "s3://$B/tree/" "$T/tree-back/" >/dev/null || return 1
    diff -r "$T/tree" "$T/tree-back" || { echo "s3cmd sync round trip differs"; return 1; }
}

t_del_rb() {
    local out
    s3cmdc del "s3://$B/a/small.bin" >/dev/null || return 1
    absent "$S3_STORE/$B/a/small.bin" || return 1
    if out=$(s3cmdc rb "s3://$B" 2>&1); then echo "rb of a non-empty bucket succeeded: $out"; return 1; fi
    grep -q BucketNotEmpty <<<"$out" || { echo "expected BucketNotEmpty: $out"; return 1; }
    s3cmdc del --recursive --force "s3://$B/" >/dev/null || return 1
    s3cmdc rb "s3://$B" >/dev/null || return 1
    absent "$S3_STORE/$B"
}

mkdir -p "$T/src" "$T/dst"
start_server
check "s3cmd mb" t_mb
check "s3cmd put/get small" t_put_get_small
check "s3cmd put/get 40 MiB (15 MiB multipart parts)" t_put_get_multipart
check "s3cmd ls, ls -r, info" t_ls_info
check "s3cmd sync up and down" t_sync
check "s3cmd del, rb (non-empty refused)" t_del_rb
