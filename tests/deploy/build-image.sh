#!/usr/bin/env bash
# tests/deploy/build-image.sh: a real container build + run with podman (make test, through
# make test-image; make test-deploy). Without a registry it makes the base image with debootstrap
# (localhost/debian-base:bookworm), builds deploy/Dockerfile with BASE_IMAGE pointing at
# it, runs the image on a free loopback port with S3CACHED_* env, and checks /_/health,
# a signed PUT/GET, the non-root user and the HEALTHCHECK; then compose-smoke.sh runs
# compose.yaml's store + gateway services from the image.
# Exit 0: passed; 1: failed; 77: skipped (no podman/runc/debootstrap, or not root).
set -u
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
BASE=${BASE_IMAGE:-localhost/debian-base:bookworm}
IMG=${IMAGE:-localhost/s3cached:test}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
PODMAN=(podman --runtime runc)
UL=(--ulimit nofile=1024:1024 --ulimit nproc=1024:1024)
unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY
skip() { echo "skip: $*"; exit 77; }
die() { echo "FAIL - $*"; echo "build-image: $npass passed, 1 failed"; exit 1; }
npass=0
pass() { echo "ok   - $*"; npass=$((npass + 1)); }

[[ $(id -u) == 0 ]] || skip "podman build here needs root"
command -v podman >/dev/null || skip "podman not installed (apt-get install podman runc)"
command -v runc >/dev/null || skip "runc not installed (apt-get install runc)"

if ! podman image exists "$BASE"; then
    [[ $BASE == localhost/* ]] || { podman pull "$BASE" || die "cannot pull $BASE"; }
    if ! podman image exists "$BASE"; then
        command -v debootstrap >/dev/null || skip "debootstrap not installed and $BASE missing"
        root=$(mktemp -d /var/tmp/s3c-debootstrap.XXXXXX)
        echo "debootstrap --variant=minbase bookworm $root $MIRROR"
        timeout 900 debootstrap --variant=minbase bookworm "$root" "$MIRROR" >"$root.log" 2>&1 ||
            { tail -20 "$root.log"; rm -rf "$root"; die "debootstrap failed"; }
        # the image's apt must reach the same mirror
        echo "deb $MIRROR bookworm main" >"$root/etc/apt/sources.list"
        tar -C "$root" -c . | podman import - "$BASE" >/dev/null || die "podman import failed"
        rm -rf "$root" "$root.log"
    fi
fi

echo "podman build --format docker -f deploy/Dockerfile --build-arg BASE_IMAGE=$BASE -t $IMG $repo"
timeout 1800 "${PODMAN[@]}" build --format docker "${UL[@]}" --network host -f "$repo/deploy/Dockerfile" \
    --build-arg BASE_IMAGE="$BASE" -t "$IMG" "$repo" || die "podman build failed"
pass "podman build"
# each rebuild leaves the previous build-stage image (~700 MB, compiler inside) dangling:
# remove all but this build's (the layer cache of the next; its ID from a cached rebuild
# of the build stage alone)
keep=$(mktemp)
"${PODMAN[@]}" build -q --format docker "${UL[@]}" --network host -f "$repo/deploy/Dockerfile" \
    --build-arg BASE_IMAGE="$BASE" --target build --iidfile "$keep" "$repo" >/dev/null 2>&1 &&
    [[ -s $keep ]] &&
    podman images -q --no-trunc --filter label=io.s3cached.stage=build --filter dangling=true |
    grep -v "$(sed 's/^sha256://' "$keep")" | xargs -r podman rmi >/dev/null 2>&1
rm -f "$keep"

user=$(podman image inspect "$IMG" --format '{{.Config.User}}')
[[ $user == s3cached* ]] || die "image USER is '$user', want s3cached"
pass "image runs as USER $user"
hc=$(podman image inspect "$IMG" --format '{{json .Config.Healthcheck}}' 2>/dev/null)
grep -q 'curl' <<<"$hc" && grep -Eq '_/health|S3CACHED_HEALTH_URL' <<<"$hc" ||
    die "no HEALTHCHECK curl of /_/health in the image (built without --format docker?): $hc"
pass "HEALTHCHECK on /_/health"
# runtime stage has no compiler
"${PODMAN[@]}" run --rm --no-healthcheck "${UL[@]}" --entrypoint /bin/sh "$IMG" -c '! command -v cc && ! command -v gcc' >/dev/null ||
    die "the runtime image contains a compiler"
pass "no compiler in the runtime image"

port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
ak=AKCTR$(od -An -N6 -tx1 /dev/urandom | tr -d ' \n' | tr a-f A-F)
sk=$(od -An -N20 -tx1 /dev/urandom | tr -d ' \n')
tok=tok$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')
name=s3cached-test-$$
"${PODMAN[@]}" run -d --rm --name "$name" --network host "${UL[@]}" \
    -e S3CACHED_LISTEN=127.0.0.1:$port -e S3CACHED_ACCESS_KEY="$ak" -e S3CACHED_SECRET_KEY="$sk" \
    -e S3CACHED_ADMIN_TOKEN="$tok" -e S3CACHED_HEALTH_URL=http://127.0.0.1:$port/_/health \
    -e S3CACHED_CACHE_SIZE=256M "$IMG" >/dev/null 2>/tmp/s3c-ctr-run.$$ ||
    { cat /tmp/s3c-ctr-run.$$; rm -f /tmp/s3c-ctr-run.$$; die "podman run failed"; }
# (podman's "unable to get systemd connection to add healthchecks" lines, where no systemd
# runs, are dropped; `podman healthcheck run` below still runs the HEALTHCHECK)
rm -f /tmp/s3c-ctr-run.$$
trap '"${PODMAN[@]}" stop -t 5 "$name" >/dev/null 2>&1' EXIT
ok=0
for ((i = 0; i < 100; i++)); do
    [[ $(curl -s --noproxy '*' --max-time 1 "http://127.0.0.1:$port/_/health") == ok* ]] && { ok=1; break; }
    sleep 0.2
done
[[ $ok == 1 ]] || { podman logs "$name" | tail -20; die "container: no /_/health"; }
pass "container answers /_/health (S3CACHED_* env)"
s3() { curl -s --noproxy '*' --aws-sigv4 "aws:amz:us-east-1:s3" --user "$ak:$sk" \
    -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' "$@"; }
[[ $(s3 -o /dev/null -w '%{http_code}' -X PUT "http://127.0.0.1:$port/ctr") == 200 ]] || die "CreateBucket in the container"
head -c 3M /dev/urandom >/tmp/s3c-ctr.$$
[[ $(s3 -o /dev/null -w '%{http_code}' -T /tmp/s3c-ctr.$$ "http://127.0.0.1:$port/ctr/obj") == 200 ]] || die "PUT in the container"
s3 -o /tmp/s3c-ctr.$$.down "http://127.0.0.1:$port/ctr/obj"
cmp -s /tmp/s3c-ctr.$$ /tmp/s3c-ctr.$$.down || die "GET bytes differ"
rm -f /tmp/s3c-ctr.$$ /tmp/s3c-ctr.$$.down
pass "PUT/GET 3 MiB through the container"
"${PODMAN[@]}" healthcheck run "$name" >/dev/null 2>&1 && pass "podman healthcheck run" ||
    echo "note - podman healthcheck run did not pass (needs systemd timers in some setups)"
uid=$("${PODMAN[@]}" exec "$name" id -u)
[[ $uid != 0 ]] || die "the gateway runs as root in the container"
pass "process uid $uid"
"${PODMAN[@]}" stop -t 5 "$name" >/dev/null 2>&1
trap - EXIT
# deploy/compose.yaml's store + gateway from this image
"$here/compose-smoke.sh" "$IMG"
rc=$?
[[ $rc -eq 0 || $rc -eq 77 ]] || die "compose-smoke.sh"
[[ $rc -eq 0 ]] && pass "compose-smoke: compose.yaml's store + gateway from the image"
echo "build-image: $npass passed, 0 failed"
