#!/usr/bin/env bash
# Module confinement and banned functions (STYLE.md 3.1, 3.2). Prints offenders; exit 1 if any.
set -u
cd "$(dirname "$0")/.."
bad=0
only_in() { # HEADER FILE...
    local hdr=$1; shift
    local allowed=" $* "
    for f in $(grep -l "#include <$hdr>" gateway/*.c cache/*.c backends/*.c cluster/*.c lib/*.c 2>/dev/null); do
        case $allowed in *" $f "*) ;; *) echo "lint: $f includes <$hdr> (allowed only in: $*)"; bad=1 ;; esac
    done
}
only_in lmdb.h cache/index.c
only_in curl/curl.h backends/be_s3.c gateway/range.c gateway/cli.c gateway/sigv2.c
only_in microhttpd.h gateway/server.c gateway/respond.c
# the parsers' libraries, each behind one file (named in both places while xml.c/json.c move to lib/)
only_in expat.h gateway/xml.c lib/xml.c
only_in jansson.h gateway/json.c lib/json.c
# gw.h pulls in microhttpd.h for the gateway's own files only
for f in cache/*.c backends/*.c; do
    grep -q '"../gateway/\|"gw.h"' "$f" && { echo "lint: $f includes gateway internals"; bad=1; }
done
for f in gateway/*.c backends/*.c; do
    grep -q '"\.\./cache/' "$f" && { echo "lint: $f includes cache internals"; bad=1; }
done
# cluster/ (the ring and membership) stands alone: libc, pthreads and zlib only
for f in cluster/*.c; do
    grep -qE '#include "(\.\./)?(gateway|cache|backends)/|#include "(gw|cache|backend|s3c|log)\.h"' "$f" &&
        { echo "lint: $f includes a gateway, cache or backend header"; bad=1; }
done
banned='\b(sprintf|strcpy|strcat|strtok|atoi|gets|gmtime|localtime)\s*\('
if grep -nE "$banned" gateway/*.c cache/*.c backends/*.c cluster/*.c | grep -vE 'snprintf|vsnprintf|strtok_r|gmtime_r|localtime_r'; then
    echo "lint: banned functions above"; bad=1
fi
[ $bad -eq 0 ] && echo "lint: ok"
exit $bad
