#!/usr/bin/env bash
# tests/deploy/validate.sh: checks deploy/ without deploying anything (run by
# tests/e2e/85-deploy-validate.sh in `make test`, and by `make test-deploy`).
#   - systemd-analyze verify (and an offline `security` score) of the unit, ExecStart
#     pointed at the built binary;                       skipped without systemd-analyze
#   - yamllint of every YAML file in deploy/;             skipped without yamllint
#   - check_deploy.py: structure of the k8s manifests, compose.yaml, Dockerfile, unit,
#     nginx.conf and envoy.yaml, the peered (cluster mode) set-ups (python3-yaml), plus a
#     self-test that it rejects broken copies;            skipped without python3-yaml
#   - check_envoy_ring.py: the envoy.yaml settings ring/ring_envoy.c reproduces (ring
#     hash function and size, the hashed :path, no path rewriting), plus a self-test
#   - k8s_schema.sh: deploy/k8s against the Kubernetes API schema (npm kubernetes-models
#     + tsc, installed by make test-deploy), plus a self-test; skipped when not installed
#   - the placeholder secrets of k8s/secret.yaml, systemd/s3cached.env and the secrets/
#     .example files: `s3cached serve` refuses to start on each; skipped without the binary
#   - promtool check config of deploy/prometheus/prometheus.yml; skipped without promtool
#   - nginx -t of deploy/scale-out/nginx.conf (paths moved to a temp dir); skipped
#     without nginx
# Last line: "deploy-validate: N passed, N failed". Exit 0 when nothing failed.
set -u
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
BIN=${S3CACHED_BIN:-$repo/build/s3cached}
PY=/usr/bin/python3
D=$repo/deploy
P=0 F=0 S=0
T=$(mktemp -d "${TMPDIR:-/tmp}/s3c-deploy.XXXXXX")
trap 'rm -rf "$T"' EXIT

ok() { P=$((P + 1)); echo "ok   - $1"; }
bad() { F=$((F + 1)); echo "FAIL - $1"; shift; [[ $# -gt 0 ]] && printf '%s\n' "$@" | tail -n 25 | sed 's/^/       | /'; return 0; }
skip() { S=$((S + 1)); echo "skip - $1"; }
run() { # run NAME CMD... — ok when CMD exits 0
    local name=$1 out
    shift
    if out=$("$@" 2>&1); then ok "$name"; else bad "$name" "$out"; fi
}

# --- systemd ----------------------------------------------------------------------------
UNIT=$D/systemd/s3cached.service
if ! command -v systemd-analyze >/dev/null; then
    skip "systemd-analyze verify: systemd-analyze not installed"
elif [[ ! -f $UNIT ]]; then
    bad "deploy/systemd/s3cached.service exists"
else
    exe=$BIN
    [[ -x $exe ]] || exe=/bin/true
    mkdir -p "$T/unit"
    sed "s#/usr/local/bin/s3cached#$exe#g" "$UNIT" >"$T/unit/s3cached.service"
    out=$(timeout 60 systemd-analyze verify "$T/unit/s3cached.service" 2>&1)
    rc=$?
    # systemd-analyze prints warnings about the build host's own units; keep ours
    ours=$(grep -i 's3cached' <<<"$out" || true)
    if [[ $rc -eq 0 && -z $ours ]]; then
        ok "systemd-analyze verify s3cached.service"
    else
        bad "systemd-analyze verify s3cached.service (exit $rc)" "$out"
    fi
    sec=$(timeout 60 systemd-analyze security --offline=yes "$T/unit/s3cached.service" 2>&1 | tr -d '\r')
    score=$(sed -n 's/.*Overall exposure level for s3cached.service: \([0-9.]*\).*/\1/p' <<<"$sec")
    if [[ -z $score ]]; then
        skip "systemd-analyze security --offline: not supported here"
    elif awk -v s="$score" 'BEGIN { exit !(s <= 2.5) }'; then
        ok "systemd-analyze security: exposure $score (≤ 2.5)"
    else
        bad "systemd-analyze security: exposure $score > 2.5" "$(grep '✗' <<<"$sec" | head -20)"
    fi
fi

# --- YAML lint --------------------------------------------------------------------------
mapfile -t yamls < <(find "$D" -path "$D/grafana" -prune -o \( -name '*.yaml' -o -name '*.yml' \) -print | sort)
if command -v yamllint >/dev/null; then
    run "yamllint (${#yamls[@]} files: tests/deploy/yamllint.yaml)" \
        timeout 60 yamllint -s -c "$here/yamllint.yaml" "${yamls[@]}"
else
    skip "yamllint: not installed (apt-get install yamllint); python3-yaml parsing still runs"
fi

# --- structure --------------------------------------------------------------------------
if ! "$PY" -c 'import yaml' 2>/dev/null; then
    skip "structural checks: $PY has no yaml module (apt-get install python3-yaml)"
else
    out=$(timeout 60 "$PY" "$here/check_deploy.py" "$repo" "$BIN" 2>&1)
    echo "$out" | grep -v '^check_deploy:'
    line=$(grep -E '^check_deploy: [0-9]+ passed, [0-9]+ failed$' <<<"$out" | tail -1)
    if [[ -z $line ]]; then
        bad "check_deploy.py ran to the end" "$out"
    else
        P=$((P + $(sed -E 's/.*: ([0-9]+) passed.*/\1/' <<<"$line")))
        F=$((F + $(sed -E 's/.*, ([0-9]+) failed/\1/' <<<"$line")))
    fi

    # self-test: broken copies must be rejected (the checks can fail)
    mutate() { # mutate NAME FILE SED-EXPR — copy deploy/, break FILE, expect a FAIL line
        local name=$1 file=$2 expr=$3 m=$T/mut
        rm -rf "$m"
        mkdir -p "$m"
        cp -r "$D" "$m/deploy"
        ln -s "$repo/Makefile" "$m/Makefile"
        for x in include gateway cache backends config; do ln -s "$repo/$x" "$m/$x"; done
        sed -i "$expr" "$m/deploy/$file"
        if cmp -s "$m/deploy/$file" "$D/$file"; then
            bad "self-test: $name (the edit changed nothing)"
        elif timeout 60 "$PY" "$here/check_deploy.py" "$m" "$BIN" >"$T/mut.out" 2>&1; then
            bad "self-test: check_deploy.py rejects $name" "$(tail -5 "$T/mut.out")"
        else
            ok "self-test: check_deploy.py rejects $name"
        fi
    }
    mutate "a readiness probe on the wrong path" k8s/daemonset.yaml '0,/path: \/_\/health/s//path: \/healthz/'
    mutate "a misspelt Secret name" k8s/deployment.yaml 's/name: s3cached-keys/name: s3cached-key/'
    mutate "a volume mount without a volume" k8s/daemonset.yaml '0,/- name: keys$/s//- name: keyz/'
    mutate "an unknown S3CACHED_ option" k8s/configmap.yaml 's/S3CACHED_CACHE_SIZE:/S3CACHED_CACHE_SIZ:/'
    mutate "USER root in the runtime stage" Dockerfile 's/^USER s3cached:s3cached/USER root/'
    mutate "a COPY of a missing source" Dockerfile 's#^COPY cache/ cache/#COPY cachex/ cache/#'
    mutate "a source folder the build stage does not copy" Dockerfile '/^COPY peer\/ peer\//d'
    mutate "a source folder the .dockerignore keeps out" Dockerfile.dockerignore '/^!peer\/$/d'
    mutate "a unit without ProtectSystem=strict" systemd/s3cached.service 's/^ProtectSystem=strict/ProtectSystem=full/'
    mutate "nginx hashing on \$request_uri" scale-out/nginx.conf 's/hash \$uri consistent;/hash $request_uri;/'
    mutate "compose publishing beyond loopback" compose.yaml 's/"127.0.0.1:9000:9000"/"9000:9000"/'
    mutate "a --peers Service that is not headless" k8s/deployment.yaml '/clusterIP: None/d'
    mutate "--self from the node's IP, not the pod's" k8s/deployment.yaml 's/fieldPath: status.podIP/fieldPath: status.hostIP/'
    mutate "a compose gateway whose --self is another's" compose.yaml 's/S3CACHED_SELF: gateway-2:9000/S3CACHED_SELF: gateway:9000/'
    mutate "a peered gateway Prometheus does not scrape" prometheus/prometheus.yml 's/, "gateway-3:9000"//'

    # Envoy's ring as the gateways reproduce it (ring/ring_envoy.c): the settings it
    # assumes, and a self-test that a copy breaking each is rejected
    run "scale-out/envoy.yaml: the ring settings ring/ring_envoy.c reproduces (check_envoy_ring.py)" \
        timeout 60 "$PY" "$here/check_envoy_ring.py" "$D/scale-out/envoy.yaml"
    envoy_mutate() { # NAME SED-EXPR
        local m=$T/envoy-mut.yaml
        sed "$2" "$D/scale-out/envoy.yaml" >"$m"
        if cmp -s "$m" "$D/scale-out/envoy.yaml"; then
            bad "self-test: check_envoy_ring.py rejects $1 (the edit changed nothing)"
        elif timeout 60 "$PY" "$here/check_envoy_ring.py" "$m" >"$T/envoy-mut.out" 2>&1; then
            bad "self-test: check_envoy_ring.py rejects $1" "$(cat "$T/envoy-mut.out")"
        else
            ok "self-test: check_envoy_ring.py rejects $1"
        fi
    }
    envoy_mutate "MURMUR_HASH_2" 's/hash_function: XX_HASH/hash_function: MURMUR_HASH_2/'
    envoy_mutate "normalize_path: true" 's/normalize_path: false/normalize_path: true/'
    envoy_mutate "no minimum_ring_size" 's/minimum_ring_size: 1024/maximum_ring_size: 1024/'
    envoy_mutate "a query kept in the hashed path" 's/substitution: ""/substitution: "?"/'
fi

# --- placeholder secrets: the binary refuses what deploy/ ships ---------------------------
# k8s/secret.yaml, systemd/s3cached.env and secrets/*.example hold stand-ins anyone can read;
# `s3cached serve` must refuse to start on each, naming it (never serve with a public key).
if [[ ! -x $BIN ]]; then
    skip "placeholder secrets refused: no binary at $BIN (make)"
elif ! "$PY" -c 'import yaml' 2>/dev/null; then
    skip "placeholder secrets refused: $PY has no yaml module (apt-get install python3-yaml)"
else
    PH=$T/ph
    mkdir -p "$PH/store" "$PH/cache"
    "$PY" -c '
import sys, yaml
for d in yaml.safe_load_all(open(sys.argv[1])):
    if d and d.get("kind") == "Secret":
        for k, v in (d.get("stringData") or {}).items():
            with open("%s/k8s-%s" % (sys.argv[2], k), "w") as f:
                f.write(v if k == "credentials" else v.strip())
' "$D/k8s/secret.yaml" "$PH"
    printf 'AKVALIDATE0001 %s admin\n' "$(head -c 20 /dev/urandom | od -An -tx1 | tr -d ' \n')" \
        >"$PH/good-credentials"
    ph_port=$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    refused() { # NAME [VAR=VALUE...] -- [FLAG...]: serve exits at once, non-zero, naming a placeholder
        local name=$1 envs=() out rc
        shift
        while [[ $# -gt 0 && $1 != -- ]]; do envs+=("$1"); shift; done
        shift
        out=$(cd "$PH" && timeout 10 env -i PATH="$PATH" "${envs[@]}" "$BIN" serve \
            --listen "127.0.0.1:$ph_port" --cache-dir "$PH/cache" --backend "file://$PH/store" "$@" 2>&1)
        rc=$?
        if [[ $rc -ne 0 && $rc -ne 124 ]] && grep -qE 'placeholder|example key' <<<"$out"; then
            ok "placeholder secrets refused: $name"
        else
            bad "placeholder secrets refused: $name (exit $rc)" "$out"
        fi
    }
    refused "k8s/secret.yaml credentials (--credentials)" -- --credentials "$PH/k8s-credentials"
    for k in admin-token peer-secret backend-access-key backend-secret-key; do
        if [[ -f $PH/k8s-$k ]]; then
            v=S3CACHED_$(tr a-z- A-Z_ <<<"$k")
            refused "k8s/secret.yaml $k ($v)" "$v=$(cat "$PH/k8s-$k")" -- --credentials "$PH/good-credentials"
        else
            bad "placeholder secrets refused: k8s/secret.yaml has no $k"
        fi
    done
    mapfile -t sysenv < <(grep -E '^S3CACHED_[A-Z_]*=' "$D/systemd/s3cached.env")
    refused "systemd/s3cached.env as shipped" "${sysenv[@]}" -- --credentials "$PH/good-credentials"
    refused "secrets/credentials.example (--credentials)" -- --credentials "$D/secrets/credentials.example"
    refused "secrets/admin_token.example (S3CACHED_ADMIN_TOKEN)" \
        "S3CACHED_ADMIN_TOKEN=$(cat "$D/secrets/admin_token.example")" -- --credentials "$PH/good-credentials"
    read -r sak ssk <"$D/secrets/store_credentials.example"
    printf '%s %s admin\n' "$sak" "$ssk" >"$PH/store-credentials" # as compose's store writes it
    refused "secrets/store_credentials.example (the store's --credentials)" -- --credentials "$PH/store-credentials"
    refused "secrets/store_credentials.example (the gateway's backend keys)" \
        "S3CACHED_BACKEND_ACCESS_KEY=$sak" "S3CACHED_BACKEND_SECRET_KEY=$ssk" -- --credentials "$PH/good-credentials"
fi

# --- Kubernetes API schema (offline: npm kubernetes-models + tsc) -------------------------
out=$(timeout 180 "$here/k8s_schema.sh" "$D/k8s" 2>&1)
rc=$?
if [[ $rc -eq 77 ]]; then
    skip "k8s schema: ${out#skip: }"
elif [[ $rc -eq 0 ]]; then
    ok "${out##*$'\n'}"
    # self-test: the schema check sees misspelt fields and bad values
    schema_mutate() { # NAME FILE SED-EXPR
        local m=$T/k8smut
        rm -rf "$m"
        cp -r "$D/k8s" "$m"
        sed -i "$3" "$m/$2"
        if cmp -s "$m/$2" "$D/k8s/$2"; then
            bad "self-test: k8s schema rejects $1 (the edit changed nothing)"
        elif timeout 180 "$here/k8s_schema.sh" "$m" >"$T/k8smut.out" 2>&1; then
            bad "self-test: k8s schema rejects $1" "$(cat "$T/k8smut.out")"
        else
            ok "self-test: k8s schema rejects $1"
        fi
    }
    schema_mutate "a misspelt field (readinessProbe.httpGet.paht)" daemonset.yaml '0,/ path: \/_\/health/s// paht: \/_\/health/'
    schema_mutate "a string where an integer goes, an unknown Service type" deployment.yaml \
        's/periodSeconds: 5/periodSeconds: "5s"/; s/type: ClusterIP/type: ClusterIPP/'
else
    bad "k8s manifests match the Kubernetes API schema (tests/deploy/k8s_schema.sh)" "$out"
fi

# --- Prometheus config ------------------------------------------------------------------
PROM=$D/prometheus/prometheus.yml
if ! command -v promtool >/dev/null; then
    skip "promtool check config: promtool not installed (apt-get install prometheus)"
elif [[ -f $PROM ]]; then
    echo "test-token" >"$T/admin_token"
    sed "s#/run/secrets/admin_token#$T/admin_token#" "$PROM" >"$T/prometheus.yml"
    run "promtool check config deploy/prometheus/prometheus.yml" timeout 60 promtool check config "$T/prometheus.yml"
fi

# --- nginx -t ---------------------------------------------------------------------------
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
NG=$D/scale-out/nginx.conf
if [[ ! -x $NGINX ]]; then
    skip "nginx -t: nginx not installed"
elif [[ -f $NG ]]; then
    mkdir -p "$T/ng/tmp" "$T/ng/logs"
    awk -v t="$T/ng" '{ print } /^http \{/ {
        print "    client_body_temp_path " t "/tmp/body; proxy_temp_path " t "/tmp/proxy;"
        print "    fastcgi_temp_path " t "/tmp/f; uwsgi_temp_path " t "/tmp/u; scgi_temp_path " t "/tmp/s;" }' \
        "$NG" >"$T/ng/nginx.conf"
    run "nginx -t deploy/scale-out/nginx.conf" timeout 30 "$NGINX" -t -p "$T/ng" -c "$T/ng/nginx.conf" \
        -g "pid $T/ng/nginx.pid; error_log $T/ng/logs/error.log;"
fi

echo "($S skipped)"
echo "deploy-validate: $P passed, $F failed"
[[ $F -eq 0 ]]
