#!/usr/bin/env bash
# 43-bad-input: hostile or broken requests get the right error and write nothing —
# path traversal (raw paths), malformed XML (Complete, DeleteObjects), Content-MD5,
# x-amz-checksum-crc32 and x-amz-content-sha256 mismatches, short bodies and a client
# that disconnects mid-upload (nothing stored, old object intact, server healthy).
. "$(dirname "$0")/lib.sh"
B=bad
mkdir -p "$S3_STORE/$B"
echo "original content" >"$S3_STORE/$B/keep"
cp "$S3_STORE/$B/keep" "$T/keep.orig"
mkdir -p "$T/outside"
echo "outside the store" >"$T/outside/victim"

# nothing_new — no regular file appeared or changed under $T except the cache, logs,
# check temp files and files this script made itself.
nothing_new() {
    local new
    new=$(find "$T" -newer "$T/marker" -type f ! -path "$S3_CACHE/*" ! -name 'server.*.log' \
        ! -name 'check.*' ! -path "$T/w/*" ! -name 'watchdog.*' 2>/dev/null)
    [[ -z $new ]] && return 0
    echo "files written or changed where nothing should be:"; echo "$new"
    return 1
}

# trav RAWPATH [METHOD] — must not succeed
trav() {
    local p=$1 m=${2:-PUT} st
    st=$(s3curl --path-as-is -X "$m" -o "$T/w/tb" -w '%{http_code}' \
        ${3:+--data-binary "$3"} "$S3_EP$p")
    if [[ $st == 2* ]]; then
        echo "$m $p (curl --path-as-is) answered $st; expected a 4xx refusal"; return 1
    fi
    [[ $st == 4* ]] || { echo "$m $p: expected 4xx, got '$st'"; return 1; }
    # the same raw path signed exactly as sent (no normalisation by the client)
    st=$(s3req -X "$m" ${3:+-d "$3"} -o "$T/w/tb2" "$p")
    [[ $st == 4* ]] || { echo "$m $p (signed raw): expected 4xx, got '$st'"; return 1; }
}

t_traversal() {
    touch "$T/marker"; sleep 1.1
    local p rc=0
    for p in "/$B/../x" "/$B/a/../../x" "/$B/../../outside/x" "/$B/..%2Fx" "/$B/a/..%2F..%2Fx" \
        "/$B/%2e%2e/x" "/$B/%2E%2E/%2E%2E/outside/x" "/$B/./x" "/$B//x" "/$B/a/./b" \
        "/$B/x%00y"; do
        trav "$p" PUT "pwned" || rc=1
    done
    for p in "/$B/../../outside/victim" "/$B/..%2F..%2Foutside%2Fvictim" "/$B/%2e%2e/%2e%2e/outside/victim"; do
        trav "$p" GET || rc=1
        if grep -q "outside the store" "$T/w/tb" "$T/w/tb2" 2>/dev/null; then
            echo "GET $p returned a file outside the store"; rc=1
        fi
    done
    trav "/$B/../../outside/victim" DELETE || rc=1
    [[ -f $T/outside/victim ]] || { echo "DELETE through .. removed a file outside the store"; rc=1; }
    for p in x outside/x; do
        [[ ! -e $T/$p && ! -e $T/store/$p ]] || { echo "traversal wrote $T/$p or $T/store/$p"; rc=1; }
    done
    nothing_new || rc=1
    # the server is still fine and the legit object is intact
    sha_eq "$T/keep.orig" "$S3_STORE/$B/keep" || rc=1
    return $rc
}

t_malformed_complete() {
    local up st
    st=$(s3req -X POST -q uploads -o "$T/w/init" "/$B/mp-bad")
    expect_eq "CreateMultipartUpload" "$st" 200 || return 1
    up=$(sed -n 's:.*<UploadId>\([^<]*\)</UploadId>.*:\1:p' "$T/w/init")
    [[ -n $up ]] || { echo "no UploadId in $(cat "$T/w/init")"; return 1; }
    st=$(s3req -X PUT -q "partNumber=1&uploadId=$up" -d "part one" "/$B/mp-bad")
    expect_eq "UploadPart" "$st" 200 || return 1
    local body
    for body in "this is not xml" "<CompleteMultipartUpload><Part><PartNumber>1</PartNumber>" \
        "<CompleteMultipartUpload></CompleteMultipartUpload>" \
        "<CompleteMultipartUpload><Part><PartNumber>one</PartNumber><ETag>x</ETag></Part></CompleteMultipartUpload>"; do
        st=$(s3req -X POST -q "uploadId=$up" -d "$body" -D "$T/w/eh" -o "$T/w/eb" "/$B/mp-bad")
        expect_error 400 MalformedXML "$T/w/eh" "$T/w/eb" "$st" || { echo "(body: $body)"; return 1; }
    done
    absent "$S3_STORE/$B/mp-bad" || return 1
    st=$(s3req -X DELETE -q "uploadId=$up" "/$B/mp-bad")
    expect_eq "AbortMultipartUpload" "$st" 204
}

t_malformed_delete() {
    local st body md5
    for body in "garbage" "<Delete><Object><Key>keep</Key></Object>" "<Delete></Delete>"; do
        md5=$(printf '%s' "$body" | openssl md5 -binary | base64)
        st=$(s3req -X POST -q delete -H "Content-MD5: $md5" -d "$body" -D "$T/w/eh" -o "$T/w/eb" "/$B")
        expect_error 400 MalformedXML "$T/w/eh" "$T/w/eb" "$st" || { echo "(body: $body)"; return 1; }
    done
    sha_eq "$T/keep.orig" "$S3_STORE/$B/keep"
}

t_content_md5() {
    local st wrong
    wrong=$(printf 'something else' | openssl md5 -binary | base64)
    st=$(s3req -X PUT -H "Content-MD5: $wrong" -d "the body" -D "$T/w/eh" -o "$T/w/eb" "/$B/md5-bad")
    expect_error 400 BadDigest "$T/w/eh" "$T/w/eb" "$st" || return 1
    absent "$S3_STORE/$B/md5-bad" || return 1
    st=$(s3req -X PUT -H "Content-MD5: not-base64!" -d "the body" -D "$T/w/eh" -o "$T/w/eb" "/$B/md5-inv")
    expect_error 400 InvalidDigest "$T/w/eh" "$T/w/eb" "$st" || return 1
    absent "$S3_STORE/$B/md5-inv" || return 1
    # overwrite with a bad digest leaves the old object
    st=$(s3req -X PUT -H "Content-MD5: $wrong" -d "replacement" "/$B/keep")
    expect_eq "overwrite with a bad Content-MD5" "$st" 400 || return 1
    sha_eq "$T/keep.orig" "$S3_STORE/$B/keep" || return 1
    # the right MD5 is accepted (so the 400s above are about the digest)
    st=$(s3req -X PUT -H "Content-MD5: $(printf 'the body' | openssl md5 -binary | base64)" -d "the body" "/$B/md5-ok")
    expect_eq "PUT with the right Content-MD5" "$st" 200
}

t_crc32() {
    local st good bad
    good=$("$PY" -c 'import sys,e2elib; print(e2elib.crc32_b64(b"crc body"))')
    bad=$("$PY" -c 'import sys,e2elib; print(e2elib.crc32_b64(b"other"))')
    st=$(s3req -X PUT -H "x-amz-checksum-crc32: $bad" -H "x-amz-sdk-checksum-algorithm: CRC32" \
        -d "crc body" -D "$T/w/eh" -o "$T/w/eb" "/$B/crc-bad")
    expect_error 400 BadDigest "$T/w/eh" "$T/w/eb" "$st" || return 1
    absent "$S3_STORE/$B/crc-bad" || return 1
    st=$(s3req -X PUT -H "x-amz-checksum-crc32: $good" -H "x-amz-sdk-checksum-algorithm: CRC32" \
        -d "crc body" -D "$T/w/h" "/$B/crc-ok")
    expect_eq "PUT with the right x-amz-checksum-crc32" "$st" 200 || return 1
    expect_eq "crc32 echoed" "$(hdr "$T/w/h" x-amz-checksum-crc32)" "$good"
}

t_sha256_mismatch() {
    local st
    # signed as the hash of another body: the signature is valid, the payload is not
    st=$(s3req -X PUT --payload "$(printf 'declared body' | sha256sum | cut -c1-64)" \
        -d "actual body" -D "$T/w/eh" -o "$T/w/eb" "/$B/sha-bad")
    expect_error 400 XAmzContentSHA256Mismatch "$T/w/eh" "$T/w/eb" "$st" || return 1
    absent "$S3_STORE/$B/sha-bad" || return 1
    st=$(s3req -X PUT --payload "$(printf 'declared body' | sha256sum | cut -c1-64)" \
        -d "actual body" "/$B/keep")
    expect_eq "overwrite with a mismatched sha256" "$st" 400 || return 1
    sha_eq "$T/keep.orig" "$S3_STORE/$B/keep"
}

t_disconnect() {
    local st
    mkfile "$T/w/big" 10M
    touch "$T/marker"; sleep 1.1
    # PUT a new key: 1 MiB of 10 MiB sent, then RST
    st=$(s3req -X PUT --payload unsigned -T "$T/w/big" --send-bytes 1048576 --close "/$B/cut")
    # overwrite of an existing key, same thing
    st=$(s3req -X PUT --payload unsigned -T "$T/w/big" --send-bytes 3000000 --close "/$B/keep")
    # a short body then a half-close: Content-Length not met
    local t0=$SECONDS
    st=$(CT=20 s3req -X PUT --payload unsigned -T "$T/w/big" --send-bytes 500000 -o "$T/w/sb" "/$B/short")
    [[ $st == 4* || $st == 000 || -z $st ]] || { echo "short body (Content-Length not met): expected 4xx or a closed connection, got $st"; return 1; }
    (( SECONDS - t0 <= 10 )) || { echo "short body: the connection was held $((SECONDS - t0)) s (idle timeout is 3 s)"; return 1; }
    sleep 1
    [[ $(curl -s --max-time 5 "$S3_EP/_/health") == ok* ]] || { echo "server not healthy after disconnects"; return 1; }
    absent "$S3_STORE/$B/cut" || return 1
    absent "$S3_STORE/$B/short" || return 1
    sha_eq "$T/keep.orig" "$S3_STORE/$B/keep" || return 1
    st=$(s3req -o /dev/null "/$B/cut")
    expect_eq "GET of the interrupted key" "$st" 404 || return 1
    st=$(s3req -o "$T/w/keepnow" "/$B/keep")
    expect_eq "GET of the overwritten-then-interrupted key" "$st" 200 || return 1
    sha_eq "$T/keep.orig" "$T/w/keepnow" || return 1
    # no temp litter in the store (uploads stage elsewhere or clean up)
    local litter
    litter=$(find "$S3_STORE" -newer "$T/marker" -type f)
    [[ -z $litter ]] || { echo "files left in the store by interrupted uploads:"; echo "$litter"; return 1; }
    # and a full upload of the same key works afterwards
    st=$(s3req -X PUT --payload unsigned -T "$T/w/big" "/$B/cut")
    expect_eq "PUT after the disconnects" "$st" 200 || return 1
    sha_eq "$T/w/big" "$S3_STORE/$B/cut"
}

t_invalid_names() {
    local st k
    k=$(head -c 1100 /dev/zero | tr '\0' k)
    st=$(s3req -X PUT -d x -D "$T/w/eh" -o "$T/w/eb" "/$B/$k")
    expect_error 400 KeyTooLongError "$T/w/eh" "$T/w/eb" "$st" || return 1
    st=$(s3req -X PUT -d x -o /dev/null "/_reserved/x")
    [[ $st == 4* ]] || { echo "PUT into a bucket named _reserved: expected 4xx, got $st"; return 1; }
    st=$(s3req -X PUT -d x -o /dev/null "/nosuchbucket/x")
    expect_eq "PUT into a missing bucket" "$st" 404
}

# An error document that echoes a key with control characters (and a byte that is not UTF-8)
# is still XML 1.0: tab, LF and CR as character references, the others (U+0001-U+001F, which
# XML 1.0 allows in no form, not even as &#1;) and the stray byte as U+FFFD.
t_error_xml_1_0() {
    local st
    st=$(s3req -D "$T/w/xh" -o "$T/w/xb" "/$B/ctl%01key%1Fx%09tab%0Dcr%FFz")
    expect_error 404 NoSuchKey "$T/w/xh" "$T/w/xb" "$st" || return 1
    "$PY" - "$T/w/xb" <<'EOF'
import sys, xml.etree.ElementTree as ET
raw = open(sys.argv[1], "rb").read()
try:
    root = ET.fromstring(raw)
except ET.ParseError as e:
    print("the error document is not well-formed XML 1.0 (%s): %r" % (e, raw[:300])); sys.exit(1)
key, want = root.findtext("Key"), "ctl\ufffdkey\ufffdx\ttab\rcr\ufffdz"
if key != want:
    print("<Key> %r, want %r" % (key, want)); sys.exit(1)
if b"&#1;" in raw or b"&#31;" in raw:
    print("a control character written as a character reference: %r" % raw[:300]); sys.exit(1)
EOF
}

mkdir -p "$T/w"
# A short idle timeout: libmicrohttpd 0.9.75 does not notice a client's half-close in the middle
# of a body sent with "Connection: close"; such a connection is cut at --idle-timeout.
start_server --idle-timeout 3s
check "traversal keys refused; nothing written outside; nothing read outside" t_traversal
check "CompleteMultipartUpload with malformed XML: 400 MalformedXML" t_malformed_complete
check "DeleteObjects with malformed XML: 400 MalformedXML" t_malformed_delete
check "Content-MD5 mismatch: 400 BadDigest (invalid: InvalidDigest); nothing written" t_content_md5
check "x-amz-checksum-crc32 mismatch: 400 BadDigest; nothing written" t_crc32
check "x-amz-content-sha256 mismatch: 400 XAmzContentSHA256Mismatch; nothing written" t_sha256_mismatch
check "client disconnects mid-upload: nothing stored, old object intact, healthy" t_disconnect
check "key too long, reserved bucket, missing bucket" t_invalid_names
check "an error document echoing control characters is XML 1.0 (U+FFFD, no &#1;)" t_error_xml_1_0

t_header_limit() {
    local big st
    # under the limit (16K by default): served
    big=$(head -c 12000 /dev/zero | tr '\0' a)
    st=$(s3req -H "x-custom-filler: $big" -o "$T/w/hb" "/$B/keep")
    [[ $st == 200 ]] || { echo "a 12 KB header section: expected 200, got $st"; return 1; }
    sha_eq "$T/keep.orig" "$T/w/hb" || return 1
    # over it: S3's 400 RequestHeaderSectionTooLarge, with its XML; nothing written
    big=$(head -c 20000 /dev/zero | tr '\0' a)
    st=$(s3req -X PUT -H "x-custom-filler: $big" -d "new body" -D "$T/w/eh" -o "$T/w/eb" "/$B/keep")
    expect_error 400 RequestHeaderSectionTooLarge "$T/w/eh" "$T/w/eb" "$st" || return 1
    sha_eq "$T/keep.orig" "$S3_STORE/$B/keep" || return 1
    # far over it, past libmicrohttpd's connection pool: its own 431
    big=$(head -c 60000 /dev/zero | tr '\0' a)
    st=$(http_code -H "x-amz-meta-big: $big" "$S3_EP/$B/keep")
    [[ $st == 431 || $st == 400 ]] || { echo "a 60 KB header: expected 431 or 400, got $st"; return 1; }
    [[ $(curl -s --max-time 5 "$S3_EP/_/health") == ok* ]] || { echo "server not healthy after an oversized header"; return 1; }
}
check "headers over --max-header-size: 400 RequestHeaderSectionTooLarge (431 past the pool), server healthy" t_header_limit
