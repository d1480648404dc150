#!/usr/bin/env bash
# Module confinement and banned functions (STYLE.md 3.1, 3.2). Prints offenders; exit 1 if any.
set -u
cd "$(dirname "$0")/.."
bad=0
SRC_DIRS="lib sig backends cache cluster objects acct http s3 admin cmd"
srcs() { for d in $SRC_DIRS; do ls $d/*.c $d/*.h 2>/dev/null; done; }
only_in() { # HEADER FILE...
    local hdr=$1; shift
    local allowed=" $* "
    for f in $(grep -l "#include <$hdr>" $(srcs) 2>/dev/null); do
        case $allowed in *" $f "*) ;; *) echo "lint: $f includes <$hdr> (allowed only in: $*)"; bad=1 ;; esac
    done
}
only_in lmdb.h cache/index.c
only_in curl/curl.h backends/be_s3.c backends/be_s3_call.c backends/be_s3_parse.c backends/be_s3_priv.h lib/range.c cmd/cli.c sig/sigv2.c
only_in microhttpd.h http/server.c http/req.c http/req_mhd.h http/respond.c
# lower layers never reach into the HTTP layer
for f in lib/*.c sig/*.c cache/*.c backends/*.c; do
    grep -q '"http/' "$f" && { echo "lint: $f includes gateway internals"; bad=1; }
done
for f in lib/*.c sig/*.c backends/*.c; do
    grep -q '"cache/' "$f" && { echo "lint: $f includes cache internals"; bad=1; }
done
# cluster/ (the ring and membership) stands alone: libc, pthreads and zlib only
for f in cluster/*.c; do
    grep -qE '#include "(http|cache|backends|lib)/' "$f" &&
        { echo "lint: $f includes a gateway, cache or backend header"; bad=1; }
done
banned='\b(sprintf|strcpy|strcat|strtok|atoi|gets|gmtime|localtime)\s*\('
if grep -nE "$banned" $(srcs) | grep -vE 'snprintf|vsnprintf|strtok_r|gmtime_r|localtime_r'; then
    echo "lint: banned functions above"; bad=1
fi
[ $bad -eq 0 ] && echo "lint: ok"
exit $bad
