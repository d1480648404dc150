#!/usr/bin/env bash
# tests/deploy/compose-smoke.sh IMAGE: runs the `store` and `gateway` services of
# deploy/compose.yaml as compose would (their entrypoint, command with $$ unescaped,
# environment, named volumes, file secrets under /run/secrets), with podman and the host
# network on loopback instead of a compose bridge (only 127.0.0.1 here; no compose tool
# needed). Overridden: S3CACHED_LISTEN (free loopback ports), the gateway's
# S3CACHED_BACKEND (the store's port instead of the name `store`) and its --peers/--self
# (a ring of itself: the other gateway services are not started here). Checks: both answer
# /_/health, a client key from the credentials secret writes and reads through the
# gateway (miss, then hit), the object is in the store (read with the store's key), and
# /_/metrics takes the admin_token secret. Called by build-image.sh (make test, make test-image).
# Exit 0: passed; 1: failed; 77: skipped.
set -u
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
IMG=${1:-localhost/s3cached:test}
PY=/usr/bin/python3
PODMAN=(podman --runtime runc)
UL=(--ulimit nofile=1024:1024 --ulimit nproc=1024:1024)
unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY
die() { echo "FAIL - $*"; exit 1; }

"$PY" -c 'import yaml' 2>/dev/null || { echo "skip: no python3-yaml"; exit 77; }
podman image exists "$IMG" || { echo "skip: image $IMG not built"; exit 77; }

T=$(mktemp -d "${TMPDIR:-/tmp}/s3c-compose.XXXXXX")
id=$$
CTRS=() VOLS=()
cleanup() {
    local c v
    for c in "${CTRS[@]}"; do "${PODMAN[@]}" rm -f -t 5 "$c" >/dev/null 2>&1; done
    for v in "${VOLS[@]}"; do podman volume rm -f "$v" >/dev/null 2>&1; done
    rm -rf "$T"
}
trap cleanup EXIT

free_port() { "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
SPORT=$(free_port)
GPORT=$(free_port)

# secrets, in the formats of deploy/secrets/*.example
mkdir -p "$T/secrets"
CAK=AKCLIENT$(od -An -N4 -tx1 /dev/urandom | tr -d ' \n' | tr a-f A-F)
CSK=$(od -An -N20 -tx1 /dev/urandom | tr -d ' \n')
SAK=AKSTORE$(od -An -N4 -tx1 /dev/urandom | tr -d ' \n' | tr a-f A-F)
SSK=$(od -An -N20 -tx1 /dev/urandom | tr -d ' \n')
TOK=$(od -An -N24 -tx1 /dev/urandom | tr -d ' \n')
printf '%s %s admin\n' "$CAK" "$CSK" >"$T/secrets/credentials"
printf '%s %s\n' "$SAK" "$SSK" >"$T/secrets/store_credentials"
printf '%s\n' "$TOK" >"$T/secrets/admin_token"
chmod 0644 "$T"/secrets/*   # compose bind-mounts file secrets as they are; uid 10001 reads them

# podman run arguments for one service, one per line (from compose.yaml)
service_args() { # SERVICE LISTEN [BACKEND]
    "$PY" - "$repo/deploy/compose.yaml" "$1" "$2" "${3:-}" "$T/secrets" "$id" <<'EOF'
import os, re, sys, yaml
path, name, listen, backend, secdir, run_id = sys.argv[1:]
svc = yaml.safe_load(open(path))["services"][name]
def interp(v):  # compose's ${VAR:-default} and $$
    v = re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*):-([^}]*)\}", lambda m: os.environ.get(m[1], m[2]), str(v))
    return v.replace("$$", "$")
out = []
env = {k: interp(v) for k, v in (svc.get("environment") or {}).items()}
env["S3CACHED_LISTEN"] = listen
if backend:
    env["S3CACHED_BACKEND"] = backend
if env.get("S3CACHED_PEERS"):
    # its peers are compose's other gateway services, not on the host network: a ring of
    # this one gateway (cluster mode on, every key its own)
    env["S3CACHED_PEERS"] = env["S3CACHED_SELF"] = listen
for k, v in env.items():
    out += ["-e", "%s=%s" % (k, v)]
for v in svc.get("volumes") or []:
    src, dst = v.split(":")[:2]
    if src.startswith((".", "/")):
        sys.exit("bind mount %s: not expected in the store/gateway services" % src)
    out += ["-v", "s3c-smoke-%s-%s:%s" % (run_id, src, dst)]
for s in svc.get("secrets") or []:
    out += ["-v", "%s/%s:/run/secrets/%s:ro" % (secdir, s, s)]
ep = svc.get("entrypoint")
if ep:
    ep = [ep] if isinstance(ep, str) else ep
    out += ["--entrypoint", ep[0]]
out.append("@IMAGE@")
out += (ep[1:] if ep else [])
cmd = svc.get("command") or []
out += [interp(c) for c in ([cmd] if isinstance(cmd, str) else cmd)]
print("\n".join(out))
EOF
}
run_service() { # SERVICE LISTEN [BACKEND]
    local args=() a
    mapfile -t args < <(service_args "$@") || return 1
    [[ ${#args[@]} -gt 0 ]] || return 1
    for a in "${!args[@]}"; do [[ ${args[$a]} == @IMAGE@ ]] && args[$a]=$IMG; done
    for a in "${args[@]}"; do
        [[ $a == s3c-smoke-$id-*:* ]] && VOLS+=("${a%%:*}")
    done
    CTRS+=("s3c-smoke-$id-$1")
    "${PODMAN[@]}" run -d --name "s3c-smoke-$id-$1" --network host --no-healthcheck "${UL[@]}" \
        "${args[@]}" >/dev/null 2>"$T/run-$1.err" || { cat "$T/run-$1.err"; return 1; }
}
wait_health() { # PORT NAME
    local i
    for ((i = 0; i < 100; i++)); do
        [[ $(curl -s --max-time 1 "http://127.0.0.1:$1/_/health") == ok* ]] && return 0
        sleep 0.2
    done
    echo "no /_/health on $2 (127.0.0.1:$1); logs:"
    podman logs "s3c-smoke-$id-$2" 2>&1 | tail -n 15
    return 1
}

run_service store "127.0.0.1:$SPORT" || die "compose store: podman run"
wait_health "$SPORT" store || die "compose store: no /_/health"
echo "ok   - compose store: its entrypoint reads store_credentials and serves the store-data volume"
run_service gateway "127.0.0.1:$GPORT" "http://127.0.0.1:$SPORT" || die "compose gateway: podman run"
wait_health "$GPORT" gateway || die "compose gateway: no /_/health"
echo "ok   - compose gateway: up with --credentials and backend keys from the secrets"

s3() { # AK SK CURL_ARGS...
    local ak=$1 sk=$2
    shift 2
    timeout 60 curl -s --aws-sigv4 "aws:amz:us-east-1:s3" --user "$ak:$sk" \
        -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' "$@"
}
GEP=http://127.0.0.1:$GPORT
SEP=http://127.0.0.1:$SPORT
head -c 5M /dev/urandom >"$T/obj"
st=$(s3 "$CAK" "$CSK" -o /dev/null -w '%{http_code}' -X PUT "$GEP/datasets")
[[ $st == 200 ]] || die "CreateBucket through the gateway: $st"
st=$(s3 "$CAK" "$CSK" -o /dev/null -w '%{http_code}' -T "$T/obj" "$GEP/datasets/shard-0000")
[[ $st == 200 ]] || die "PUT through the gateway: $st"
s3 "$CAK" "$CSK" -D "$T/h1" -o "$T/g1" "$GEP/datasets/shard-0000"
s3 "$CAK" "$CSK" -D "$T/h2" -o "$T/g2" "$GEP/datasets/shard-0000"
cmp -s "$T/obj" "$T/g1" && cmp -s "$T/obj" "$T/g2" || die "GET through the gateway: bytes differ"
grep -qi '^x-cache: hit' "$T/h2" || die "second GET is not a hit: $(grep -i x-cache "$T/h1" "$T/h2")"
echo "ok   - client key from the credentials secret: PUT 5 MiB, GET twice (second x-cache: hit)"
s3 "$SAK" "$SSK" -o "$T/s1" "$SEP/datasets/shard-0000"
cmp -s "$T/obj" "$T/s1" || die "the object is not in the store (read with the store's key)"
[[ $(s3 "$CAK" "$CSK" -o /dev/null -w '%{http_code}' "$SEP/datasets/shard-0000") == 403 ]] ||
    die "the store accepts the client's key; only the gateway's key should work there"
echo "ok   - written through to the store (store_credentials key reads it; client key refused there)"
[[ $(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $TOK" "$GEP/_/metrics") == 200 ]] ||
    die "/_/metrics with the admin_token secret"
[[ $(curl -s -o /dev/null -w '%{http_code}' "$GEP/_/metrics") != 200 ]] || die "/_/metrics without a token answered 200"
echo "ok   - gateway /_/metrics takes the admin_token secret (what prometheus.yml sends)"
echo "compose-smoke: passed"
