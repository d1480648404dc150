#!/usr/bin/env bash
# tests/lint/test_lint.sh: the layering lint (tests/lint.sh) must fail on what it forbids. The
# tree's sources are copied to a temp dir; the copy as it is must pass; then, one at a time,
# a deliberate offence is written into the copy and the lint must fail with a line naming the
# file. Prints a tally; exits 1 if any check failed.
set -u
repo=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d /tmp/test_lint.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
pass=0
failed=0
dirs=$(sed -n 's/^RANKS="\(.*\)"/\1/p' "$repo/tests/lint.sh" | tr ' ' '\n' | sed 's/:.*//')

fresh() { # a pristine copy of the sources and the lint in $tmp/t; `fresh format`: with the
          # format check (.clang-format and its allowlist), which the other cases leave out
          # for time
    rm -rf "$tmp/t"
    mkdir -p "$tmp/t/tests"
    for d in $dirs; do cp -a "$repo/$d" "$tmp/t/$d"; done
    cp "$repo/tests/lint.sh" "$tmp/t/tests/lint.sh"
    [[ ${1:-} == format ]] || return 0
    # the format check: .clang-format, and the allowlist's entries that the copy holds
    cp "$repo/.clang-format" "$tmp/t/.clang-format"
    mkdir -p "$tmp/t/tests/lint"
    while read -r f rest; do
        [[ -z $f || $f == \#* || -e $tmp/t/$f ]] && echo "$f${rest:+ $rest}"
    done < "$repo/tests/lint/clang-format-allow" > "$tmp/t/tests/lint/clang-format-allow"
}
ok() { echo "ok - $1"; pass=$((pass + 1)); }
nok() { echo "FAIL - $1"; failed=$((failed + 1)); }

# expect_fail NAME FILE WANT: the lint of the copy fails, and a line names FILE and WANT
expect_fail() {
    local name=$1 file=$2 want=$3 out rc
    out=$(bash "$tmp/t/tests/lint.sh" 2>&1)
    rc=$?
    if [[ $rc -ne 0 ]] && grep -F -- "$file" <<<"$out" | grep -qF -- "$want"; then
        ok "$name"
    else
        nok "$name (exit $rc; want a line naming $file with \"$want\"): $(tail -3 <<<"$out")"
    fi
}
# add_include FILE LINE: inserts LINE after the first #include of FILE
add_include() {
    sed -i "0,/^#include/s||$2\n#include|" "$tmp/t/$1"
}

fresh format
if out=$(bash "$tmp/t/tests/lint.sh" 2>&1); then ok "the tree as it is passes"; else nok "the tree as it is: $out"; fi

fresh
add_include lib/buf.c '#include "http/req.h"'
expect_fail "an upward include (lib/ includes http/)" lib/buf.c 'is above lib/'

fresh
add_include cache/fill.c '#include "objects/objects.h"'
expect_fail "an upward include (cache/ includes objects/)" cache/fill.c 'is above cache/'

fresh
add_include cache/evict.c '#include "backend.h"'
expect_fail "a bare include of another folder's header" cache/evict.c 'no header of cache/'

fresh
add_include s3/h_object.c '#include <microhttpd.h>'
expect_fail "<microhttpd.h> in s3/" s3/h_object.c '<microhttpd.h>'

fresh
add_include objects/object.c '#include <lmdb.h>'
expect_fail "<lmdb.h> outside cache/index.c" objects/object.c '<lmdb.h>'

fresh
add_include s3/h_bucket.c '#include "admin/admin.h"'
add_include admin/h_admin.c '#include "s3/s3.h"'
expect_fail "a circle between sibling folders (s3 <-> admin)" 'circle' 'admin'

fresh
add_include cache/table.c '#include "fill_priv.h"'
expect_fail "a circle among a folder's files (table.c includes fill_priv.h)" 'cache/table' \
    "private headers in a circle"

fresh
echo '#include "missource_priv.h"' >> "$tmp/t/cache/fillwin_priv.h"
echo '#include "fillwin_priv.h"' >> "$tmp/t/cache/missource.c"
expect_fail "a circle through a private header (fillwin <-> missource)" 'cache/fillwin' \
    "private headers in a circle"

fresh
add_include http/router.c '#include "backends/be_file_priv.h"'
expect_fail "another folder's private header" http/router.c 'private to backends/'

fresh
mkdir -p "$tmp/t/extra"
echo 'int extra(void);' > "$tmp/t/extra/extra.h"
expect_fail "a source in a folder with no rank" extra/extra.h 'no ranked folder'

fresh
add_include objects/warm.c '#include "lib/nonexistent.h"'
expect_fail "an include of a header that does not exist" objects/warm.c 'does not exist'

fresh
echo 'static void f(char *d) { strcpy(d, "x"); }' >> "$tmp/t/acct/fair.c"
expect_fail "a banned function" acct/fair.c 'strcpy'

fresh
{ echo 'static int g(int x)'; echo '{'; for i in $(seq 151); do echo "    x += $i;"; done
  echo '    return x;'; echo '}'; } >> "$tmp/t/acct/fair.c"
expect_fail "a function over 150 lines" acct/fair.c 'a function of 152 lines'

fresh
for i in $(seq 1201); do echo "/* line $i */"; done >> "$tmp/t/acct/ratelimit.h"
expect_fail "a file over 1,200 lines" acct/ratelimit.h 'lines (at most 1200'

if [[ $(clang-format --version 2>/dev/null) == *"version 14."* ]]; then
    fresh format
    printf 'static int  badly_formatted( void ){return 0;}\n' >> "$tmp/t/lib/hex.c"
    expect_fail "a C file clang-format would change" lib/hex.c 'not formatted as .clang-format'

    fresh format
    first=$(sed -n '/^[a-z]/{p;q;}' "$tmp/t/tests/lint/clang-format-allow")
    clang-format -i "$tmp/t/$first"
    expect_fail "an allowlisted file that conforms now" "$first" 'take it off'
else
    echo "skip - the format checks need clang-format 14"
fi

echo "lint self-test: $pass passed, $failed failed"
[[ $failed -eq 0 ]]
