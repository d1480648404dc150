#!/usr/bin/env bash
# 30-range-cond: Range (a-b, a-, -n, past the end, unsatisfiable, malformed) and
# conditional GET/HEAD (If-Match, If-None-Match, If-Modified-Since, If-Unmodified-Since),
# x-cache miss then hit, and the /_/stats counters that go with them. curl --aws-sigv4.
. "$(dirname "$0")/lib.sh"
B=rng
mkdir -p "$S3_STORE/$B"
# objects written straight into the backend dir: the first GET is a real miss
seq 1 300 | head -c 1000 >"$S3_STORE/$B/k1000"
head -c 1000 "$S3_STORE/$B/k1000" >"$T/k1000"
mkfile "$S3_STORE/$B/big" 24M
cp "$S3_STORE/$B/big" "$T/big"

# rget RANGE [KEY] — GET with Range; body in $T/rb, headers in $T/rh; prints status
rget() { s3curl -D "$T/rh" -o "$T/rb" -w '%{http_code}' -H "Range: $1" "$S3_EP/$B/${2:-k1000}"; }

# expect_range RANGE START END [KEY] — 206, Content-Range bytes START-END/TOTAL, body bytes
expect_range() {
    local st total src=$T/${4:-k1000}
    total=$(stat -c %s "$src")
    st=$(rget "$1" "${4:-k1000}")
    expect_eq "Range: $1 status" "$st" 206 || return 1
    expect_eq "Range: $1 Content-Range" "$(hdr "$T/rh" content-range)" "bytes $2-$3/$total" || return 1
    expect_eq "Range: $1 Content-Length" "$(hdr "$T/rh" content-length)" "$(($3 - $2 + 1))" || return 1
    tail -c +$(($2 + 1)) "$src" | head -c $(($3 - $2 + 1)) >"$T/want"
    sha_eq "$T/want" "$T/rb"
}

t_xcache_miss_hit() {
    local st h0 m0 h1 m1
    h0=$(stats_field cache.hits) && m0=$(stats_field cache.misses) || { echo "no /_/stats"; return 1; }
    st=$(s3curl -D "$T/h1" -o "$T/b1" -w '%{http_code}' "$S3_EP/$B/k1000")
    expect_eq "first GET status" "$st" 200 || return 1
    expect_eq "first GET x-cache" "$(hdr "$T/h1" x-cache)" miss || return 1
    sha_eq "$T/k1000" "$T/b1" || return 1
    st=$(s3curl -D "$T/h2" -o "$T/b2" -w '%{http_code}' "$S3_EP/$B/k1000")
    expect_eq "second GET x-cache" "$(hdr "$T/h2" x-cache)" hit || return 1
    sha_eq "$T/k1000" "$T/b2" || return 1
    [[ -n $(hdr "$T/h2" x-amz-request-id) ]] || { echo "no x-amz-request-id on GET"; return 1; }
    h1=$(stats_field cache.hits); m1=$(stats_field cache.misses)
    [[ $((m1 - m0)) -ge 1 ]] || { echo "cache.misses: expected +1, went $m0 -> $m1"; return 1; }
    [[ $((h1 - h0)) -ge 1 ]] || { echo "cache.hits: expected +1, went $h0 -> $h1"; return 1; }
}

t_ranges() {
    expect_range "bytes=0-9" 0 9 || return 1
    expect_range "bytes=100-199" 100 199 || return 1
    expect_range "bytes=990-" 990 999 || return 1
    expect_range "bytes=-7" 993 999 || return 1
    expect_range "bytes=995-5000" 995 999 || return 1          # end past the object: clamped
    expect_range "bytes=999-999" 999 999 || return 1
    expect_range "bytes=-5000" 0 999                            # suffix longer than the object
}

t_range_big_cold() {
    # cold ranged reads deep into an uncached object (read-ahead / block fill paths)
    expect_range "bytes=20000000-20999999" 20000000 20999999 big || return 1
    expect_range "bytes=8388600-8388700" 8388600 8388700 big || return 1
    expect_range "bytes=25165000-" 25165000 25165823 big || return 1
    local st
    st=$(s3curl -o "$T/bigfull" -w '%{http_code}' "$S3_EP/$B/big")
    expect_eq "full GET of big" "$st" 200 || return 1
    sha_eq "$T/big" "$T/bigfull"
}

t_range_unsatisfiable() {
    local st
    st=$(rget "bytes=1000-")
    expect_error 416 InvalidRange "$T/rh" "$T/rb" "$st" || return 1
    st=$(rget "bytes=5000-6000")
    expect_error 416 InvalidRange "$T/rh" "$T/rb" "$st"
}

t_range_ignored() {
    # syntactically invalid ranges are ignored (RFC 9110 14.2; S3 does the same): 200 + whole body
    local r st
    for r in "bytes=9-2" "bytes=abc" "items=0-5"; do
        st=$(rget "$r")
        expect_eq "Range: $r status (ignored)" "$st" 200 || return 1
        sha_eq "$T/k1000" "$T/rb" || return 1
    done
}

t_range_head() {
    local st
    st=$(s3curl -I -D "$T/hh" -o /dev/null -w '%{http_code}' "$S3_EP/$B/k1000")
    expect_eq "HEAD status" "$st" 200 || return 1
    expect_eq "HEAD Content-Length" "$(hdr "$T/hh" content-length)" 1000 || return 1
    expect_eq "HEAD Accept-Ranges" "$(hdr "$T/hh" accept-ranges)" bytes || return 1
    expect_match "HEAD x-cache" "$(hdr "$T/hh" x-cache)" '^(hit|miss|coalesced)$'
}

t_conditional() {
    local etag lm st past future
    s3curl -I -D "$T/ch" -o /dev/null "$S3_EP/$B/k1000"
    etag=$(hdr "$T/ch" etag)
    lm=$(hdr "$T/ch" last-modified)
    [[ $etag == \"*\" ]] || { echo "ETag should be a quoted string, got '$etag'"; return 1; }
    [[ -n $lm ]] || { echo "no Last-Modified"; return 1; }
    past=$(date -u -d "$lm - 1 day" '+%a, %d %b %Y %H:%M:%S GMT')
    future=$(date -u -d "$lm + 1 day" '+%a, %d %b %Y %H:%M:%S GMT')

    st=$(s3curl -D "$T/c1" -o "$T/cb" -w '%{http_code}' -H "If-None-Match: $etag" "$S3_EP/$B/k1000")
    expect_eq "If-None-Match: <etag>" "$st" 304 || return 1
    [[ ! -s $T/cb ]] || { echo "304 must have no body, got $(stat -c %s "$T/cb") bytes"; return 1; }
    expect_eq "304 keeps the ETag header" "$(hdr "$T/c1" etag)" "$etag" || return 1
    st=$(s3curl -o "$T/cb" -w '%{http_code}' -H 'If-None-Match: "0000"' "$S3_EP/$B/k1000")
    expect_eq "If-None-Match: <other>" "$st" 200 || return 1
    sha_eq "$T/k1000" "$T/cb" || return 1
    st=$(s3curl -o "$T/cb" -w '%{http_code}' -H "If-None-Match: *" "$S3_EP/$B/k1000")
    expect_eq "If-None-Match: *" "$st" 304 || return 1
    st=$(s3curl -o "$T/cb" -w '%{http_code}' -H "If-Match: $etag" "$S3_EP/$B/k1000")
    expect_eq "If-Match: <etag>" "$st" 200 || return 1
    st=$(s3curl -D "$T/c2" -o "$T/cb" -w '%{http_code}' -H 'If-Match: "0000"' "$S3_EP/$B/k1000")
    expect_error 412 PreconditionFailed "$T/c2" "$T/cb" "$st" || return 1
    st=$(s3curl -o "$T/cb" -w '%{http_code}' -H "If-Modified-Since: $future" "$S3_EP/$B/k1000")
    expect_eq "If-Modified-Since: a day after Last-Modified" "$st" 304 || return 1
    st=$(s3curl -o "$T/cb" -w '%{http_code}' -H "If-Modified-Since: $past" "$S3_EP/$B/k1000")
    expect_eq "If-Modified-Since: a day before Last-Modified" "$st" 200 || return 1
    st=$(s3curl -D "$T/c3" -o "$T/cb" -w '%{http_code}' -H "If-Unmodified-Since: $past" "$S3_EP/$B/k1000")
    expect_error 412 PreconditionFailed "$T/c3" "$T/cb" "$st" || return 1
    st=$(s3curl -o "$T/cb" -w '%{http_code}' -H "If-Unmodified-Since: $future" "$S3_EP/$B/k1000")
    expect_eq "If-Unmodified-Since: a day after" "$st" 200 || return 1
    # S3 precedence: If-Match true + If-Unmodified-Since false -> 200
    st=$(s3curl -o "$T/cb" -w '%{http_code}' -H "If-Match: $etag" -H "If-Unmodified-Since: $past" "$S3_EP/$B/k1000")
    expect_eq "If-Match true and If-Unmodified-Since false" "$st" 200 || return 1
    # If-None-Match false + If-Modified-Since true -> 304
    st=$(s3curl -o "$T/cb" -w '%{http_code}' -H "If-None-Match: $etag" -H "If-Modified-Since: $past" "$S3_EP/$B/k1000")
    expect_eq "If-None-Match false and If-Modified-Since true" "$st" 304 || return 1
    # HEAD honours them too
    st=$(s3curl -I -o /dev/null -w '%{http_code}' -H "If-None-Match: $etag" "$S3_EP/$B/k1000")
    expect_eq "HEAD If-None-Match: <etag>" "$st" 304 || return 1
    st=$(s3curl -I -o /dev/null -w '%{http_code}' -H 'If-Match: "0000"' "$S3_EP/$B/k1000")
    expect_eq "HEAD If-Match: <other>" "$st" 412 || return 1
    # conditional + Range
    st=$(s3curl -o "$T/cb" -w '%{http_code}' -H "If-Match: $etag" -H "Range: bytes=0-9" "$S3_EP/$B/k1000")
    expect_eq "If-Match + Range" "$st" 206
}

start_server
check "GET: x-cache miss then hit; /_/stats hits and misses move" t_xcache_miss_hit
check "Range a-b, a-, -n, past end: 206 + Content-Range + bytes" t_ranges
check "Range on a cold 24 MiB object, then full GET" t_range_big_cold
check "unsatisfiable Range: 416 InvalidRange" t_range_unsatisfiable
check "malformed Range ignored: 200 full body" t_range_ignored
check "HEAD: length, Accept-Ranges, x-cache" t_range_head
check "conditional GET/HEAD: 304 / 412 / 200" t_conditional
