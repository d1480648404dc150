#!/usr/bin/env bash
# 44-restart-meta: object metadata (Content-Type, Cache-Control, Content-Disposition,
# Content-Encoding, Expires, x-amz-meta-*) on HEAD and GET, CopyObject with the
# COPY and REPLACE directives, and all of it surviving a SIGTERM + restart; the
# cache index survives too (x-cache: hit after the restart).
. "$(dirname "$0")/lib.sh"
B=meta
mkdir -p "$S3_STORE/$B"
mkfile "$T/body" 300K

# want_meta KEY CT CC CD METAKV... — HEAD and GET both carry these
want_meta() {
    local key=$1 ct=$2 cc=$3 cd=$4 m f st
    shift 4
    for m in HEAD GET; do
        f=$T/h.$m
        if [[ $m == HEAD ]]; then
            st=$(s3curl -I -D "$f" -o /dev/null -w '%{http_code}' "$S3_EP/$B/$key")
        else
            st=$(s3curl -D "$f" -o "$T/got" -w '%{http_code}' "$S3_EP/$B/$key")
        fi
        expect_eq "$m $key status" "$st" 200 || return 1
        expect_eq "$m $key Content-Type" "$(hdr "$f" content-type)" "$ct" || return 1
        expect_eq "$m $key Cache-Control" "$(hdr "$f" cache-control)" "$cc" || return 1
        expect_eq "$m $key Content-Disposition" "$(hdr "$f" content-disposition)" "$cd" || return 1
        for kv in "$@"; do
            expect_eq "$m $key ${kv%%=*}" "$(hdr "$f" "${kv%%=*}")" "${kv#*=}" || return 1
        done
    done
    sha_eq "$T/body" "$T/got"
}

t_put_meta() {
    awsc s3api put-object --bucket "$B" --key "doc/report.pdf" --body "$T/body" \
        --content-type "application/pdf" --cache-control "max-age=3600, public" \
        --content-disposition 'attachment; filename="report.pdf"' --content-encoding identity \
        --metadata "Author=Ada Lovelace,project=e2e" >/dev/null || return 1
    want_meta doc/report.pdf application/pdf "max-age=3600, public" 'attachment; filename="report.pdf"' \
        "content-encoding=identity" "x-amz-meta-author=Ada Lovelace" "x-amz-meta-project=e2e" || return 1
    local out
    out=$(awsc s3api head-object --bucket "$B" --key doc/report.pdf) || return 1
    grep -q '"author": "Ada Lovelace"' <<<"$out" || { echo "head-object Metadata: $out"; return 1; }
}

t_put_meta_curl() {
    local st
    st=$(s3curl -T "$T/body" -o /dev/null -w '%{http_code}' -H "Content-Type: text/x-e2e; charset=utf-8" \
        -H "x-amz-meta-camelCase: Value With Spaces" -H "Cache-Control: no-cache" \
        "$S3_EP/$B/plain/c.txt")
    expect_eq "curl PUT with metadata" "$st" 200 || return 1
    want_meta plain/c.txt "text/x-e2e; charset=utf-8" "no-cache" "" \
        "x-amz-meta-camelcase=Value With Spaces"
}

t_copy() {
    awsc s3api copy-object --bucket "$B" --key "copies/same.pdf" --copy-source "$B/doc/report.pdf" >/dev/null || return 1
    want_meta copies/same.pdf application/pdf "max-age=3600, public" 'attachment; filename="report.pdf"' \
        "x-amz-meta-author=Ada Lovelace" "x-amz-meta-project=e2e" || return 1
    awsc s3api copy-object --bucket "$B" --key "copies/replaced.bin" --copy-source "$B/doc/report.pdf" \
        --metadata-directive REPLACE --content-type application/octet-stream \
        --metadata "stage=replaced" >/dev/null || return 1
    want_meta copies/replaced.bin application/octet-stream "" "" "x-amz-meta-stage=replaced" \
        "x-amz-meta-author=" || return 1
    # copy in place with REPLACE changes metadata, keeps bytes
    awsc s3api copy-object --bucket "$B" --key "copies/replaced.bin" --copy-source "$B/copies/replaced.bin" \
        --metadata-directive REPLACE --content-type image/png --metadata "stage=again" >/dev/null || return 1
    want_meta copies/replaced.bin image/png "" "" "x-amz-meta-stage=again" || return 1
    # copy in place without REPLACE is refused (S3: 400 InvalidRequest)
    if awsc s3api copy-object --bucket "$B" --key "copies/same.pdf" --copy-source "$B/copies/same.pdf" >"$T/ci" 2>&1; then
        echo "copy onto itself without REPLACE succeeded"; return 1
    fi
    grep -q InvalidRequest "$T/ci" || { echo "expected InvalidRequest: $(cat "$T/ci")"; return 1; }
}

t_warm_before_restart() {
    s3curl -o /dev/null "$S3_EP/$B/doc/report.pdf"
    s3curl -D "$T/wh" -o /dev/null "$S3_EP/$B/doc/report.pdf"
    expect_eq "x-cache before restart" "$(hdr "$T/wh" x-cache)" hit
}

t_after_restart() {
    want_meta doc/report.pdf application/pdf "max-age=3600, public" 'attachment; filename="report.pdf"' \
        "content-encoding=identity" "x-amz-meta-author=Ada Lovelace" "x-amz-meta-project=e2e" || return 1
    want_meta plain/c.txt "text/x-e2e; charset=utf-8" "no-cache" "" "x-amz-meta-camelcase=Value With Spaces" || return 1
    want_meta copies/same.pdf application/pdf "max-age=3600, public" 'attachment; filename="report.pdf"' \
        "x-amz-meta-author=Ada Lovelace" || return 1
    want_meta copies/replaced.bin image/png "" "" "x-amz-meta-stage=again"
}

t_cache_survives() {
    s3curl -D "$T/wh2" -o "$T/got2" "$S3_EP/$B/plain/c.txt" >/dev/null
    s3curl -D "$T/wh" -o "$T/got" "$S3_EP/$B/doc/report.pdf" >/dev/null
    sha_eq "$T/body" "$T/got" || return 1
    expect_eq "x-cache after restart for an object cached before it" "$(hdr "$T/wh" x-cache)" hit
}

t_etag_stable() {
    local e1 e2
    e1=$(cat "$T/etag.before")
    [[ $e1 == \"*\" ]] || { echo "no quoted ETag before the restart: '$e1'"; return 1; }
    s3curl -I -D "$T/eh" -o /dev/null "$S3_EP/$B/doc/report.pdf"
    e2=$(hdr "$T/eh" etag)
    expect_eq "ETag after restart" "$e2" "$e1"
}

start_server
check "PutObject metadata via awscli shows on HEAD and GET" t_put_meta
check "PutObject metadata via curl (case of x-amz-meta names)" t_put_meta_curl
check "CopyObject COPY keeps, REPLACE replaces, in-place needs REPLACE" t_copy
check "cache warm before restart" t_warm_before_restart
s3curl -I -D "$T/eh0" -o /dev/null "$S3_EP/$B/doc/report.pdf"
hdr "$T/eh0" etag >"$T/etag.before"
stop_server TERM
start_server
check "metadata survives a restart (HEAD and GET)" t_after_restart
check "ETag unchanged by a restart" t_etag_stable
check "cache index survives a restart (x-cache: hit)" t_cache_survives
