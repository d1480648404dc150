#!/usr/bin/env bash
# tests/deploy/k8s_schema.sh [K8S_DIR]: the Kubernetes manifests checked against the
# Kubernetes API schema, offline. kubeconform/kubeval are not in Debian and the JSON
# schemas cannot be fetched here, so the schema comes from the npm package
# kubernetes-models (TypeScript interfaces + ajv validators generated from the
# Kubernetes OpenAPI spec), installed into tests/deploy/k8s-schema/ by `make deps-test`:
#   1. tsc --strict over every document as a typed object literal: unknown/misspelt
#      fields anywhere, wrong types, missing required fields;
#   2. the package's ajv validators (formats, enums, int-or-string, ...).
# Exit 0: valid; 1: invalid; 77: skipped (node or the package missing).
set -u
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
dir=${1:-$repo/deploy/k8s}
NM=$here/k8s-schema/node_modules
PY=/usr/bin/python3

command -v node >/dev/null || { echo "skip: node not installed (apt-get install nodejs npm)"; exit 77; }
if [[ ! -d $NM/kubernetes-models || ! -x $NM/.bin/tsc ]]; then
    echo "skip: kubernetes-models/typescript not installed in tests/deploy/k8s-schema (make deps-test installs them)"
    exit 77
fi
"$PY" -c 'import yaml' 2>/dev/null || { echo "skip: $PY has no yaml module (apt-get install python3-yaml)"; exit 77; }
mapfile -t files < <(find "$dir" -maxdepth 1 \( -name '*.yaml' -o -name '*.yml' \) | sort)
[[ ${#files[@]} -gt 0 ]] || { echo "no manifests in $dir"; exit 1; }

t=$(mktemp -d "${TMPDIR:-/tmp}/s3c-k8s-schema.XXXXXX")
trap 'rm -rf "$t"' EXIT
ln -s "$NM" "$t/node_modules"
rc=0
"$PY" "$here/k8s_schema.py" ts "${files[@]}" >"$t/manifests.ts" || exit 1
if ! timeout 120 node "$NM/typescript/bin/tsc" --noEmit --strict --skipLibCheck --target es2022 \
        --module nodenext --moduleResolution nodenext "$t/manifests.ts" >"$t/tsc.out" 2>&1; then
    echo "tsc: the manifests do not match the Kubernetes API types:"
    # point at the document: the line of the nearest "// FILE, document N" above each error
    while IFS= read -r l; do
        ln=$(sed -n 's/^[^(]*(\([0-9]*\),.*/\1/p' <<<"$l")
        where=
        [[ -n $ln ]] && where=$(head -n "$ln" "$t/manifests.ts" | grep '^// ' | tail -1 | cut -c4-)
        echo "  ${where:+$where: }${l#*manifests.ts}"
    done <"$t/tsc.out"
    rc=1
fi
if ! "$PY" "$here/k8s_schema.py" json "${files[@]}" | timeout 60 node "$here/k8s-schema/validate.mjs" >"$t/ajv.out" 2>&1; then
    echo "schema validators:"
    sed 's/^/  /' "$t/ajv.out"
    rc=1
fi
[[ $rc -eq 0 ]] && echo "k8s schema: $(grep -c '^export const' "$t/manifests.ts") documents match the Kubernetes API ($(tail -1 "$t/ajv.out"))"
exit $rc
