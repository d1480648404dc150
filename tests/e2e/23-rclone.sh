#!/usr/bin/env bash
# 23-rclone: rclone 1.60 (AWS_CA_BUNDLE unset) — copy, check, sync (changes and deletes),
# multipart with a 10M cutoff (PartNumber/ETag in varying order), cat --offset/--count, lsf.
. "$(dirname "$0")/lib.sh"
CT=120
B=rcb

t_copy_check() {
    local i
    for i in 1 2 3 4 5; do mkfile "$T/src/f$i.bin" $((i * 3000)); done
    mkfile "$T/src/sub/deep/g.bin" 1M
    mkfile "$T/src/sub/h.txt" 1
    : >"$T/src/empty"
    rclonec copy "$T/src" "s3c:$B/data" || return 1
    sha_eq "$T/src/sub/deep/g.bin" "$S3_STORE/$B/data/sub/deep/g.bin" || return 1
    rclonec check "$T/src" "s3c:$B/data" || { echo "rclone check after copy reported differences"; return 1; }
    rclonec copy "s3c:$B/data" "$T/back" || return 1
    diff -r "$T/src" "$T/back" || { echo "rclone copy round trip differs"; return 1; }
}

t_check_detects() {
    # rclone check must notice a difference (proves the check above can fail)
    mkfile "$T/src/f1.bin" 3000
    if rclonec check "$T/src" "s3c:$B/data" >"$T/chk.out" 2>&1; then
        echo "rclone check did not notice a changed file"; return 1
    fi
    grep -q '1 differences found' "$T/chk.out" ||
        { echo "expected exactly '1 differences found' (f1.bin, same size, other MD5):"; cat "$T/chk.out"; return 1; }
}

t_sync() {
    rm "$T/src/f2.bin"
    mkfile "$T/src/new.bin" 777
    rclonec sync "$T/src" "s3c:$B/data" || return 1
    absent "$S3_STORE/$B/data/f2.bin" || return 1
    sha_eq "$T/src/f1.bin" "$S3_STORE/$B/data/f1.bin" || return 1
    sha_eq "$T/src/new.bin" "$S3_STORE/$B/data/new.bin" || return 1
    rclonec check "$T/src" "s3c:$B/data" || { echo "rclone check after sync reported differences"; return 1; }
}

t_multipart() {
    mkfile "$T/mp/big.bin" 23M
    rclonec copy --s3-upload-cutoff 10M --s3-chunk-size 5M --s3-upload-concurrency 4 \
        "$T/mp" "s3c:$B/mp" || return 1
    sha_eq "$T/mp/big.bin" "$S3_STORE/$B/mp/big.bin" || return 1
    rclonec check --download "$T/mp" "s3c:$B/mp" || { echo "rclone check --download differs"; return 1; }
}

t_cat_offset() {
    rclonec cat --offset 1000000 --count 4096 "s3c:$B/mp/big.bin" >"$T/part" || return 1
    tail -c +1000001 "$T/mp/big.bin" | head -c 4096 >"$T/part.want"
    sha_eq "$T/part.want" "$T/part"
}

t_lsf() {
    local out want
    out=$(rclonec lsf -R "s3c:$B/data" | sort) || return 1
    want=$(cd "$T/src" && find . -mindepth 1 | sed 's|^\./||' | while read -r p; do
        [[ -d $p ]] && echo "$p/" || echo "$p"; done | sort)
    [[ $out == "$want" ]] || { echo "rclone lsf -R:"; diff <(echo "$want") <(echo "$out"); return 1; }
}

t_delete() {
    rclonec delete "s3c:$B/data/sub" || return 1
    absent "$S3_STORE/$B/data/sub/h.txt" || return 1
    absent "$S3_STORE/$B/data/sub/deep/g.bin"
}

mkdir -p "$T/src" "$T/back" "$T/mp"
mkdir -p "$S3_STORE/$B"
start_server
check "rclone copy up + check + copy down" t_copy_check
check "rclone check notices a changed file" t_check_detects
check "rclone sync (changed, deleted, new)" t_sync
check "rclone multipart (10M cutoff, 5M chunks, 4 in parallel)" t_multipart
check "rclone cat --offset --count (Range)" t_cat_offset
check "rclone lsf -R" t_lsf
check "rclone delete" t_delete
