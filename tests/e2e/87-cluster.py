#!/usr/bin/env python3
"""87-cluster: four gateways peered into one cache (--peers, --self), behind nginx running
deploy/scale-out/nginx.conf (its upstream block given the four gateways, ports rewritten),
over an origin that logs every request: a fifth s3cached (file store) the gateways use as
their S3 backend, through a pausable relay.
  - warm-ups: a job of 300 objects posted through nginx, and another posted to one gateway
    directly: the origin served each object exactly once, each object is cached on exactly
    its owner (the gateway nginx sends its reads to), every read through nginx afterwards is
    a hit with the right bytes; the job shows cluster totals and a share per gateway;
  - one fetch from any entry point: a cold read straight from a gateway that does not own
    the key (one origin GET, right bytes, cached on the owner only; a second non-owner read
    costs the origin nothing), a HEAD and a range the same way;
  - read-after-write from any gateway: a PUT and a DELETE through a non-owner, then a GET
    through nginx: the new bytes (404) at once, with --revalidate-after never; the same for
    CompleteMultipartUpload, CopyObject and DeleteObjects (boto3);
    keys with every byte value 1-255 the same way (a notice carries a key's bytes whole);
  - members that disagree (a fifth gateway with its own list): its request is served by the
    gateway it believes the owner, which serves it itself: one hop, no loop;
  - peer traffic is authenticated: a wrong peer secret, an unsigned or missing peer mark
    get 403; a client's request carrying the mark is relayed as any client's;
  - DELETE /_/cache and POST /_/flush fan out to every gateway;
  - serve refuses a membership it cannot place itself in (no --self, no key, --self
    not listed, a misspelt server parameter);
  - cluster stats: GET /_/stats?scope=cluster and `s3cached stats --cluster` merge the
    clients of every gateway (a client's bytes summed; per-node rows); peer traffic apart;
  - kill -9 of one gateway during a warm job: its share is reported failed, the others
    complete, the job ends; cluster stats mark the dead gateway and still answer.
    With it still down, DELETE /_/cache and POST /_/flush answer at once and name it.
Skipped (reported, not passed) without nginx.
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2elib as E  # noqa: E402

t = E.Suite("87-cluster")
NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if os.access("/usr/sbin/nginx", os.X_OK) else None)
TOOL = os.path.join(os.path.dirname(os.path.abspath(E.BIN)), "ring-owner")
CONF_SRC = os.path.join(E.REPO, "deploy", "scale-out", "nginx.conf")
N = 4
NOBJ = int(os.environ.get("CLUSTER_OBJECTS", "300"))
AK, SK = "AKCLUSTER" + os.urandom(3).hex().upper(), os.urandom(20).hex()
TOKEN = "tok" + os.urandom(8).hex()
PEER_SECRET = "peer" + os.urandom(8).hex()

if not NGINX:
    t.skip("a cluster of four gateways behind nginx", "nginx not installed (apt-get install nginx)")
    sys.exit(t.finish())

tmp = tempfile.mkdtemp(prefix="s3c-e2e-cluster.", dir=os.environ.get("TMPDIR", "/tmp"))
ngx = None
relay = None


def cleanup():
    global ngx
    if ngx is not None and ngx.poll() is None:
        ngx.send_signal(signal.SIGTERM)
        try:
            ngx.wait(10)
        except subprocess.TimeoutExpired:
            ngx.kill()
            ngx.wait()
    ngx = None
    if relay is not None:
        relay.close()
    if not os.environ.get("E2E_KEEP"):
        shutil.rmtree(tmp, ignore_errors=True)


import atexit  # noqa: E402
atexit.register(cleanup)

# --- the origin, the relay, four gateways ----------------------------------------------------

origin = E.Server(t)
origin.start()
relay = E.Relay(origin.port)
ports = []
while len(ports) < N:
    p = E.free_port()
    if p not in ports:
        ports.append(p)
names = ["127.0.0.1:%d" % p for p in ports]
PEERS = ",".join(names)


def gateway(port, peers, self_name, extra=()):
    g = E.Server(t, auth=["--access-key", AK, "--secret-key", SK], port=port,
                 extra=["--backend", "http://127.0.0.1:%d" % relay.port,
                        "--backend-access-key", origin.ak, "--backend-secret-key", origin.sk,
                        "--peers", peers, "--self", self_name, "--peer-secret", PEER_SECRET,
                        "--revalidate-after", "never", "--backend-timeout", "20s"] + list(extra))
    g.ak, g.sk, g.token = AK, SK, TOKEN
    return g


gws = [gateway(p, PEERS, n) for p, n in zip(ports, names)]
for g in gws:
    g.start()


def owners(bucket, keys, peers=PEERS):
    """The gateway index (into @peers' order) that owns each /bucket/key, by build/ring-owner."""
    order = peers.split(",")
    r = subprocess.run([TOOL, "--uri", "--peers", peers],
                       input="".join("/%s/%s\n" % (bucket, k) for k in keys).encode(),
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
    if r.returncode != 0:
        raise E.Fail("ring-owner: %s" % r.stderr.decode(errors="replace")[-300:])
    return [order.index(ln.split("\t")[0]) for ln in r.stdout.decode().splitlines()]


def origin_gets(bucket):
    """{key: number of GetObject the origin answered} from its access log."""
    counts = {}
    pat = re.compile(r" access \S+ \S+ \S+ GET GetObject /%s/(\S+) (\d+) " % re.escape(bucket))
    for ln in open(origin.log, errors="replace"):
        m = pat.search(ln)
        if m:
            counts[m.group(1)] = counts.get(m.group(1), 0) + 1
    return counts


def make_objects(bucket, n, size=2048):
    os.makedirs(os.path.join(origin.store, bucket), exist_ok=True)
    data = {}
    for i in range(n):
        k = "obj-%04d" % i
        b = (("%s/%s:" % (bucket, k)).encode() * (size // 10 + 1))[:size + i % 97]
        with open(os.path.join(origin.store, bucket, k), "wb") as f:
            f.write(b)
        data[k] = b
    return data


def admin(ep, method, path, body=None, timeout=30):
    rq = urllib.request.Request(ep + path, data=body.encode() if body is not None else None,
                                method=method, headers={"Authorization": "Bearer " + TOKEN})
    try:
        with urllib.request.urlopen(rq, timeout=timeout) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        raw = e.read()
        try:
            return e.code, json.loads(raw)
        except ValueError:
            return e.code, raw


def objects_of(i):
    return gws[i].stats()["cache"]["objects"]


# --- nginx from the shipped config --------------------------------------------------------------

def build_conf(listen):
    text = open(CONF_SRC).read()
    m = re.search(r"(?ms)^([ \t]*)upstream s3cached \{\n(.*?)^\1\}\n", text)
    if not m:
        raise E.Fail("no `upstream s3cached { ... }` block in deploy/scale-out/nginx.conf")
    ind, body = m.group(1), m.group(2)
    srv = re.findall(r"^\s*server\s+(\S+)((?:\s+[^;\s]+)*)\s*;", body, re.M)
    params = srv[0][1] if srv else ""
    other = [ln for ln in body.splitlines() if ln.strip() and not re.match(r"\s*server\s", ln)]
    block = "\n".join([ind + "upstream s3cached {"] + other +
                      [ind + "    server %s%s;" % (n, params) for n in names] + [ind + "}"]) + "\n"
    text = text[:m.start()] + block + text[m.end():]
    if "listen 127.0.0.1:8080;" not in text:
        raise E.Fail("the proxy does not listen on 127.0.0.1:8080")
    text = text.replace("listen 127.0.0.1:8080;", "listen 127.0.0.1:%d;" % listen)
    nt = os.path.join(tmp, "ngx")
    head = "".join("    %s_temp_path %s/%s;\n" % (k, nt, k) for k in
                   ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    text = re.sub(r"(?m)^http \{\n", lambda _: "http {\n" + head, text, count=1)
    return re.sub(r"(?m)^worker_processes .*;", "worker_processes 2;", text)


NPORT = E.free_port()
NEP = "http://127.0.0.1:%d" % NPORT


def start_nginx():
    global ngx
    os.makedirs(os.path.join(tmp, "ngx"), exist_ok=True)
    conf = os.path.join(tmp, "nginx.conf")
    with open(conf, "w") as f:
        f.write(build_conf(NPORT))
    g = "pid %s/nginx.pid; error_log %s/error.log warn; daemon off;%s" % (
        tmp, tmp, " user root;" if os.getuid() == 0 else "")
    chk = subprocess.run([NGINX, "-t", "-p", tmp, "-c", conf, "-g", g], capture_output=True,
                         timeout=20)
    if chk.returncode != 0:
        raise E.Fail("nginx -t: %s" % chk.stderr.decode(errors="replace")[-500:])
    ngx = subprocess.Popen([NGINX, "-p", tmp, "-c", conf, "-g", g], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)

    def up():
        try:
            with urllib.request.urlopen(NEP + "/_/health", timeout=1) as r:
                return r.status == 200
        except Exception:  # noqa: BLE001 - not yet
            return False
    if not E.wait_until(up, timeout=10):
        raise E.Fail("nginx does not answer /_/health")


t.check("nginx runs deploy/scale-out/nginx.conf with the four gateways", start_nginx)
if ngx is None:
    sys.exit(t.finish())


def get(ep, path, **kw):
    return E.request(ep, kw.pop("method", "GET"), path, ak=AK, sk=SK, **kw)


# --- one fetch from any entry point ------------------------------------------------------------

cold = make_objects("cold", 8, size=300000)
ck = sorted(cold)
cown = owners("cold", ck)


def cold_read_non_owner():
    for k, o in zip(ck[:4], cown[:4]):
        n = (o + 1) % N
        before = [objects_of(i) for i in range(N)]
        r = get(gws[n].endpoint, "/cold/" + k)
        E.eq("status of GET %s from non-owner %d" % (k, n), r.status, 200)
        E.same_bytes("GET %s from a non-owner" % k, r.body, cold[k])
        E.eq("x-s3cached-owner of %s" % k, r.h("x-s3cached-owner"), names[o])
        after = [objects_of(i) for i in range(N)]
        want = list(before)
        want[o] += 1
        E.eq("cache.objects per gateway after a cold non-owner read of %s" % k, after, want)
        m = (o + 2) % N
        r = get(gws[m].endpoint, "/cold/" + k)
        E.eq("second non-owner read: x-cache", r.h("x-cache"), "hit")
        E.same_bytes("second non-owner read of %s" % k, r.body, cold[k])
    got = origin_gets("cold")
    E.eq("origin GETs of the keys read from non-owners", {k: got.get(k) for k in ck[:4]},
         {k: 1 for k in ck[:4]})


t.check("a cold read straight from a non-owner: one origin GET, right bytes, cached on the "
        "owner only; another non-owner's read is a hit", cold_read_non_owner)


def head_and_range():
    k, o = ck[4], cown[4]
    n = (o + 1) % N
    r = get(gws[n].endpoint, "/cold/" + k, method="HEAD")
    E.eq("HEAD from a non-owner", (r.status, r.h("content-length")), (200, str(len(cold[k]))))
    r = get(gws[n].endpoint, "/cold/" + k, headers={"Range": "bytes=1000-1999"})
    E.eq("ranged GET from a non-owner: status", r.status, 206)
    E.same_bytes("ranged GET from a non-owner", r.body, cold[k][1000:2000])
    E.eq("Content-Range", r.h("content-range"), "bytes 1000-1999/%d" % len(cold[k]))
    r = get(gws[n].endpoint, "/cold/no-such-key")
    E.expect_error("a missing key through a non-owner", r, 404, "NoSuchKey")
    E.eq("origin GETs of %s" % k, origin_gets("cold").get(k, 0), 1)


t.check("HEAD, a range, and a missing key through a non-owner: the owner's answer, request ids "
        "kept", head_and_range)


def write_through_non_owner():
    k, o = ck[5], cown[5]
    n = (o + 1) % N
    r = get(NEP, "/cold/" + k)  # the owner caches the old bytes
    E.same_bytes("GET through nginx before the PUT", r.body, cold[k])
    new = b"new bytes " * 5000
    r = get(gws[n].endpoint, "/cold/" + k, method="PUT", body=new)
    E.eq("PUT through a non-owner", r.status, 200)
    r = get(NEP, "/cold/" + k)
    E.eq("GET through nginx after a PUT through a non-owner", r.status, 200)
    E.same_bytes("GET through nginx after a PUT through a non-owner", r.body, new)
    r = get(gws[(o + 2) % N].endpoint, "/cold/" + k)
    E.same_bytes("GET from another non-owner after the PUT", r.body, new)
    r = get(gws[n].endpoint, "/cold/" + k, method="DELETE")
    E.eq("DELETE through a non-owner", r.status, 204)
    r = get(NEP, "/cold/" + k)
    E.expect_error("GET through nginx after a DELETE through a non-owner", r, 404, "NoSuchKey")


t.check("read-after-write from any gateway: PUT and DELETE through a non-owner, GET through "
        "nginx sees them at once (--revalidate-after never)", write_through_non_owner)


def any_byte_keys():
    # S3 keys are any bytes but NUL; a write notice is JSON, whose strings are UTF-8: every
    # byte value 1-255 in a key the owner cached, overwritten and then deleted through a
    # non-owner, read from the owner itself (which holds the cached copy) each time
    keys = [b"any/k" + bytes([x]) + b"k" for x in range(1, 256)]
    enc = [urllib.parse.quote(k, safe="/~") for k in keys]  # as SigV4 canonicalises it
    own = owners("cold", enc)
    stale = []
    for k, e, o in zip(keys, enc, own):
        r = get(gws[o].endpoint, "/cold/" + e, method="PUT", body=b"old " + k)
        E.eq("PUT of key %r through its owner" % k, r.status, 200)
        r = get(gws[(o + 2) % N].endpoint, "/cold/" + e)
        E.same_bytes("GET of key %r through a non-owner" % k, r.body, b"old " + k)
        r = get(gws[(o + 1) % N].endpoint, "/cold/" + e, method="PUT", body=b"new " + k)
        E.eq("PUT of key %r through a non-owner" % k, r.status, 200)
        r = get(gws[o].endpoint, "/cold/" + e)
        if r.status != 200 or r.body != b"new " + k:
            stale.append(k)
    E.eq("keys whose owner served the old bytes after a PUT through a non-owner", stale, [])
    for k, e, o in zip(keys, enc, own):
        r = get(gws[(o + 1) % N].endpoint, "/cold/" + e, method="DELETE")
        E.eq("DELETE of key %r through a non-owner" % k, r.status, 204)
        r = get(gws[o].endpoint, "/cold/" + e)
        if r.status != 404:
            stale.append(k)
    E.eq("keys their owner still served after a DELETE through a non-owner", stale, [])


t.check("keys with every byte value 1-255: a write through a non-owner reaches the owner's "
        "cache (the notice carries the key's bytes whole)", any_byte_keys)


def other_writes_through_non_owner():
    # CompleteMultipartUpload, CopyObject and DeleteObjects through gateway 0, of keys it
    # does not own and whose owner cached the old bytes: the next GET through nginx has the
    # new state at once (--revalidate-after never)
    cands = ["wr-%03d" % i for i in range(60)]
    ks = [c for c, o in zip(cands, owners("cold", cands)) if o != 0][:3]
    km, kc, kd = ks
    for k in ks:
        with open(os.path.join(origin.store, "cold", k), "wb") as f:
            f.write(b"old " + k.encode() * 1000)
        E.eq("GET %s through nginx (the owner caches the old bytes)" % k, get(NEP, "/cold/" + k).status, 200)
    s3 = gws[0].boto3()
    new = b"multipart " * 20000
    up = s3.create_multipart_upload(Bucket="cold", Key=km)["UploadId"]
    et = s3.upload_part(Bucket="cold", Key=km, UploadId=up, PartNumber=1, Body=new)["ETag"]
    s3.complete_multipart_upload(Bucket="cold", Key=km, UploadId=up,
                                 MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": et}]})
    E.same_bytes("GET through nginx after CompleteMultipartUpload through a non-owner",
                 get(NEP, "/cold/" + km).body, new)
    s3.copy_object(Bucket="cold", Key=kc, CopySource={"Bucket": "cold", "Key": km})
    E.same_bytes("GET through nginx after CopyObject through a non-owner",
                 get(NEP, "/cold/" + kc).body, new)
    s3.delete_objects(Bucket="cold", Delete={"Objects": [{"Key": kd}]})
    E.expect_error("GET through nginx after DeleteObjects through a non-owner",
                   get(NEP, "/cold/" + kd), 404, "NoSuchKey")


t.check("CompleteMultipartUpload, CopyObject and DeleteObjects through a non-owner: seen "
        "through nginx at once", other_writes_through_non_owner)


def disagreeing_members():
    # a fifth gateway that knows only itself and gateway 0: it sends gateway 0 the keys it
    # believes gateway 0 owns; gateway 0 serves a peer's request itself (it may believe
    # another gateway owns the key): one hop, never a loop
    p5 = E.free_port()
    self5 = "127.0.0.1:%d" % p5
    peers5 = names[0] + "," + self5
    g5 = gateway(p5, peers5, self5)
    g5.start()
    try:
        cands = ["dis-%03d" % i for i in range(200)]
        k = next((c for c, o4, o5 in zip(cands, owners("cold", cands), owners("cold", cands, peers5))
                  if o4 != 0 and o5 == 0), None)
        if k is None:
            raise E.Fail("no key that gateway 5 sends to gateway 0 while gateway 0 does not own it")
        body = b"disagree " * 1000
        with open(os.path.join(origin.store, "cold", k), "wb") as f:
            f.write(body)
        r = get(g5.endpoint, "/cold/" + k)
        E.eq("status via the fifth gateway", r.status, 200)
        E.same_bytes("GET via the fifth gateway", r.body, body)
        E.eq("served by", r.h("x-s3cached-owner"), names[0])
        rid = r.h("x-amz-request-id")

        def lines():  # an access line is written once its answer went out: wait for both
            got = [ln for g in gws + [g5] for ln in open(g.log, errors="replace")
                   if " access %s " % rid in ln]
            return got if len(got) >= 2 else None
        got = E.wait_until(lines, timeout=10) or []
        E.eq("access lines with the request's id (client at gateway 5, peer at gateway 0)",
             len(got), 2)
    finally:
        g5.stop()
        g5.cleanup()


t.check("members that disagree: one hop to the believed owner, which serves it (no loop)",
        disagreeing_members)


def peer_auth():
    # the mark that makes a gateway serve a request itself (never forwarding it again) is
    # believed only from the peer key with the mark signed: anything else is refused, and a
    # client that adds the mark to its own signed request is relayed to the owner as usual
    k, o = ck[1], cown[1]
    n = (o + 1) % N
    mark = {"x-s3cached-peer": names[o]}
    base = ["host", "x-amz-date", "x-amz-content-sha256"]
    cases = [("the peer key with a wrong secret", dict(mark), "wrong" + PEER_SECRET, base + ["x-s3cached-peer"]),
             ("the peer key, the mark not signed", dict(mark), PEER_SECRET, base),
             ("the peer key without the mark", {}, PEER_SECRET, base)]
    for what, hd, sk, signed in cases:
        r = E.request(gws[n].endpoint, "GET", "/cold/" + k, headers=hd, ak="s3cached-peer", sk=sk,
                      signed=signed)
        E.eq("%s: status" % what, (r.status, r.h("x-s3cached-owner")), (403, None))
    r = E.request(gws[n].endpoint, "GET", "/cold/" + k, headers=dict(mark), ak=AK, sk=SK,
                  signed=base + ["x-s3cached-peer"])
    E.eq("a client's request with the mark signed: relayed to the owner", (r.status, r.h("x-s3cached-owner")),
         (200, names[o]))
    E.same_bytes("a client's request with the mark", r.body, cold[k])
    miss = ["peer-auth-%02d" % i for i in range(40)]
    mk = next(m for m, mo in zip(miss, owners("cold", miss)) if mo != n)
    r = E.request(gws[n].endpoint, "GET", "/cold/" + mk, headers={"x-s3cached-peer": names[0]},
                  ak="s3cached-peer", sk=PEER_SECRET, signed=base + ["x-s3cached-peer"])
    E.eq("a signed peer request for a key another gateway owns: served where it lands (404 here, "
         "no owner header)", (r.status, r.h("x-s3cached-owner")), (404, None))
    # a peer request captured on its way to one gateway (its signed Host is that gateway's)
    # and sent to another: refused there
    r = E.request(gws[n].endpoint, "GET", "/cold/" + mk, headers={"x-s3cached-peer": names[0]},
                  ak="s3cached-peer", sk=PEER_SECRET, signed=base + ["x-s3cached-peer"],
                  host=names[o])
    E.expect_error("a peer request signed for gateway %d, sent to gateway %d" % (o, n), r, 403,
                   "AccessDenied")


t.check("peer traffic is authenticated: the peer key with its secret and the signed mark, else 403; "
        "the mark from a client changes nothing; a peer request for another gateway: 403", peer_auth)


def invalidate_fans_out():
    k, o = ck[0], cown[0]
    before = objects_of(o)
    st, js = admin(gws[(o + 1) % N].endpoint, "DELETE", "/_/cache/cold/" + k)
    E.eq("DELETE /_/cache through a non-owner", (st, js.get("peers"), js.get("peers_failed")),
         (200, N - 1, 0))
    E.eq("the owner's cache.objects after the fan-out", objects_of(o), before - 1)
    st, js = admin(NEP, "POST", "/_/flush", "{}")
    E.eq("POST /_/flush through nginx", (st, js.get("flushed")), (200, True))
    E.eq("flush answered for every gateway", sorted(n["node"] for n in js["nodes"]), sorted(names))


t.check("DELETE /_/cache and POST /_/flush fan out to every gateway", invalidate_fans_out)

# --- cluster warm-ups ------------------------------------------------------------------------------

def cli(*args, timeout=90):
    return subprocess.run([E.BIN] + list(args), capture_output=True, timeout=timeout,
                          env=dict(os.environ, S3CACHED_ADMIN_TOKEN=TOKEN))


def wait_job(ep, jid, timeout=90):
    def over():
        st, j = admin(ep, "GET", "/_/warm/" + jid)
        return j if st == 200 and j.get("state") not in ("queued", "running") else None
    j = E.wait_until(over, timeout=timeout, every=0.1)
    if not j:
        raise E.Fail("warm job %s not over within %d s: %r" % (jid, timeout, admin(ep, "GET", "/_/warm/" + jid)))
    return j


def check_warmed(bucket, data, before, j):
    keys = sorted(data)
    own = owners(bucket, keys)
    share = [own.count(i) for i in range(N)]
    E.eq("job state, objects_total, objects_done, errors_total",
         (j["state"], j["objects_total"], j["objects_done"], j["errors_total"]),
         ("done", len(keys), len(keys), 0))
    got = {n["node"]: (n["state"], n["objects_total"], n["objects_done"]) for n in j["nodes"]}
    want = {names[i]: ("done", share[i], share[i]) for i in range(N) if share[i]}
    E.eq("the job's share per gateway (each gateway's keys on the ring)", got, want)
    gets = origin_gets(bucket)
    E.eq("origin GETs per object (each exactly once)", gets, {k: 1 for k in keys})
    after = [objects_of(i) for i in range(N)]
    E.eq("objects cached per gateway: exactly its share", [a - b for a, b in zip(after, before)],
         share)
    bad = []
    for k in keys:
        r = get(NEP, "/%s/%s" % (bucket, k))
        if r.status != 200 or r.body != data[k] or r.h("x-cache") != "hit":
            bad.append((k, r.status, r.h("x-cache"), len(r.body)))
    if bad:
        raise E.Fail("%d reads through nginx were not hits with the right bytes, e.g. %r"
                     % (len(bad), bad[:3]))
    E.eq("origin GETs after reading everything through nginx", origin_gets(bucket),
         {k: 1 for k in keys})


w1 = make_objects("warm1", NOBJ)
w2 = make_objects("warm2", NOBJ)


def warm_through_nginx():
    before = [objects_of(i) for i in range(N)]
    r = cli("warm", "--endpoint", NEP, "s3://warm1/")
    out = r.stdout.decode(errors="replace") + r.stderr.decode(errors="replace")
    E.eq("s3cached warm through nginx: exit status (output: %s)" % out[-600:], r.returncode, 0)
    if out.count("gateway 127.0.0.1:") != N:
        raise E.Fail("the CLI shows a line per gateway's share: %s" % out[-600:])
    jid = re.search(r"^job (c[0-9a-f]+)$", out, re.M)
    if not jid:
        raise E.Fail("the CLI names no cluster job: %s" % out[-600:])
    st, j = admin(NEP, "GET", "/_/warm/" + jid.group(1))
    E.eq("GET /_/warm/ID through nginx (any gateway finds the job)", st, 200)
    check_warmed("warm1", w1, before, j)


t.check("a warm job of %d objects through nginx (s3cached warm): each object read from the "
        "origin once, cached on exactly its owner, every read through nginx a hit" % NOBJ,
        warm_through_nginx)


def warm_direct():
    before = [objects_of(i) for i in range(N)]
    st, js = admin(gws[2].endpoint, "POST", "/_/warm",
                   json.dumps({"bucket": "warm2", "prefix": ""}))
    E.eq("POST /_/warm to one gateway", st, 202)
    check_warmed("warm2", w2, before, wait_job(gws[2].endpoint, js["job"]))


t.check("the same job posted to one gateway directly: the same result", warm_direct)


def warm_any_byte_keys():
    # a cluster warm-up hands each owner its keys in JSON: keys that are not UTF-8 (every
    # byte 0x80-0xFF) reach their owners whole, each cached there once
    d = os.path.join(os.fsencode(origin.store), b"warm3")
    os.makedirs(d, exist_ok=True)
    keys = [b"k" + bytes([x]) + b"k" for x in range(0x80, 0x100)]
    for k in keys:
        with open(os.path.join(d, k), "wb") as f:
            f.write(b"warm3 " + k)
    enc = [urllib.parse.quote(k, safe="/~") for k in keys]
    before = [objects_of(i) for i in range(N)]
    st, js = admin(gws[1].endpoint, "POST", "/_/warm", json.dumps({"bucket": "warm3", "prefix": ""}))
    E.eq("POST /_/warm of keys that are not UTF-8", st, 202)
    j = wait_job(gws[1].endpoint, js["job"])
    E.eq("job state, objects_done, errors_total",
         (j["state"], j["objects_done"], j["errors_total"]), ("done", len(keys), 0))
    after = [objects_of(i) for i in range(N)]
    E.eq("objects cached in the cluster", sum(after) - sum(before), len(keys))
    bad = []
    for k, e, o in zip(keys, enc, owners("warm3", enc)):
        r = get(gws[o].endpoint, "/warm3/" + e)
        if r.status != 200 or r.body != b"warm3 " + k or r.h("x-cache") != "hit":
            bad.append((k, r.status, r.h("x-cache")))
    E.eq("reads from the owners that were not hits with the right bytes", bad, [])


t.check("a cluster warm-up of keys that are not UTF-8: each cached on its owner, a hit there",
        warm_any_byte_keys)


def big_streams():
    # a large object read through non-owners by several slow readers at once: the owner's
    # answer streams through the bounded buffer (pausing), bytes right
    big = os.urandom(1 << 20) * 24
    os.makedirs(os.path.join(origin.store, "big"), exist_ok=True)
    with open(os.path.join(origin.store, "big", "blob"), "wb") as f:
        f.write(big)
    o = owners("big", ["blob"])[0]
    import threading
    errs = []

    def reader(i):
        import hashlib
        import socket
        g = gws[(o + 1 + i % (N - 1)) % N]
        hdrs = {"host": "127.0.0.1:%d" % g.port}
        E.sign_headers("GET", "/big/blob", "", hdrs, "UNSIGNED-PAYLOAD", AK, SK)
        sk = socket.create_connection(("127.0.0.1", g.port), timeout=60)
        sk.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        sk.sendall(("GET /big/blob HTTP/1.1\r\n" + "".join("%s: %s\r\n" % kv for kv in hdrs.items())
                    + "connection: close\r\n\r\n").encode())
        data = b""
        while True:
            d = sk.recv(65536)
            if not d:
                break
            data += d
            if i % 2 == 0 and len(data) < (8 << 20):
                time.sleep(0.002)  # a slow reader: the owner's answer waits in the buffer
        sk.close()
        body = data.partition(b"\r\n\r\n")[2]
        if hashlib.sha256(body).digest() != hashlib.sha256(big).digest():
            errs.append("reader %d: %d bytes, not the object" % (i, len(body)))

    th = [threading.Thread(target=reader, args=(i,)) for i in range(6)]
    for x in th:
        x.start()
    for x in th:
        x.join(120)
    if errs:
        raise E.Fail("; ".join(errs))
    E.eq("origin GETs of the large object", origin_gets("big").get("blob", 0) >= 1, True)


t.check("a 24 MiB object read through non-owners by 6 readers at once, 3 of them slow: right "
        "bytes (the relay pauses and resumes)", big_streams)


# --- cluster stats ---------------------------------------------------------------------------------

def cluster_stats():
    st, c = admin(NEP, "GET", "/_/stats?scope=cluster")
    E.eq("GET /_/stats?scope=cluster through nginx", (st, c.get("scope"), c.get("nodes_up"),
                                                      c.get("nodes_total")), (200, "cluster", N, N))
    per = [g.stats() for g in gws]
    want_out = sum(r["bytes_out"] for s in per for r in s["clients"] if r["client"] == AK)
    got = [r for r in c["clients"] if r["client"] == AK]
    if not got:
        raise E.Fail("no row of the client in the cluster's clients")
    # the client's bytes summed over the gateways (those it reached directly or through nginx)
    E.eq("the client's bytes_out over the cluster = the sum of its rows on every gateway",
         sum(r["bytes_out"] for r in got), want_out)
    if not any(len(r["nodes"]) > 1 for r in got):
        raise E.Fail("per-node rows of the client: %r" % [r["nodes"] for r in got])
    E.eq("peer traffic is not a client", [r for r in c["clients"] if r["addr"] == "(peer)"], [])
    if not c.get("peers"):
        raise E.Fail("the cluster document lists the gateways' traffic to each other apart")
    E.eq("cache.objects of the cluster = the sum of the gateways'", c["cache"]["objects"],
         sum(s["cache"]["objects"] for s in per))
    E.eq("nodes", sorted(n["node"] for n in c["nodes"] if n["up"]), sorted(names))
    r = cli("stats", "--cluster", "--endpoint", NEP)
    out = r.stdout.decode(errors="replace")
    E.eq("s3cached stats --cluster: exit status", r.returncode, 0)
    if "%d of %d gateways answered" % (N, N) not in out or AK not in out:
        raise E.Fail("s3cached stats --cluster output:\n" + out[-800:])
    m = gws[0].req("GET", "/_/metrics", headers={"Authorization": "Bearer " + TOKEN}, anon=True)
    text = m.body.decode()
    for fam in ("s3cached_node_info{node=\"%s\"} 1" % names[0], "s3cached_cluster_proxied_total",
                "s3cached_peer_sent_bytes_total{peer="):
        if fam not in text:
            raise E.Fail("/_/metrics has no %s" % fam)
    # the Grafana dashboard (its cluster row included) queries only names a gateway exports
    dash = json.load(open(os.path.join(E.REPO, "deploy", "grafana", "s3cached-dashboard.json")))
    exprs = [tg.get("expr") or "" for pn in dash.get("panels", []) for tg in pn.get("targets", [])]
    exprs += [v.get("query") if isinstance(v.get("query"), str) else (v.get("query") or {}).get("query", "")
              for v in (dash.get("templating") or {}).get("list", [])]
    have = set(re.findall(r"^(s3cached_[a-z0-9_]+)", text, re.M))
    missing = sorted(set(n for e in exprs if e for n in re.findall(r"s3cached_[a-z0-9_]+", e)) - have)
    if missing:
        raise E.Fail("the dashboard queries names a cluster gateway does not export: %s" % missing)
    pc = subprocess.run([os.path.join(E.HERE, "promcheck.sh"), gws[0].endpoint + "/_/metrics",
                         TOKEN], capture_output=True, timeout=60)
    if pc.returncode == 77:
        print("       # promtool not installed: the exposition format is not checked")
    elif pc.returncode != 0:
        raise E.Fail("promtool rejects a cluster gateway's /_/metrics: %s" % pc.stderr.decode()[-400:])


t.check("cluster stats: /_/stats?scope=cluster and s3cached stats --cluster merge every "
        "gateway's clients; peers apart; /_/metrics per node with its name", cluster_stats)


def dns_membership():
    # --peers dns:NAME:PORT: every address of NAME (here localhost: 127.0.0.1, and ::1 where
    # it resolves), sorted, this gateway listed by --self ADDR:PORT
    p = E.free_port()
    g = gateway(p, "dns:localhost:%d" % p, "127.0.0.1:%d" % p)
    g.start()
    try:
        c = g.stats()["cluster"]
        if not (c["members"] >= 1 and c["self_listed"] and c["ring_generation"] == 1):
            raise E.Fail("the ring of dns:localhost: %r" % c)
        r = get(g.endpoint, "/cold/" + ck[6])
        E.same_bytes("a read through a gateway of a dns: ring", r.body, cold[ck[6]])
    finally:
        g.stop()
        g.cleanup()


t.check("--peers dns:NAME:PORT: the ring is every address of NAME, --self listed in it",
        dns_membership)


def bad_membership():
    # a gateway that cannot know its place in the ring refuses to start, saying why
    d = os.path.join(tmp, "badm")
    os.makedirs(os.path.join(d, "store"), exist_ok=True)
    base = [E.BIN, "serve", "--listen", "127.0.0.1:%d" % E.free_port(), "--cache-dir",
            os.path.join(d, "cache"), "--backend", "file://" + os.path.join(d, "store"),
            "--access-key", AK, "--secret-key", SK]
    cases = [(["--peers", PEERS, "--peer-secret", PEER_SECRET], "--peers needs --self"),
             (["--peers", PEERS, "--self", names[0]], "--peers needs --peer-secret"),
             (["--peers", PEERS, "--self", "127.0.0.1:1", "--peer-secret", PEER_SECRET],
              "is not one of the --peers entries"),
             (["--peers", names[0] + " wieght=2", "--self", names[0], "--peer-secret", PEER_SECRET],
              "unknown parameter")]
    env = dict(os.environ)
    env.pop("S3CACHED_ADMIN_TOKEN", None)
    for extra, want in cases:
        r = subprocess.run(base + extra, capture_output=True, timeout=30, env=env)
        err = r.stderr.decode(errors="replace")
        if r.returncode == 0 or want not in err:
            raise E.Fail("serve %s: exit %d, want an error with %r: %s"
                         % (" ".join(extra), r.returncode, want, err[-300:]))


t.check("--peers without --self or a peer key, a --self not listed, a misspelt parameter: "
        "serve refuses to start and says why", bad_membership)


# --- a gateway killed during a warm job ------------------------------------------------------

def kill_during_warm():
    w4 = make_objects("warm4", 60)
    keys = sorted(w4)
    own = owners("warm4", keys)
    victim = next(i for i in range(1, N) if own.count(i))
    relay.hold_after(0)  # the origin answers nothing for now: the shares stay running
    try:
        st, js = admin(gws[0].endpoint, "POST", "/_/warm",
                       json.dumps({"bucket": "warm4", "keys": keys}))
        E.eq("POST /_/warm", st, 202)
        jid = js["job"]

        def handed_out():
            st, j = admin(gws[0].endpoint, "GET", "/_/warm/" + jid)
            return j if st == 200 and j["nodes"] and all(n["job"] for n in j["nodes"]) else None
        j = E.wait_until(handed_out, timeout=30)
        if not j:
            raise E.Fail("shares not handed out: %r" % (admin(gws[0].endpoint, "GET", "/_/warm/" + jid),))
        gws[victim].proc.send_signal(signal.SIGKILL)
        gws[victim].proc.wait(10)
        gws[victim].proc = None
    finally:
        relay.release()
    t0 = time.time()
    j = wait_job(gws[0].endpoint, jid, timeout=60)
    E.eq("the job ends (failed) without waiting for the dead gateway", j["state"], "failed")
    by = {n["node"]: n for n in j["nodes"]}
    dead = by[names[victim]]
    E.eq("the dead gateway's share", dead["state"], "failed")
    if "unreachable" not in dead.get("message", ""):
        raise E.Fail("the dead gateway's share says why: %r" % dead)
    others = {k: (v["state"], v["objects_done"], v["objects_total"]) for k, v in by.items()
              if k != names[victim]}
    E.eq("the other shares complete", others,
         {names[i]: ("done", own.count(i), own.count(i)) for i in range(N)
          if i != victim and own.count(i)})
    E.eq("objects_done = every share but the dead gateway's", j["objects_done"],
         len(keys) - own.count(victim))
    print("       # the job ended %.1f s after the kill" % (time.time() - t0))
    st, c = admin(gws[0].endpoint, "GET", "/_/stats?scope=cluster")
    E.eq("cluster stats still answer", (st, c["nodes_total"], c["nodes_up"]), (200, N, N - 1))
    down = [n for n in c["nodes"] if not n["up"]]
    E.eq("the dead gateway is marked down", [n["node"] for n in down], [names[victim]])


t.check("kill -9 of a gateway during a warm job: its share fails, the others complete, the job "
        "ends; cluster stats mark it down", kill_during_warm)


def fanout_with_a_dead_gateway():
    # the gateway killed above is still down: the fan-outs answer at once, naming it
    victim = next((i for i, g in enumerate(gws) if g.proc is None), None)
    if victim is None:
        raise E.Fail("no gateway was killed")
    t0 = time.time()
    st, js = admin(gws[0].endpoint, "DELETE", "/_/cache/cold/" + ck[7])
    E.eq("DELETE /_/cache with a gateway down: answered, that gateway failed",
         (st, js.get("peers"), js.get("peers_failed")), (200, N - 1, 1))
    st, js = admin(gws[0].endpoint, "POST", "/_/flush", "{}")
    E.eq("POST /_/flush with a gateway down: 504, not flushed", (st, js.get("flushed")), (504, False))
    by = {n["node"]: n for n in js.get("nodes", [])}
    E.eq("the flush's line per gateway", sorted(by), sorted(names))
    E.eq("the dead gateway's line", (by[names[victim]]["flushed"], "error" in by[names[victim]]),
         (False, True))
    E.eq("the live gateways flushed", sorted(n for n, v in by.items() if v["flushed"]),
         sorted(n for i, n in enumerate(names) if i != victim))
    print("       # both answered in %.1f s" % (time.time() - t0))


t.check("with a gateway down, DELETE /_/cache and POST /_/flush still answer and name it",
        fanout_with_a_dead_gateway)


def owner_down_and_back():
    # the gateway killed above owns keys of warm1, which it cached before it died
    victim = next((i for i, g in enumerate(gws) if g.proc is None), None)
    if victim is None:
        raise E.Fail("no gateway was killed")
    keys = sorted(w1)
    k = next(k for k, o in zip(keys, owners("warm1", keys)) if o == victim)
    other = gws[(victim + 1) % N]
    before = other.stats()["cluster"]
    r = get(other.endpoint, "/warm1/" + k)
    E.eq("a read of the dead owner's key through another gateway", r.status, 200)
    E.same_bytes("served there instead", r.body, w1[k])
    new = b"written while its owner was down " * 100
    r = get(other.endpoint, "/warm1/" + k, method="PUT", body=new)
    E.eq("a PUT while the owner is down is still acknowledged", r.status, 200)
    after = other.stats()["cluster"]
    E.eq("counted: a fallback read, a notice that could not be delivered",
         (after["proxy_fallbacks"] - before["proxy_fallbacks"],
          after["invalidations_failed"] - before["invalidations_failed"] >= 1), (1, True))
    gws[victim].start()  # same port, same cache: it still holds the old bytes of k
    r = get(gws[victim].endpoint, "/warm1/" + k)
    E.eq("the restarted owner revalidates what it cached before (--revalidate-after never)",
         (r.status, r.body == new), (200, True))
    r = get(NEP, "/warm1/" + k)
    E.same_bytes("the new bytes through nginx", r.body, new)


t.check("while an owner is down its keys are served by another gateway and a write is still "
        "acknowledged; once back, it revalidates what it cached before", owner_down_and_back)

# --- the end: every server stops cleanly ------------------------------------------------------
for g in gws:
    if g.proc is not None:
        g.stop()
origin.stop()
sys.exit(t.finish())
