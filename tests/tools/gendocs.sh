#!/usr/bin/env bash
# make docs: what is generated from the option table (CONF_TABLE in lib/conf.h), written with
# the built binary: config/s3cached.conf whole (`s3cached sample-config`), and the lines
# between the GENERATED markers of docs/configuration.md (`s3cached help --markdown`) and
# docs/s3cached.1 (`s3cached help --man`); the rest of those pages is written by hand.
# tests/unit/test_conf.c fails when a committed copy differs from what the table gives.
#   tests/tools/gendocs.sh build/s3cached
set -euo pipefail
bin=$(realpath "${1:?usage: gendocs.sh S3CACHED_BIN}")
cd "$(dirname "$0")/../.."

# splice FILE BEGIN END HELP_FLAG: replaces the lines between the line starting with BEGIN and
# the line starting with END by the output of `s3cached help HELP_FLAG`.
splice() {
    local file=$1 begin=$2 end=$3 flag=$4 gen out
    gen=$(mktemp) out=$(mktemp)
    "$bin" help "$flag" > "$gen"
    # (through the environment: awk -v would read the backslash of roff's .\" as an escape)
    B=$begin E=$end G=$gen awk '
        BEGIN { b = ENVIRON["B"]; e = ENVIRON["E"]; gen = ENVIRON["G"] }
        index($0, b) == 1 && !seen { print; while ((getline l < gen) > 0) print l; skip = 1; seen = 1; next }
        skip && index($0, e) == 1 { skip = 0; ended = 1 }
        !skip { print }
        END { exit !(seen && ended) }' "$file" > "$out" ||
        { rm -f "$gen" "$out"; echo "gendocs: $file lacks its \"$begin\" ... \"$end\" lines" >&2; exit 1; }
    cat "$out" > "$file"
    rm -f "$gen" "$out"
}

"$bin" sample-config > config/s3cached.conf
splice docs/configuration.md '<!-- BEGIN GENERATED' '<!-- END GENERATED' --markdown
splice docs/s3cached.1 '.\" BEGIN GENERATED' '.\" END GENERATED' --man
echo "gendocs: config/s3cached.conf, docs/configuration.md, docs/s3cached.1 written"
