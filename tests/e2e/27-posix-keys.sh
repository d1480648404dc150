#!/usr/bin/env bash
# 27-posix-keys: the file backend's key rules through real clients (awscli, rclone, s3cmd).
# Keys "a" and "a/b" coexist as in S3: put in both orders, get, head, list with and without a
# delimiter, pages of one key across "a" < "a-b" < "a.txt" < "a/" < "a0", delete each and the
# other survives. Files placed by other tools are served, also when a key nests them.
# Symlinks: escapes from the store are 404 and unlisted by default, served and listed (linked
# directories walked) with --follow-symlinks; a DELETE never answers success while the object stays readable; the ETag
# xattr is never written on a file outside the store.
. "$(dirname "$0")/lib.sh"
CT=120
OUT=$T/outside # files outside the store, reached through symlinks

# body_eq LABEL FILE WANT — FILE holds exactly the string WANT
body_eq() {
    [[ $(cat "$2") == "$3" ]] || { echo "$1: got '$(head -c 200 "$2")', want '$3'"; return 1; }
}

# get_is KEYPATH WANT — a signed GET of /KEYPATH answers 200 with body WANT
get_is() {
    local code
    code=$(s3req -o "$T/g.out" "/$1") || true
    [[ $code == 200 ]] || { echo "GET /$1: HTTP $code: $(head -c 300 "$T/g.out")"; return 1; }
    body_eq "GET /$1" "$T/g.out" "$2"
}

# status_is METHOD KEYPATH STATUS [CODE] — a signed request answers STATUS (and S3 error CODE)
status_is() {
    local code
    code=$(s3req -X "$1" -o "$T/s.out" "/$2") || true
    [[ $code == "$3" ]] || { echo "$1 /$2: HTTP $code, want $3: $(head -c 300 "$T/s.out")"; return 1; }
    if [[ -n ${4:-} ]]; then
        [[ $(xml_code "$T/s.out") == "$4" ]] || { echo "$1 /$2: code '$(xml_code "$T/s.out")', want $4"; return 1; }
    fi
}

# aws_list BUCKET [ARGS...] — list-objects-v2 (awscli follows the pages) as "k1 k2 ... | p1 p2"
aws_list() {
    local b=$1
    shift
    awsc s3api list-objects-v2 --bucket "$b" "$@" --output json >"$T/l.json" || return 1
    $PY -c '
import json, sys
d = json.load(open(sys.argv[1])) if open(sys.argv[1]).read().strip() else {}
print((" ".join(o["Key"] for o in d.get("Contents", [])) + " | " +
       " ".join(p["Prefix"] for p in d.get("CommonPrefixes", []))).strip())' "$T/l.json"
}

# aws_list_v1 BUCKET [ARGS...] — the same with list-objects (markers)
aws_list_v1() {
    local b=$1
    shift
    awsc s3api list-objects --bucket "$b" "$@" --output json >"$T/l.json" || return 1
    $PY -c '
import json, sys
d = json.load(open(sys.argv[1])) if open(sys.argv[1]).read().strip() else {}
print((" ".join(o["Key"] for o in d.get("Contents", [])) + " | " +
       " ".join(p["Prefix"] for p in d.get("CommonPrefixes", []))).strip())' "$T/l.json"
}

list_requests() { grep -cE "access .* GET ListObjects(V2)? /$1 " "$S3_LOG"; }

ALL="a a-b a.txt a/b a0 c c/d"
ALL_D="a a-b a.txt a0 c | a/ c/"

# --- awscli ----------------------------------------------------------------------------------
B=awsb
t_aws_put_both_orders() {
    printf 'key a' >"$T/a" && printf 'key a/b' >"$T/ab" && printf 'key c' >"$T/c" &&
        printf 'key c/d' >"$T/cd" && printf x >"$T/x" || return 1
    awsc s3 cp "$T/a" "s3://$B/a" >/dev/null || return 1
    awsc s3 cp "$T/ab" "s3://$B/a/b" >/dev/null || return 1    # file first, then under it
    awsc s3 cp "$T/cd" "s3://$B/c/d" >/dev/null || return 1
    awsc s3 cp "$T/c" "s3://$B/c" >/dev/null || return 1       # directory first
    local k
    for k in a-b a.txt a0; do awsc s3 cp "$T/x" "s3://$B/$k" >/dev/null || return 1; done
    for k in a a/b c c/d; do
        awsc s3 cp "s3://$B/$k" "$T/got" >/dev/null || return 1
        body_eq "aws s3 cp s3://$B/$k" "$T/got" "key $k" || return 1
    done
    [[ -f $S3_STORE/$B/a/.s3cached-obj && -f $S3_STORE/$B/c/.s3cached-obj ]] ||
        { echo "layout: no a/.s3cached-obj or c/.s3cached-obj"; ls -laR "$S3_STORE/$B"; return 1; }
}

t_aws_head() {
    awsc s3api head-object --bucket "$B" --key a --output json >"$T/h.json" || return 1
    grep -q '"ContentLength": 5' "$T/h.json" || { cat "$T/h.json"; return 1; }
    grep -q "$(printf 'key a' | md5sum | cut -c1-32)" "$T/h.json" || { echo "ETag:"; cat "$T/h.json"; return 1; }
    awsc s3api head-object --bucket "$B" --key a/b --output json >"$T/h.json" || return 1
    grep -q '"ContentLength": 7' "$T/h.json" || { cat "$T/h.json"; return 1; }
}

t_aws_list() {
    expect_eq "list-objects-v2" "$(aws_list $B)" "$ALL |" || return 1
    expect_eq "list-objects-v2 --delimiter /" "$(aws_list $B --delimiter /)" "$ALL_D" || return 1
    expect_eq "list-objects-v2 --prefix a --delimiter /" "$(aws_list $B --prefix a --delimiter /)" \
        "a a-b a.txt a0 | a/" || return 1
    expect_eq "list-objects-v2 --prefix a/ --delimiter /" "$(aws_list $B --prefix a/ --delimiter /)" \
        "a/b |" || return 1
    expect_eq "list-objects-v2 --start-after a" "$(aws_list $B --start-after a)" \
        "a-b a.txt a/b a0 c c/d |"
}

t_aws_pages() {
    local n0 n1
    n0=$(list_requests $B)
    expect_eq "list-objects-v2 --page-size 1" "$(aws_list $B --page-size 1)" "$ALL |" || return 1
    n1=$(list_requests $B)
    ((n1 - n0 >= 7)) || { echo "7 keys in pages of 1 took $((n1 - n0)) list requests"; return 1; }
    expect_eq "list-objects-v2 --page-size 1 --delimiter /" \
        "$(aws_list $B --page-size 1 --delimiter /)" "$ALL_D" || return 1
    expect_eq "list-objects --page-size 1 (markers)" "$(aws_list_v1 $B --page-size 1)" "$ALL |" || return 1
    expect_eq "list-objects --page-size 1 --delimiter /" \
        "$(aws_list_v1 $B --page-size 1 --delimiter /)" "$ALL_D" || return 1
    expect_eq "list-objects --page-size 2 --delimiter /" \
        "$(aws_list_v1 $B --page-size 2 --delimiter /)" "$ALL_D"
}

t_aws_delete_each() {
    awsc s3 rm "s3://$B/a" >/dev/null || return 1
    status_is HEAD "$B/a" 404 || return 1
    get_is "$B/a/b" "key a/b" || return 1
    awsc s3 cp "$T/a" "s3://$B/a" >/dev/null || return 1
    awsc s3 rm "s3://$B/a/b" >/dev/null || return 1
    status_is HEAD "$B/a/b" 404 || return 1
    get_is "$B/a" "key a" || return 1
    expect_eq "list after deleting a/b" "$(aws_list $B --delimiter /)" "a a-b a.txt a0 c | c/" || return 1
    awsc s3 rm "s3://$B/c/d" >/dev/null || return 1
    get_is "$B/c" "key c" || return 1
    awsc s3 rm "s3://$B/c" >/dev/null || return 1
    status_is GET "$B/c" 404 NoSuchKey || return 1
    absent "$S3_STORE/$B/c"
}

t_aws_multipart_nested() {
    # a multipart upload (awscli: 9 MiB in 8 MiB parts) of a key beside keys under it, and a
    # multipart-made file nested by a later key under its name
    mkfile "$T/big" 9M && printf 'under' >"$T/u" || return 1
    awsc s3 cp "$T/u" "s3://$B/m/x" >/dev/null || return 1
    awsc s3 cp "$T/big" "s3://$B/m" >/dev/null || return 1
    awsc s3 cp "$T/big" "s3://$B/n" >/dev/null || return 1
    awsc s3 cp "$T/u" "s3://$B/n/x" >/dev/null || return 1
    s3req -X HEAD -D "$T/mh" "/$B/m" >/dev/null
    expect_match "ETag of the multipart m" "$(hdr "$T/mh" etag)" '^"[0-9a-f]{32}-2"$' || return 1
    local k
    for k in m n; do
        awsc s3 cp "s3://$B/$k" "$T/got" >/dev/null || return 1
        sha_eq "$T/big" "$T/got" || return 1
        sha_eq "$T/big" "$S3_STORE/$B/$k/.s3cached-obj" || return 1
        get_is "$B/$k/x" "under" || return 1
    done
    awsc s3 rm "s3://$B/m" >/dev/null && awsc s3 rm "s3://$B/m/x" >/dev/null &&
        awsc s3 rm "s3://$B/n" >/dev/null && awsc s3 rm "s3://$B/n/x" >/dev/null || return 1
    absent "$S3_STORE/$B/m" && absent "$S3_STORE/$B/n"
}

# --- rclone ----------------------------------------------------------------------------------
R=rcb
t_rclone_both_orders() {
    printf 'key a' >"$T/a" && printf 'key a/b' >"$T/ab" && printf 'key c' >"$T/c" &&
        printf 'key c/d' >"$T/cd" && printf x >"$T/x" || return 1
    rclonec copyto "$T/a" "s3c:$R/a" || return 1
    rclonec copyto "$T/ab" "s3c:$R/a/b" || return 1
    rclonec copyto "$T/cd" "s3c:$R/c/d" || return 1
    rclonec copyto "$T/c" "s3c:$R/c" || return 1
    local k
    for k in a-b a.txt a0; do rclonec copyto "$T/x" "s3c:$R/$k" || return 1; done
    for k in a a/b c c/d; do
        rclonec cat "s3c:$R/$k" >"$T/got" || return 1
        body_eq "rclone cat $k" "$T/got" "key $k" || return 1
    done
    rclonec lsjson --stat "s3c:$R/a" >"$T/st.json" || return 1
    grep -q '"Size": *5,' "$T/st.json" || { echo "rclone lsjson --stat a:"; cat "$T/st.json"; return 1; }
}

t_rclone_list() {
    local out
    # rclone shows the key "a" and the directory "a/" side by side (in an order of its own:
    # sorted here)
    out=$(rclonec lsf "s3c:$R" | LC_ALL=C sort | tr '\n' ' ') || return 1
    expect_eq "rclone lsf" "$out" "a a-b a.txt a/ a0 c c/ " || return 1
    out=$(rclonec lsf -R --files-only --s3-list-chunk 1 "s3c:$R" | LC_ALL=C sort | tr '\n' ' ') ||
        return 1
    expect_eq "rclone lsf -R --files-only --s3-list-chunk 1" "$out" "a a-b a.txt a/b a0 c c/d " || return 1
    out=$(rclonec lsf --s3-list-chunk 1 "s3c:$R" | LC_ALL=C sort | tr '\n' ' ') || return 1
    expect_eq "rclone lsf --s3-list-chunk 1" "$out" "a a-b a.txt a/ a0 c c/ "
}

t_rclone_delete_each() {
    rclonec deletefile "s3c:$R/a/b" || return 1
    rclonec cat "s3c:$R/a" >"$T/got" || return 1
    body_eq "rclone cat a after deleting a/b" "$T/got" "key a" || return 1
    rclonec deletefile "s3c:$R/c" || return 1
    rclonec cat "s3c:$R/c/d" >"$T/got" || return 1
    body_eq "rclone cat c/d after deleting c" "$T/got" "key c/d" || return 1
    status_is HEAD "$R/c" 404 || return 1
    status_is HEAD "$R/a/b" 404
}

# --- s3cmd -----------------------------------------------------------------------------------
S=s3cb
t_s3cmd_both_orders() {
    printf 'key a' >"$T/a" && printf 'key a/b' >"$T/ab" && printf 'key c' >"$T/c" &&
        printf 'key c/d' >"$T/cd" || return 1
    s3cmdc put "$T/a" "s3://$S/a" >/dev/null || return 1
    s3cmdc put "$T/ab" "s3://$S/a/b" >/dev/null || return 1
    s3cmdc put "$T/cd" "s3://$S/c/d" >/dev/null || return 1
    s3cmdc put "$T/c" "s3://$S/c" >/dev/null || return 1
    local k
    for k in a a/b c c/d; do
        s3cmdc get --force "s3://$S/$k" "$T/got" >/dev/null || return 1
        body_eq "s3cmd get $k" "$T/got" "key $k" || return 1
    done
    s3cmdc info "s3://$S/a" >"$T/info" || return 1
    grep -q 'File size: *5$' "$T/info" || { cat "$T/info"; return 1; }
}

t_s3cmd_list() {
    local out
    out=$(s3cmdc ls "s3://$S/" | awk '{print $NF}' | tr '\n' ' ') || return 1
    # s3cmd prints the common prefixes (DIR) first, then the keys
    expect_eq "s3cmd ls" "$out" "s3://$S/a/ s3://$S/c/ s3://$S/a s3://$S/c " || return 1
    out=$(s3cmdc ls -r "s3://$S/" | awk '{print $NF}' | tr '\n' ' ') || return 1
    expect_eq "s3cmd ls -r" "$out" "s3://$S/a s3://$S/a/b s3://$S/c s3://$S/c/d "
}

t_s3cmd_delete_each() {
    s3cmdc del "s3://$S/a" >/dev/null || return 1
    s3cmdc get --force "s3://$S/a/b" "$T/got" >/dev/null || return 1
    body_eq "s3cmd get a/b after deleting a" "$T/got" "key a/b" || return 1
    s3cmdc del "s3://$S/c/d" >/dev/null || return 1
    s3cmdc get --force "s3://$S/c" "$T/got" >/dev/null || return 1
    body_eq "s3cmd get c after deleting c/d" "$T/got" "key c" || return 1
    out=$(s3cmdc ls -r "s3://$S/" | awk '{print $NF}' | tr '\n' ' ') || return 1
    expect_eq "s3cmd ls -r after the deletes" "$out" "s3://$S/a/b s3://$S/c "
}

# --- files placed by other tools -------------------------------------------------------------
F=toolb
t_foreign_served() {
    mkdir -p "$S3_STORE/$F/ds/sub" && printf 'by cp' >"$S3_STORE/$F/ds/one.txt" &&
        printf 'by tar' >"$S3_STORE/$F/ds/sub/two.bin" && printf 'plain' >"$S3_STORE/$F/lone" || return 1
    get_is "$F/ds/one.txt" "by cp" || return 1
    get_is "$F/ds/sub/two.bin" "by tar" || return 1
    # a key written under another tool's file nests it; both are served
    printf 'under' >"$T/u" || return 1
    awsc s3 cp "$T/u" "s3://$F/lone/under" >/dev/null || return 1
    get_is "$F/lone" "plain" || return 1
    get_is "$F/lone/under" "under" || return 1
    # and a key of a tool's directory's name goes inside it
    printf 'dir key' >"$T/dk" || return 1
    awsc s3 cp "$T/dk" "s3://$F/ds" >/dev/null || return 1
    get_is "$F/ds" "dir key" || return 1
    get_is "$F/ds/one.txt" "by cp" || return 1
    expect_eq "listing of tool files" "$(aws_list $F)" "ds ds/one.txt ds/sub/two.bin lone lone/under |"
}

# --- symlinks --------------------------------------------------------------------------------
L=linkb
setup_links() {
    mkdir -p "$OUT/dir" "$S3_STORE/$L/in" || return 1
    printf 'outside bytes' >"$OUT/data.bin" && printf 'outside dir file' >"$OUT/dir/f.txt" &&
        printf 'inside' >"$S3_STORE/$L/in/real.txt" || return 1
    ln -s "$OUT/data.bin" "$S3_STORE/$L/abs" &&
        ln -s "../../outside/data.bin" "$S3_STORE/$L/rel" &&
        ln -s "$OUT/dir" "$S3_STORE/$L/outdir" &&
        ln -s "in/real.txt" "$S3_STORE/$L/inlink" &&
        ln -s "in" "$S3_STORE/$L/indir"
}

no_xattr_outside() {
    $PY - "$OUT/data.bin" "$OUT/dir/f.txt" "$S3_STORE/$L/in/real.txt" <<'EOF'
import errno, os, sys
bad = []
for p in sys.argv[1:3]:
    try:
        os.getxattr(p, "user.s3cached", follow_symlinks=False)
        bad.append(p)
    except OSError as e:
        if e.errno not in (errno.ENODATA, errno.ENOTSUP):
            raise
if bad:
    sys.exit("xattr written outside the store: %s" % bad)
try:  # the same reads stamp a file inside: the check above could have failed
    os.getxattr(sys.argv[3], "user.s3cached")
except OSError as e:
    sys.exit("no xattr on the inside file either (%s): this check proves nothing here" % e)
EOF
}

t_links_default() {
    status_is GET "$L/abs" 404 NoSuchKey || return 1
    status_is GET "$L/rel" 404 NoSuchKey || return 1
    status_is HEAD "$L/outdir/f.txt" 404 || return 1
    get_is "$L/inlink" "inside" || return 1
    get_is "$L/indir/real.txt" "inside" || return 1
    expect_eq "listing without --follow-symlinks" "$(aws_list $L)" "in/real.txt inlink |" || return 1
    expect_eq "listing under a directory link out" "$(aws_list $L --prefix outdir/)" "|" || return 1
    # nothing readable, nothing deleted: 204 and the linked file stays
    status_is DELETE "$L/outdir/f.txt" 204 || return 1
    [[ -f $OUT/dir/f.txt ]] || { echo "DELETE through a link removed the file outside"; return 1; }
    # readable through a link inside the store: the DELETE is refused, the object stays
    status_is DELETE "$L/indir/real.txt" 403 AccessDenied || return 1
    get_is "$L/indir/real.txt" "inside"
}

t_links_follow() {
    get_is "$L/abs" "outside bytes" || return 1
    get_is "$L/rel" "outside bytes" || return 1
    get_is "$L/outdir/f.txt" "outside dir file" || return 1
    awsc s3api head-object --bucket "$L" --key abs --output json >"$T/h.json" || return 1
    grep -q "$(printf 'outside bytes' | md5sum | cut -c1-32)" "$T/h.json" || { cat "$T/h.json"; return 1; }
    expect_eq "listing with --follow-symlinks" "$(aws_list $L)" \
        "abs in/real.txt indir/real.txt inlink outdir/f.txt rel |" || return 1
    expect_eq "listing with --follow-symlinks, delimiter /" "$(aws_list $L --delimiter /)" \
        "abs inlink rel | in/ indir/ outdir/" || return 1
    rclonec cat "s3c:$L/abs" >"$T/got" || return 1
    body_eq "rclone cat of a link out" "$T/got" "outside bytes"
}

t_links_delete_follow() {
    # through a directory link: refused while readable, never a 204 with the object still there
    status_is DELETE "$L/outdir/f.txt" 403 AccessDenied || return 1
    get_is "$L/outdir/f.txt" "outside dir file" || return 1
    # the key is the link: DELETE removes the link, never the file it points to
    awsc s3 rm "s3://$L/abs" >/dev/null || return 1
    status_is GET "$L/abs" 404 NoSuchKey || return 1
    [[ -L $S3_STORE/$L/abs ]] && { echo "the link is still there"; return 1; }
    [[ $(cat "$OUT/data.bin") == "outside bytes" ]] || { echo "the linked file changed"; return 1; }
    get_is "$L/rel" "outside bytes"
}

mkdir -p "$S3_STORE/$B" "$S3_STORE/$R" "$S3_STORE/$S" "$S3_STORE/$F" "$S3_STORE/$L"
start_server
check "awscli: a then a/b, c/d then c: all four read back" t_aws_put_both_orders
check "awscli: head-object of a and a/b" t_aws_head
check "awscli: list with and without delimiter, prefixes, start-after" t_aws_list
check "awscli: pages of 1 and 2 (v2 tokens, v1 markers) across a, a-b, a.txt, a/, a0" t_aws_pages
check "awscli: delete each, the other survives" t_aws_delete_each
check "awscli: multipart upload beside keys under it, and nested by a later key" t_aws_multipart_nested
check "rclone: both orders, cat, stat" t_rclone_both_orders
check "rclone: lsf, lsf -R in chunks of 1" t_rclone_list
check "rclone: deletefile each, the other survives" t_rclone_delete_each
check "s3cmd: both orders, get, info" t_s3cmd_both_orders
check "s3cmd: ls, ls -r" t_s3cmd_list
check "s3cmd: del each, the other survives" t_s3cmd_delete_each
check "files placed by other tools are served, also once nested" t_foreign_served
check "symlink setup" setup_links
check "default: links out of the store are 404 and unlisted, links inside served" t_links_default
check "default: no ETag xattr written outside the store" no_xattr_outside
stop_server
start_server --follow-symlinks
check "--follow-symlinks: links out served (GET, HEAD, listing, rclone)" t_links_follow
check "--follow-symlinks: DELETE refused through a dir link, removes a link key only" t_links_delete_follow
check "--follow-symlinks: no ETag xattr written outside the store" no_xattr_outside
stop_server
