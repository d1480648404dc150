#!/usr/bin/env bash
# 48-big-object.sh — streaming both ways: PUT and GET (a hit, then a cold miss streamed
# while it fills) of one 4 GiB + 64 MiB object (past every 32-bit offset) keep the gateway's
# peak RSS (VmHWM) under 64 MiB, and the bytes come back intact. Falls back to 1 GiB when the
# disk has < 24 GiB free (the object exists three times: source, backend store, cache).
# E2E_BIG_SIZE overrides.
. "$(dirname "$0")/lib.sh"
B=big
mkdir -p "$S3_STORE/$B"
free_kb=$(df -Pk "$T" | awk 'NR==2 {print $4}')
size=${E2E_BIG_SIZE:-$(((4096 + 64) * 1024 * 1024))}
if [[ -z ${E2E_BIG_SIZE:-} ]] && [[ -n ${E2E_ASAN:-} ]]; then
    size=$((1024 * 1024 * 1024))   # the sanitizer build is slow: 1 GiB proves the same
elif [[ -z ${E2E_BIG_SIZE:-} ]] && ((free_kb < 24 * 1024 * 1024)); then
    size=$((1024 * 1024 * 1024))
    echo "note: only $((free_kb / 1024 / 1024)) GiB free: using a 1 GiB object"
fi
LIMIT_KB=$((64 * 1024))
start_server --cache-size 16G

# The source: a 64 MiB random pattern repeated (fast to make, not compressible to zeros).
mkfile "$T/w/chunk" 64M
n=$((size / (64 * 1024 * 1024)))
for ((i = 0; i < n; i++)); do cat "$T/w/chunk"; done >"$T/w/src"
want=$(sha256sum "$T/w/src" | cut -d' ' -f1)

hwm() { awk '/^VmHWM:/ {print $2}' /proc/"$S3_PID"/status; }

t_put() {
    local st
    st=$(CT=600 s3curl -T "$T/w/src" -o /dev/null -w '%{http_code}' "$S3_EP/$B/obj")
    expect_eq "PUT of $size bytes" "$st" 200 || return 1
    local got
    got=$(sha256sum "$S3_STORE/$B/obj" | cut -d' ' -f1)
    expect_eq "stored object sha256" "$got" "$want" || return 1
    local h; h=$(hwm)
    ((h < LIMIT_KB)) || { echo "peak RSS after PUT ${h} KiB, limit ${LIMIT_KB} KiB"; return 1; }
}

t_get_hit() {
    local got
    got=$(CT=600 s3curl "$S3_EP/$B/obj" | sha256sum | cut -d' ' -f1)
    expect_eq "GET (hit) sha256" "$got" "$want" || return 1
    local h; h=$(hwm)
    ((h < LIMIT_KB)) || { echo "peak RSS after GET ${h} KiB, limit ${LIMIT_KB} KiB"; return 1; }
}

t_get_cold() {
    local st got
    st=$(http_code -X DELETE -H "Authorization: Bearer $S3_ADMIN_TOKEN" "$S3_EP/_/cache/$B/obj")
    expect_eq "invalidate" "$st" 200 || return 1
    got=$(CT=600 s3curl -D "$T/w/gh" "$S3_EP/$B/obj" | sha256sum | cut -d' ' -f1)
    expect_eq "GET (cold, streamed while filling) sha256" "$got" "$want" || return 1
    expect_eq "x-cache of the cold GET" "$(hdr "$T/w/gh" x-cache)" miss || return 1
    local h; h=$(hwm)
    ((h < LIMIT_KB)) || { echo "peak RSS after the cold GET ${h} KiB, limit ${LIMIT_KB} KiB"; return 1; }
}

check "PUT of a $((size >> 20)) MiB object: stored intact, peak RSS < 64 MiB" t_put
check "GET of it from the cache: intact, peak RSS < 64 MiB" t_get_hit
check "cold GET streamed while filling: intact, peak RSS < 64 MiB" t_get_cold
echo "peak RSS (VmHWM): $(hwm) KiB"
