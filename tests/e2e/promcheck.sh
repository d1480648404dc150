#!/usr/bin/env bash
# tests/e2e/promcheck.sh: checks Prometheus text exposition (format 0.0.4) with promtool,
# which parses it and lints names, HELP and TYPE. A helper for e2e tests, not a test itself.
#   promcheck.sh URL [BEARER_TOKEN]   fetch URL (bounded by timeout) and check body and
#                                     Content-Type (text/plain; version=0.0.4)
#   promcheck.sh - < FILE             check stdin
# Exit 0: accepted; 1: rejected (promtool's complaints on stderr); 77: promtool missing
# (Debian: apt-get install prometheus).
set -u
PROMTOOL=${PROMTOOL:-$(command -v promtool || true)}
if [[ -z $PROMTOOL ]]; then
    echo "promcheck: promtool not installed (apt-get install prometheus)" >&2
    exit 77
fi
src=${1:--}
tmp=$(mktemp "${TMPDIR:-/tmp}/promcheck.XXXXXX")
trap 'rm -f "$tmp"' EXIT
if [[ $src == - ]]; then
    cat >"$tmp"
else
    auth=()
    [[ -n ${2:-} ]] && auth=(-H "Authorization: Bearer $2")
    ctype=$(timeout 30 curl -sS --noproxy '*' -f "${auth[@]}" -o "$tmp" -w '%{content_type}' "$src") || {
        echo "promcheck: GET $src failed" >&2
        exit 1
    }
    case $ctype in
        "text/plain; version=0.0.4"*) ;;
        *) echo "promcheck: Content-Type \"$ctype\", want text/plain; version=0.0.4" >&2; exit 1 ;;
    esac
fi
if [[ ! -s $tmp ]]; then
    echo "promcheck: empty exposition" >&2
    exit 1
fi
if ! out=$(timeout 30 "$PROMTOOL" check metrics <"$tmp" 2>&1); then
    echo "promcheck: promtool rejected it:" >&2
    echo "$out" >&2
    exit 1
fi
exit 0
