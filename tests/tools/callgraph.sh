#!/usr/bin/env bash
# tests/tools/callgraph.sh OBJDIR: who calls whom among the objects of one folder, from nm: one
# line "A -> B (N): symbols" for each pair of files where A.o uses N symbols that B.o defines,
# then the circles, if any (tsort). E.g. tests/tools/callgraph.sh build/obj/cache after a
# build; make lint checks the same order through the private headers the files include.
set -u
d=${1:?usage: callgraph.sh OBJDIR}
declare -A def
for o in "$d"/*.o; do
    b=$(basename "$o" .o)
    for s in $(nm --defined-only -g "$o" | awk '$2 ~ /[TDBR]/ {print $3}'); do def[$s]=$b; done
done
edges=$(for o in "$d"/*.o; do
    b=$(basename "$o" .o)
    for s in $(nm -u "$o" | awk '{print $2}'); do
        t=${def[$s]:-}
        [[ -n $t && $t != "$b" ]] && echo "$b $t $s"
    done
done | sort)
[[ -n $edges ]] || exit 0 # no calls between its objects
awk '{k = $1 " -> " $2; a[k] = a[k] " " $3; n[k]++}
     END {for (k in a) print k " (" n[k] "):" a[k]}' <<<"$edges" | sort
if ! loops=$(awk '{print $1, $2}' <<<"$edges" | tsort 2>&1 >/dev/null); then
    echo "circles:"
    echo "$loops" | sed -n 's/^tsort: //p' | grep -v 'contains a loop'
    exit 1
fi
