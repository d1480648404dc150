#!/usr/bin/env bash
# 20-awscli: awscli v2 (/usr/bin/aws) — mb, cp both ways (small, 100 MiB multipart),
# sync, ls, rm, s3api range get, presign. Bytes compared by SHA-256, also against the store.
. "$(dirname "$0")/lib.sh"
CT=120
B=awsb

t_mb() {
    awsc s3 mb "s3://$B" || return 1
    [[ -d $S3_STORE/$B ]] || { echo "bucket dir $S3_STORE/$B not created"; return 1; }
}

t_cp_small() {
    mkfile "$T/src/small.txt" 12345
    awsc s3 cp "$T/src/small.txt" "s3://$B/dir/small.txt" --only-show-errors || return 1
    sha_eq "$T/src/small.txt" "$S3_STORE/$B/dir/small.txt" || return 1
    awsc s3 cp "s3://$B/dir/small.txt" "$T/dst/small.txt" --only-show-errors || return 1
    sha_eq "$T/src/small.txt" "$T/dst/small.txt"
}

t_cp_empty() {
    : >"$T/src/empty"
    awsc s3 cp "$T/src/empty" "s3://$B/empty" --only-show-errors || return 1
    awsc s3 cp "s3://$B/empty" "$T/dst/empty" --only-show-errors || return 1
    sha_eq "$T/src/empty" "$T/dst/empty"
}

t_cp_100m() {
    mkfile "$T/src/big.bin" 100M
    awsc s3 cp "$T/src/big.bin" "s3://$B/big/big.bin" --only-show-errors || return 1
    sha_eq "$T/src/big.bin" "$S3_STORE/$B/big/big.bin" || return 1
    # no multipart leftovers visible as objects
    local n
    n=$(awsc s3 ls "s3://$B/big/" | wc -l)
    expect_eq "objects under big/ after a multipart cp" "$n" 1 || return 1
    awsc s3 cp "s3://$B/big/big.bin" "$T/dst/big.bin" --only-show-errors || return 1
    sha_eq "$T/src/big.bin" "$T/dst/big.bin" || return 1
    # second download (cache hit path) is byte-identical too
    awsc s3 cp "s3://$B/big/big.bin" "$T/dst/big2.bin" --only-show-errors || return 1
    sha_eq "$T/src/big.bin" "$T/dst/big2.bin"
}

t_sync() {
    local i out
    for i in 1 2 3; do mkfile "$T/tree/f$i.txt" $((i * 1000)); done
    mkfile "$T/tree/sub/deep/g.bin" 300K
    mkfile "$T/tree/sub/h.txt" 10
    awsc s3 sync "$T/tree" "s3://$B/tree" --only-show-errors || return 1
    awsc s3 sync "s3://$B/tree" "$T/tree-back" --only-show-errors || return 1
    diff -r "$T/tree" "$T/tree-back" || { echo "sync round trip differs"; return 1; }
    # a second sync has nothing to do
    out=$(awsc s3 sync "$T/tree" "s3://$B/tree") || return 1
    [[ -z $out ]] || { echo "second sync should upload nothing, printed:"; echo "$out"; return 1; }
    # change one file, delete one: sync --delete mirrors both
    mkfile "$T/tree/f1.txt" 2222
    rm "$T/tree/f2.txt"
    awsc s3 sync "$T/tree" "s3://$B/tree" --delete --only-show-errors || return 1
    sha_eq "$T/tree/f1.txt" "$S3_STORE/$B/tree/f1.txt" || return 1
    absent "$S3_STORE/$B/tree/f2.txt"
}

t_ls() {
    local out
    out=$(awsc s3 ls "s3://$B/tree/") || return 1
    grep -q ' PRE sub/$' <<<"$out" || { echo "ls s3://$B/tree/ should show 'PRE sub/':"; echo "$out"; return 1; }
    grep -q ' 1000 f1.txt$\| 2222 f1.txt$' <<<"$out" || { echo "ls should show f1.txt with its size:"; echo "$out"; return 1; }
    out=$(awsc s3 ls --recursive "s3://$B/tree/") || return 1
    expect_eq "recursive ls count (f1 f3 sub/h.txt sub/deep/g.bin)" "$(wc -l <<<"$out")" 4 || { echo "$out"; return 1; }
    grep -q ' 307200 tree/sub/deep/g.bin$' <<<"$out" || { echo "missing tree/sub/deep/g.bin 307200:"; echo "$out"; return 1; }
    out=$(awsc s3 ls) || return 1
    grep -q " $B\$" <<<"$out" || { echo "ls (buckets) lacks $B:"; echo "$out"; return 1; }
}

t_rm() {
    awsc s3 rm "s3://$B/dir/small.txt" --only-show-errors || return 1
    absent "$S3_STORE/$B/dir/small.txt" || return 1
    if awsc s3api head-object --bucket "$B" --key dir/small.txt >"$T/ho.out" 2>&1; then
        echo "head-object after rm succeeded"; return 1
    fi
    grep -q '404' "$T/ho.out" || { echo "expected 404 from head-object:"; cat "$T/ho.out"; return 1; }
    awsc s3 rm --recursive "s3://$B/tree/" --only-show-errors || return 1
    expect_eq "objects left under tree/" "$(awsc s3 ls --recursive "s3://$B/tree/" | wc -l)" 0
}

t_range_get() {
    awsc s3api get-object --bucket "$B" --key big/big.bin --range bytes=1000-1999 "$T/dst/range" >"$T/r.json" || return 1
    head -c 2000 "$T/src/big.bin" | tail -c 1000 >"$T/src/range"
    sha_eq "$T/src/range" "$T/dst/range" || return 1
    grep -q '"ContentRange": "bytes 1000-1999/104857600"' "$T/r.json" ||
        { echo "ContentRange missing or wrong:"; cat "$T/r.json"; return 1; }
}

t_presign() {
    local url st
    url=$(awsc s3 presign "s3://$B/big/big.bin" --expires-in 300) || return 1
    st=$(timeout 60 curl -s -o "$T/dst/presigned" -w '%{http_code}' "$url")
    expect_eq "GET presigned URL" "$st" 200 || return 1
    sha_eq "$T/src/big.bin" "$T/dst/presigned"
}

t_missing_key() {
    if awsc s3 cp "s3://$B/no/such/key" "$T/dst/nokey" >"$T/nk.out" 2>&1; then
        echo "cp of a missing key succeeded"; return 1
    fi
    grep -q '404' "$T/nk.out" || { echo "expected a 404 message:"; cat "$T/nk.out"; return 1; }
}

# aws s3 cp between two S3 URLs asks GetObjectTagging first, then copies (CopyObject, or
# UploadPartCopy for a large object).
t_cp_s3_to_s3() {
    local tags
    tags=$(awsc s3api get-object-tagging --bucket "$B" --key big/big.bin --output json) || return 1
    expect_match "get-object-tagging of an untagged object" "$tags" '"TagSet": \[\]' || return 1
    awsc s3 cp "s3://$B/dir/small.txt" "s3://$B/copies/small.txt" --only-show-errors || return 1
    awsc s3 cp "s3://$B/big/big.bin" "s3://$B/copies/big.bin" --only-show-errors || return 1
    awsc s3 cp "s3://$B/copies/big.bin" "$T/dst/big-copy.bin" --only-show-errors || return 1
    sha_eq "$T/src/big.bin" "$T/dst/big-copy.bin" || return 1
    awsc s3 cp "s3://$B/copies/small.txt" "$T/dst/small-copy.txt" --only-show-errors || return 1
    sha_eq "$T/src/small.txt" "$T/dst/small-copy.txt" || return 1
    if awsc s3api get-object-tagging --bucket "$B" --key no/such >"$T/tg.out" 2>&1; then
        echo "get-object-tagging of a missing key succeeded"; return 1
    fi
    grep -q 'NoSuchKey' "$T/tg.out" || { cat "$T/tg.out"; return 1; }
}

mkdir -p "$T/src" "$T/dst"
start_server
check "aws s3 mb creates the bucket directory" t_mb
check "aws s3 cp small file up and down (sha256, store too)" t_cp_small
check "aws s3 cp empty file up and down" t_cp_empty
check "aws s3 cp 100 MiB (multipart up, ranged parallel down)" t_cp_100m
check "aws s3 cp s3:// to s3:// (GetObjectTagging, copy, part copy)" t_cp_s3_to_s3
check "aws s3 sync up, down, no-op, --delete" t_sync
check "aws s3 ls (prefixes, recursive, buckets)" t_ls
check "aws s3api get-object --range" t_range_get
check "aws s3 presign + curl GET" t_presign
check "aws s3 cp of a missing key fails with 404" t_missing_key
check "aws s3 rm (single and recursive)" t_rm
