#!/usr/bin/env bash
# make lint: the layering of the tree, module confinement and banned functions (docs/STYLE.md 3.1,
# 3.2), the format of the C files (.clang-format), commit subjects and the links between the
# documentation pages (HACKING.md). Prints one line per offence, naming the file; exits 1 if
# there is any.
#
# Folders are layers. A file of folder F may include a header of folder X ("X/name.h", with
# -I.) only when rank(X) <= rank(F); a bare "name.h" must be a header of F itself; a private
# header (*_priv.h, req_mhd.h) only from its own folder; the folders' include graph has no
# circle (equal ranks are siblings that must not include each other both ways), nor do the
# files of one folder through their private headers (X_priv.h of X.c). Every .c/.h
# outside tests/, bench/, deploy/ and build*/ lives in a ranked folder: a new folder is added
# to RANKS on purpose.
set -u
cd "$(dirname "$0")/.."
bad=0
fail() { echo "lint: $*"; bad=1; }

# bottom to top
# peer/ (cluster mode: the peer client, fan-outs, cluster warm-ups and stats) sits beside acct/:
# it uses the ring (ring/), the object layer's hooks and warm-ups (objects/); http/ uses it.
RANKS="lib:0 sig:1 backends:2 cache:3 writeback:4 ring:5 objects:6 acct:7 peer:7 http:8 s3:9 admin:9 cmd:10"
declare -A rank
for r in $RANKS; do rank[${r%%:*}]=${r##*:}; done
DIRS=$(for r in $RANKS; do echo "${r%%:*}"; done)
srcs() { for d in $DIRS; do ls "$d"/*.c "$d"/*.h 2>/dev/null; done; }

# --- every source file is in a ranked folder ---------------------------------------------
while IFS= read -r f; do
    d=${f%%/*}
    [[ $f == */* ]] || d=.
    [[ -n ${rank[$d]+x} ]] || fail "$f is in no ranked folder (tests/lint.sh RANKS: $RANKS)"
done < <(find . \( -path ./tests -o -path ./bench -o -path ./deploy -o -path './build*' -o \
                   -path ./.git -o -path ./var -o -name node_modules \) -prune -o \
              \( -name '*.c' -o -name '*.h' \) -print | sed 's|^\./||' | sort)

# --- includes go down ---------------------------------------------------------------------
edges=$(mktemp)
trap 'rm -f "$edges"' EXIT
for f in $(srcs); do
    d=${f%%/*}
    while IFS=: read -r ln inc; do
        inc=${inc#*\"}
        inc=${inc%%\"*}
        if [[ $inc == */* ]]; then
            x=${inc%%/*}
            if [[ -z ${rank[$x]+x} ]]; then
                fail "$f:$ln includes \"$inc\": $x/ is not a ranked folder"
            elif (( ${rank[$x]} > ${rank[$d]} )); then
                fail "$f:$ln includes \"$inc\": $x/ (rank ${rank[$x]}) is above $d/ (rank ${rank[$d]})"
            elif [[ ! -e $inc ]]; then
                fail "$f:$ln includes \"$inc\", which does not exist"
            fi
            [[ $x != "$d" ]] && echo "$d $x" >> "$edges"
            case ${inc##*/} in
                *_priv.h | req_mhd.h)
                    [[ $x == "$d" ]] || fail "$f:$ln includes \"$inc\", a header private to $x/" ;;
            esac
        elif [[ ! -e $d/$inc ]]; then
            fail "$f:$ln includes \"$inc\" bare, but it is no header of $d/ (name the folder: \"X/$inc\")"
        fi
    done < <(grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$f")
done
# no circle between folders (tsort names the folders of a loop on stderr)
if ! loops=$(sort -u "$edges" | tsort 2>&1 >/dev/null); then
    fail "the folders' includes go round in a circle: $(echo "$loops" | sed -n 's/^tsort: //p' |
                                                         grep -v 'contains a loop' | tr '\n' ' ')"
fi

# --- no circle among the files of a folder (issue 33) ------------------------------------------
# In a folder, X_priv.h (beside X.c) declares what X.c offers the folder's other files, and a
# file includes the private headers of the files it calls (the compiler refuses a call of a
# function it has no declaration of): its includes show what it depends on. They must not go
# round in a circle, so that the files of a folder read as a pipeline, bottom to top. The
# folder's own private header (cache/cache_priv.h: the shared state) is no file's.
for d in $DIRS; do
    fedges=$(for f in "$d"/*.c "$d"/*.h; do
        [[ -e $f ]] || continue
        x=${f##*/}
        x=${x%.[ch]}
        x=${x%_priv}
        sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([a-z0-9_]*\)_priv\.h".*/\1/p' "$f" |
            while read -r y; do
                [[ $y != "$x" && $y != "$d" && -e $d/$y.c ]] && echo "$x $y"
            done
    done | sort -u)
    [[ -n $fedges ]] || continue
    if ! loops=$(tsort <<<"$fedges" 2>&1 >/dev/null); then
        fail "$d/: its files include each other's private headers in a circle: $(echo "$loops" |
                  sed -n 's/^tsort: //p' | grep -v 'contains a loop' | awk '!seen[$0]++' |
                  sed "s|^|$d/|" | tr '\n' ' ')"
    fi
done

# --- confinement of the libraries ---------------------------------------------------------
only_in() { # HEADER FILE...
    local hdr=$1; shift
    local allowed=" $* "
    for f in $(grep -l "#include <$hdr>" $(srcs) 2>/dev/null); do
        case $allowed in *" $f "*) ;; *) fail "$f includes <$hdr> (allowed only in: $*)" ;; esac
    done
}
only_in lmdb.h cache/index.c
only_in curl/curl.h backends/be_s3.c backends/be_s3_call.c backends/be_s3_parse.c \
    backends/be_s3_priv.h lib/range.c cmd/cli.c cmd/check_io.c cmd/check_read.c sig/sigv2.c peer/peer_http.c
only_in microhttpd.h http/server.c http/req.c http/req_mhd.h http/respond.c
# the parsers' libraries, each behind one file
only_in expat.h lib/xml.c
only_in jansson.h lib/json.c
# ring/ (the ring and membership) stands alone: libc, pthreads and zlib, its own headers
for f in ring/*.c ring/*.h; do
    grep -qE '#include "[a-z_]+/' "$f" && fail "$f includes a header of another folder"
done

# --- size: no source file over 1,200 lines, no function over 150 (issue 21) ---------------------
for f in $(srcs); do
    n=$(wc -l < "$f")
    [ "$n" -le 1200 ] || fail "$f has $n lines (at most 1200: split it along its seams)"
done
long=$(for f in $(srcs); do
    awk -v F="$f" '/^\{/ { s = NR } /^\}/ { if (s && NR - s - 1 > 150) print F ":" s ": a function of " NR - s - 1 " lines"; s = 0 }' "$f"
done)
[ -z "$long" ] || { echo "$long"; fail "functions over 150 lines above"; }

# --- banned functions ---------------------------------------------------------------------
banned='\b(sprintf|strcpy|strcat|strtok|atoi|gets|gmtime|localtime)\s*\('
if grep -nE "$banned" $(srcs) | grep -vE 'snprintf|vsnprintf|strtok_r|gmtime_r|localtime_r'; then
    fail "banned functions above"
fi
# --- format: clang-format 14 with .clang-format (HACKING.md, Formatting) -------------------------
# Every C file of the layers, tests/ and bench/ must come out of clang-format unchanged, except
# those listed in tests/lint/clang-format-allow (files written before .clang-format, not
# reformatted so as not to collide with work in flight). A listed file that conforms, or no
# longer exists, must come off the list. Other clang-format versions format differently: the
# check runs with version 14 only and says so otherwise.
allow=tests/lint/clang-format-allow
if [[ -f .clang-format ]]; then
    cfv=$(clang-format --version 2>/dev/null | sed -n 's/.*version \([0-9]*\)\..*/\1/p')
    if [[ $cfv != 14 ]]; then
        echo "lint: format not checked: needs clang-format 14 (found: ${cfv:-none})"
    else
        declare -A listed
        if [[ -f $allow ]]; then
            while read -r f _; do
                [[ -z $f || $f == \#* ]] && continue
                listed[$f]=1
                [[ -e $f ]] || fail "$allow lists $f, which does not exist: take it off"
            done < "$allow"
        fi
        files=$( { srcs; ls tests/*/*.c tests/*/*.h bench/*.c 2>/dev/null; } | sort -u)
        # one clang-format for all: it names each file that would change
        unformatted=$(clang-format --dry-run $files 2>&1 |
                      sed -n 's/^\([^:]*\.[ch]\):[0-9]*:[0-9]*: warning: code should be clang-formatted.*/\1/p' | sort -u)
        declare -A changes
        for f in $unformatted; do changes[$f]=1; done
        for f in $files; do
            if [[ -n ${changes[$f]+x} && -z ${listed[$f]+x} ]]; then
                fail "$f is not formatted as .clang-format says (make format, or: clang-format -i $f)"
            elif [[ -z ${changes[$f]+x} && -n ${listed[$f]+x} ]]; then
                fail "$f is formatted now: take it off $allow"
            fi
        done
    fi
fi

# --- commit subjects: at most 72 characters, from 4d6c55b on (HACKING.md, Commits) -----------------
# Earlier history is left as it is; a copy without that commit (a tarball, a shallow clone)
# skips the check.
SUBJECT_BASE=4d6c55b
if git rev-parse -q --verify "$SUBJECT_BASE^{commit}" >/dev/null 2>&1; then
    while IFS=$'\t' read -r h s; do
        n=$(LC_ALL=C.UTF-8 bash -c 'printf %s "${#1}"' _ "$s")
        (( n <= 72 )) || fail "commit $h: subject of $n characters (at most 72): $s"
    done < <(git log --format='%h%x09%s' "$SUBJECT_BASE..HEAD")
fi

# --- links between the documentation pages --------------------------------------------------
if [[ -x tests/tools/doclinks.py ]] && git rev-parse --git-dir >/dev/null 2>&1; then
    /usr/bin/python3 tests/tools/doclinks.py || fail "broken links in the documentation above"
fi

[ $bad -eq 0 ] && echo "lint: ok"
exit $bad
