# bench/common.sh: helpers the bench scripts share (sourced; defines functions only).
#   free_port        a free loopback TCP port
#   field LABEL KEY  KEY's value on the line LABEL of $RESULTS ("LABEL<TAB>k=v k=v ..."; a
#                    trailing % dropped)
#   ratio A B        A / B to two decimals, n/a when either is missing or B is 0
#   shared_bench NAME the reference scripts (../shared/bench beside the repo, or
#                    $SHARED_BENCH) in SB, their lib.sh sourced; where they are missing, says
#                    so as NAME and exits 0 (a skip: nothing to compare against)

free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

field() {
    awk -F'\t' -v l="$1" -v k="$2" '$1 == l { n = split($2, f, " "); for (i = 1; i <= n; i++) { split(f[i], kv, "="); if (kv[1] == k) v = kv[2] } } END { sub(/%$/, "", v); print v }' "$RESULTS"
}

shared_bench() {
    local repo
    repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
    SB=$(cd "${SHARED_BENCH:-$repo/../shared/bench}" 2>/dev/null && pwd) || SB=
    if [[ -z $SB || ! -x $SB/http-large || ! -x $SB/http-small ]]; then
        echo "$1: reference scripts not found at ${SHARED_BENCH:-$repo/../shared/bench}; nothing to compare against. Skipping."
        exit 0
    fi
    . "$SB/lib.sh"
}

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "" || b == "" || b + 0 == 0) print "n/a"; else printf "%.2f", a / b }'; }

# A VM whose balloon reports free pages to its host (Linux free page reporting) gets a reported
# page back only through a host page fault: page-cache fills then run at a fraction of memory
# speed, at random (see HACKING.md, Benchmarks). Root only; the path is the kernel's.
#   page_reporting_hold     holds the reporting off until page_reporting_restore (two knobs, as
#                           measured here, where neither alone did: an order past the largest,
#                           and this VM kernel's min_free_ms, a page being reported once free
#                           that long: 5 minutes, the most it takes, outlasts a run)
#   page_reporting_state    "order N, min_free_ms M" (empty where the kernel does not report)
#   page_reporting_kib      KiB reported since boot (0 where it does not)
#   touch_free_memory       writes every free GiB but 2 once and lets it go: the pages are
#                           backed again (and stay so while the reporting is held off)
page_reporting_hold() {
    local d=/sys/module/page_reporting/parameters
    PR_SAVED=""
    [ -r $d/reported_kib ] || return 0
    if [ -w $d/min_free_ms ]; then
        PR_SAVED="$(cat $d/page_reporting_order) $(cat $d/min_free_ms)"
        echo 11 >$d/page_reporting_order && echo 300000 >$d/min_free_ms
    else
        echo "free page reporting cannot be held off here (no min_free_ms): memory is only touched"
    fi
}
page_reporting_restore() {
    local d=/sys/module/page_reporting/parameters
    [ -n "${PR_SAVED:-}" ] || return 0
    set -- $PR_SAVED
    echo "$1" >$d/page_reporting_order && echo "$2" >$d/min_free_ms
    PR_SAVED=""
}
page_reporting_state() {
    local d=/sys/module/page_reporting/parameters
    [ -r $d/reported_kib ] || return 0
    echo "order $(cat $d/page_reporting_order)$([ -r $d/min_free_ms ] && echo ", min_free_ms $(cat $d/min_free_ms)")"
}
page_reporting_kib() { cat /sys/module/page_reporting/parameters/reported_kib 2>/dev/null || echo 0; }
touch_free_memory() {
    /usr/bin/python3 - <<'PYEOF'
import time
kb = {l.split(':')[0]: int(l.split()[1]) for l in open('/proc/meminfo')}
n = max(0, kb['MemAvailable'] // 1048576 - 2)
t0, keep = time.monotonic(), []
for _ in range(n):
    b = bytearray(1 << 30); b[::4096] = b'\1' * (1 << 18); keep.append(b)
s = time.monotonic() - t0
print(f"touched {n} GiB of free memory in {s:.1f} s ({n * 1.073741824 / max(s, 1e-9):.2f} GB/s)")
PYEOF
}
