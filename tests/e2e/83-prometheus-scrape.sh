#!/usr/bin/env bash
# 83-prometheus-scrape: a real Prometheus (Debian's) runs deploy/prometheus/prometheus.yml,
# the scrape config of deploy/compose.yaml, against a gateway on loopback: the target is
# up with the admin token read from a file (authorization.credentials_file), s3cached
# series land in the TSDB, and the same job with a wrong token is down with 401/403.
# Only the target address, the token file path and the intervals are rewritten.
. "$(dirname "$0")/lib.sh"

PROM=$(command -v prometheus || true)
if [[ -z $PROM ]]; then
    skip "Prometheus scrape" "prometheus not installed (apt-get install prometheus)"
    exit 0
fi
SRC=$E2E_REPO/deploy/prometheus/prometheus.yml
[[ -f $SRC ]] || { fail "deploy/prometheus/prometheus.yml exists"; exit 1; }

PROM_PID=
cleanup83() {
    local rc=$?
    [[ -n $PROM_PID ]] && { kill -TERM "$PROM_PID" 2>/dev/null; wait "$PROM_PID" 2>/dev/null; }
    (exit $rc)
    _e2e_exit
}
trap cleanup83 EXIT

start_server
mkdir -p "$T/prom/data"
printf '%s\n' "$S3_ADMIN_TOKEN" >"$T/prom/admin_token"
printf 'not-the-token\n' >"$T/prom/wrong_token"

# the shipped file, pointed at this gateway; plus a copy of its job with the wrong token
"$PY" - "$SRC" "$T/prom/prometheus.yml" "127.0.0.1:$S3_PORT" "$T/prom/admin_token" "$T/prom/wrong_token" <<'EOF' || exit 1
import copy, sys, yaml
src, dst, target, tok, wrong = sys.argv[1:]
c = yaml.safe_load(open(src))
c["global"]["scrape_interval"] = "1s"
c["global"]["evaluation_interval"] = "1s"
jobs = [j for j in c["scrape_configs"] if j["job_name"] == "s3cached"]
assert len(jobs) == 1, "no job s3cached in %s" % src
j = jobs[0]
assert j["authorization"]["credentials_file"] == "/run/secrets/admin_token", j["authorization"]
j["authorization"]["credentials_file"] = tok
for sc in j["static_configs"]:
    sc["targets"] = [target]
w = copy.deepcopy(j)
w["job_name"] = "s3cached-wrong-token"
w["authorization"]["credentials_file"] = wrong
c["scrape_configs"].append(w)
yaml.safe_dump(c, open(dst, "w"))
EOF

PPORT=$(free_port)
PEP=http://127.0.0.1:$PPORT
"$PROM" --config.file="$T/prom/prometheus.yml" --storage.tsdb.path="$T/prom/data" \
    --web.listen-address="127.0.0.1:$PPORT" --log.level=warn >"$T/prom/log" 2>&1 </dev/null &
PROM_PID=$!

# targets_json — /api/v1/targets
targets() { timeout 10 curl -s --max-time 5 "$PEP/api/v1/targets"; }
# target_health JOB — "up", "down", "unknown" (and lastError after a tab)
target_health() {
    targets | "$PY" -c '
import json, sys
job = sys.argv[1]
try:
    t = json.load(sys.stdin)["data"]["activeTargets"]
except Exception:
    print("none"); sys.exit()
for x in t:
    if x["labels"].get("job") == job:
        print("%s\t%s" % (x["health"], x.get("lastError", ""))); break
else:
    print("none")' "$1"
}
wait_health() { # JOB WANT — up to 30 s
    local i h
    for ((i = 0; i < 150; i++)); do
        kill -0 "$PROM_PID" 2>/dev/null || { echo "prometheus exited:"; tail -n 15 "$T/prom/log"; return 1; }
        h=$(target_health "$1")
        [[ ${h%%$'\t'*} == "$2" ]] && { echo "$h"; return 0; }
        sleep 0.2
    done
    echo "job $1: health '$h', want $2"
    tail -n 5 "$T/prom/log"
    return 1
}
check "prometheus scrapes /_/metrics with the bearer token file: target up" wait_health s3cached up
h=$(wait_health s3cached-wrong-token down)
check "the same job with a wrong token is down (401/403): ${h#*$'\t'}" \
    bash -c "[[ '${h%%$'\t'*}' == down && '$h' =~ 40[13] ]]"

# a series from the gateway is in the TSDB (metric names from /_/metrics itself)
metric=$(curl -s -H "Authorization: Bearer $S3_ADMIN_TOKEN" "$S3_EP/_/metrics" | grep -v '^#' | sed -n 's/^\(s3cached_[a-z0-9_]*\).*/\1/p' | head -1)
query() { timeout 10 curl -s --max-time 5 --data-urlencode "query=$1" "$PEP/api/v1/query"; }
series_present() {
    local i out
    [[ -n $metric ]] || { echo "/_/metrics has no s3cached_* metric"; return 1; }
    for ((i = 0; i < 50; i++)); do
        out=$(query "$metric{job=\"s3cached\"}")
        [[ $out == *'"result":[{'* ]] && return 0
        sleep 0.2
    done
    echo "query $metric: $out"
    return 1
}
check "s3cached series ($metric) are stored, labelled job=s3cached" series_present
check "up{job=\"s3cached\"} == 1" bash -c \
    "timeout 10 curl -s --data-urlencode 'query=up{job=\"s3cached\"}' '$PEP/api/v1/query' | grep -q '\"value\":\[[0-9.]*,\"1\"\]'"
stop_server TERM
