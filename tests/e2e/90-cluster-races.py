#!/usr/bin/env python3
"""90-cluster-races: two write-back gateways A and B peered into one cache, over an origin
s3cached (their S3 backend); B reaches the origin through a relay the test can hold, so a
backend answer arrives exactly when the test wants. --revalidate-after never (the setting the
docs recommend for immutable data sets), --peer-timeout 2s.
  - a resync racing a revalidation in flight (issue 45 item 2): B's HEAD of a key it cached is
    answered by the origin, held in the relay, the object is overwritten on the origin and B
    told to resync, then the old answer is let through: the next read through either gateway
    gets the new bytes (before the fix: the old answer stamped the old version fresh, for
    good), and a read that arrives after the resync while the old HEAD is still on its way
    gets the new bytes too (it does not join the older lookup). Run on several keys.
  - stalled proxied readers (item 3): 64 GETs through A of an object B owns, from one client
    (source address 127.0.0.2), that are never read. Meanwhile another client's proxied read
    through A answers at once with the right bytes, a PUT through A (its write notice to B) is
    answered within about one --peer-timeout, A holds at most 16 proxied reads for that
    client (the rest are counted in `proxy_limited` and, write-back, answered 503 SlowDown
    rather than from the backend), and A's memory stays bounded.
    Before the fix: the 64 reads took every connection to B, the other read waited 20 s and
    the notice queued behind them.
  - write-back in a cluster (item 4): objects cached on their owners, then overwritten through
    each gateway (PUT, and a multipart upload through the gateway that does not own the key):
    every read through both gateways gets the new bytes at once; after POST /_/flush (200) the
    origin holds the new bytes and the reads still get them, and A told B of each object it
    drained. Before the fix: the owner served the backend's old object while the new one was
    dirty on the gateway that took the write.
  - a key dirty on its owner B (B's drain held in the relay), then written through A: the
    newer write is read through both gateways and is what the origin holds after B's flush
    (B dropped its older dirty copy and cancelled its drain).
"""
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2elib as E  # noqa: E402

t = E.Suite("90-cluster-races")
TOOL = os.path.join(os.path.dirname(os.path.abspath(E.BIN)), "ring-owner")
AK, SK = "AKRACE" + os.urandom(3).hex().upper(), os.urandom(20).hex()
PEER_SECRET = "peer" + os.urandom(8).hex()
TIMEOUT_S = 2.0
SLACK_S = 2.5  # what a loaded machine may add to one peer-timeout
BKT = "races"
RACES = min(40, int(os.environ.get("RACE_RUNS", "4")))  # b_keys[:40] are the races' keys

origin = E.Server(t)
origin.start()
os.makedirs(os.path.join(origin.store, BKT), exist_ok=True)
relay_b = E.Relay(origin.port)
pa, pb = E.free_port(), E.free_port()
while pb == pa:
    pb = E.free_port()
NAME_A, NAME_B = "127.0.0.1:%d" % pa, "127.0.0.1:%d" % pb
PEERS = NAME_A + "," + NAME_B


def gateway(port, self_name, backend_port):
    g = E.Server(t, auth=["--access-key", AK, "--secret-key", SK], port=port,
                 extra=["--backend", "http://127.0.0.1:%d" % backend_port,
                        "--backend-access-key", origin.ak, "--backend-secret-key", origin.sk,
                        "--peers", PEERS, "--self", self_name, "--peer-secret", PEER_SECRET,
                        "--peer-timeout", "%gs" % TIMEOUT_S, "--revalidate-after", "never",
                        "--backend-timeout", "20s", "--write-mode", "back"])
    g.ak, g.sk = AK, SK
    return g


THROTTLE = os.path.join(os.path.dirname(os.path.abspath(E.BIN)), "throttle")
SLOW_BPS = 4 << 20  # A's link to the origin: a drain of a few MiB takes seconds
tport = E.free_port()
thr = subprocess.Popen([THROTTLE, str(tport), str(origin.port), str(SLOW_BPS)],
                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
if b"ready" not in thr.stdout.readline():
    thr.kill()
    raise SystemExit("throttle did not start")
A = gateway(pa, NAME_A, tport)
B = gateway(pb, NAME_B, relay_b.port)
A.start()
B.start()
GW = {"A": A, "B": B}


def cleanup():
    relay_b.close()
    if thr.poll() is None:
        thr.terminate()
        thr.wait()


import atexit  # noqa: E402
atexit.register(cleanup)


def owners(keys):
    r = subprocess.run([TOOL, "--uri", "--peers", PEERS],
                       input="".join("/%s/%s\n" % (BKT, k) for k in keys).encode(),
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
    if r.returncode != 0:
        raise E.Fail("ring-owner: %s" % r.stderr.decode(errors="replace")[-300:])
    return [ln.split("\t")[0] for ln in r.stdout.decode().splitlines()]


cand = ["k-%04d" % i for i in range(400)]
own = dict(zip(cand, owners(cand)))
b_keys = [k for k in cand if own[k] == NAME_B]
a_keys = [k for k in cand if own[k] == NAME_A]


def put_origin(k, data):
    """Writes the backend's object (through the origin's own S3 API, so that the origin's
    cache has it at once), as a write through some other gateway would."""
    r = origin.req("PUT", "/%s/%s" % (BKT, k), body=data)
    E.eq("PUT %s on the origin: status" % k, r.status, 200)


def origin_bytes(k):
    with open(os.path.join(origin.store, BKT, k), "rb") as f:
        return f.read()


def get(g, k, timeout=30):
    return E.request(g.endpoint, "GET", "/%s/%s" % (BKT, k), ak=AK, sk=SK, timeout=timeout)


def read_ok(what, g, k, want):
    r = get(g, k)
    E.eq("%s: status" % what, r.status, 200)
    E.same_bytes(what, r.body, want)


def resync(g, sender):
    base = ["host", "x-amz-date", "x-amz-content-sha256", "x-s3cached-peer"]
    r = E.request(g.endpoint, "POST", "/_/resync", headers={"x-s3cached-peer": sender},
                  ak="s3cached-peer", sk=PEER_SECRET, signed=base)
    E.eq("resync of %s: status" % g.endpoint, r.status, 200)


def origin_heads(k):
    n = 0
    for ln in open(origin.log, errors="replace"):
        if " HEAD " in ln and "/%s/%s " % (BKT, k) in ln and " access " in ln:
            n += 1
    return n


def cluster(g):
    return g.stats()["cluster"]


def rss_kib(pid):
    for ln in open("/proc/%d/status" % pid):
        if ln.startswith("VmRSS:"):
            return int(ln.split()[1])
    return 0


# --- item 2: a resync racing a revalidation in flight ------------------------------------------

def resync_race():
    for i, k in enumerate(b_keys[:RACES]):
        old, new = (b"old %d " % i) * 100, (b"new %d " % i) * 150
        put_origin(k, old)
        read_ok("race %d: cached on B" % i, B, k, old)
        resync(B, NAME_A)  # what B cached is suspect: its next read revalidates
        heads = origin_heads(k)
        relay_b.hold_after(0)  # the origin's answers to B wait in the relay
        first = {}
        th = threading.Thread(target=lambda: first.update(r=get(B, k)), daemon=True)
        th.start()
        if not E.wait_until(lambda: origin_heads(k) > heads, timeout=20):
            relay_b.release()
            raise E.Fail("race %d: B's revalidation never reached the origin" % i)
        put_origin(k, new)       # written after the origin answered B's HEAD with the old one
        resync(B, NAME_A)        # ... and B told: everything cached before now is suspect
        late = {}
        th2 = None
        if i % 2:  # odd runs: a read after the resync, while the old answer is on its way
            th2 = threading.Thread(target=lambda: late.update(r=get(B, k)), daemon=True)
            th2.start()
            time.sleep(0.3)
        else:
            time.sleep(0.1)
        relay_b.release()
        th.join(30)
        E.eq("race %d: the read in flight during the resync: status" % i,
             first.get("r") and first["r"].status, 200)
        if first["r"].body not in (old, new):
            raise E.Fail("race %d: the read in flight got bytes of neither version" % i)
        if th2 is None:  # even runs: the old answer alone must not make the old version fresh
            read_ok("race %d: the next read through B (owner)" % i, B, k, new)
            read_ok("race %d: the next read through A (proxied)" % i, A, k, new)
            continue
        th2.join(30)
        E.eq("race %d: a read that came after the resync: status" % i,
             late.get("r") and late["r"].status, 200)
        E.same_bytes("race %d: a read that came after the resync (not joined to the older "
                     "lookup)" % i, late["r"].body, new)
        read_ok("race %d: the next read through A (proxied)" % i, A, k, new)


t.check("a resync racing a revalidation in flight: the old answer does not make the old "
        "version fresh (%d runs)" % RACES, resync_race)


# --- item 3: stalled proxied readers ---------------------------------------------------------

BIG = 16 << 20
STALLERS = 64


def raw_get(k, src):
    """A signed GET of /BKT/k from source address @src, never read: the socket."""
    path = "/%s/%s" % (BKT, k)
    hd = {"host": NAME_A}
    E.sign_headers("GET", path, "", hd, E.sha(b""), AK, SK)
    head = "GET %s HTTP/1.1\r\n" % path + "".join("%s: %s\r\n" % kv for kv in hd.items()) + "\r\n"
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.bind((src, 0))
    s.connect(("127.0.0.1", pa))
    s.sendall(head.encode())
    return s


def stalled_readers():
    big_k, other_k, put_k = b_keys[40], b_keys[41], a_keys[40]
    big = os.urandom(BIG)
    other = b"other " * 5000
    put_origin(big_k, big)
    put_origin(other_k, other)
    read_ok("the big object cached on B", B, big_k, big)
    before = cluster(A)
    rss0 = rss_kib(A.proc.pid)
    socks = []
    try:
        for _ in range(STALLERS):
            socks.append(raw_get(big_k, "127.0.0.2"))
        time.sleep(3)  # every stalled read has started and filled what buffers it may
        t0 = time.time()
        try:
            r = get(A, other_k, timeout=30)
        except OSError as e:
            raise E.Fail("another client's read through A while %d proxied reads stall: no "
                         "answer within 30 s (%s)" % (STALLERS, e))
        dt = time.time() - t0
        E.eq("another client's read through A while %d proxied reads stall: status" % STALLERS,
             r.status, 200)
        E.same_bytes("another client's read", r.body, other)
        if dt > TIMEOUT_S + SLACK_S:
            raise E.Fail("another client's read took %.1f s (want < %.1f s)"
                         % (dt, TIMEOUT_S + SLACK_S))
        s3a = A.boto3(read_timeout=60)
        t0 = time.time()
        s3a.put_object(Bucket=BKT, Key=put_k, Body=b"written meanwhile")
        dt = time.time() - t0
        if dt > TIMEOUT_S + SLACK_S:
            raise E.Fail("a PUT through A (a write notice to B) took %.1f s while the proxied "
                         "reads stall (want < %.1f s: control messages never queue behind "
                         "clients' reads)" % (dt, TIMEOUT_S + SLACK_S))
        read_ok("the key written meanwhile, through B", B, put_k, b"written meanwhile")
        c = cluster(A)
        E.eq("proxied reads open on A for the stalling client (at most 16)",
             c.get("proxy_streams", 99) <= 16 + 1, True)  # + the other client's, ended
        limited = c.get("proxy_limited", 0) - before.get("proxy_limited", 0)
        if limited < STALLERS - 16:
            raise E.Fail("A served %d of the stalled reads itself (want >= %d: one client "
                         "holds at most 16 proxied reads)" % (limited, STALLERS - 16))
        grown = (rss_kib(A.proc.pid) - rss0) / 1024.0
        if grown > 160:
            raise E.Fail("A's RSS grew by %.0f MiB with %d stalled readers (want < 160: 16 "
                         "proxied reads of 1 MiB each, the rest within --fill-memory)"
                         % (grown, STALLERS))
        E.eq("B is not counted behind (it was told of the PUT)", cluster(A)["peers_behind"], 0)
        # write-back: B may hold a version the backend has not got, so A does not answer a
        # read over the limits from the backend: 503 SlowDown (the last ones opened)
        socks[-1].settimeout(20)
        head = b""
        try:
            while b"\r\n\r\n" not in head and len(head) < 65536:
                chunk = socks[-1].recv(4096)
                if not chunk:
                    break
                head += chunk
        except OSError:
            pass
        E.eq("a read over the limits (write-back): status line", head.split(b"\r\n")[0][:12],
             b"HTTP/1.1 503")
    finally:
        for s in socks:
            s.close()
    E.wait_until(lambda: cluster(A).get("proxy_streams", 0) == 0, timeout=20)
    E.eq("the stalled proxied reads are gone once their clients left",
         cluster(A).get("proxy_streams", 0), 0)


t.check("64 stalled proxied reads from one client: other reads and write notices unaffected, "
        "memory bounded", stalled_readers)


# --- item 4: write-back in a cluster ---------------------------------------------------------

def admin(g, method, path, body=None, timeout=60):
    rq = urllib.request.Request(g.endpoint + path, data=body, method=method,
                                headers={"Authorization": "Bearer " + g.token})
    try:
        with urllib.request.urlopen(rq, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def write_back_cluster():
    wa = a_keys[50:54] + b_keys[50:54]   # written through A
    wb = a_keys[54:58] + b_keys[54:58]   # written through B
    old = {k: b"old version of " + k.encode() * 50 for k in wa + wb}
    # large enough that A's drain across its slow link takes a while: a read meanwhile
    # through the owner must not get the backend's old object
    new = {k: os.urandom(4 << 20) for k in wa + wb}
    for k in wa + wb:
        put_origin(k, old[k])
        for n, g in GW.items():
            read_ok("%s cached, read through %s" % (k, n), g, k, old[k])
    clients = {"A": A.boto3(read_timeout=60), "B": B.boto3(read_timeout=60)}
    sent_before = cluster(A)["invalidations_sent"]
    for name, keys in (("A", wa), ("B", wb)):
        for k in keys:
            clients[name].put_object(Bucket=BKT, Key=k, Body=new[k])
    # a multipart upload through the gateway that does not own the key
    mk = b_keys[60]
    put_origin(mk, b"old multipart")
    read_ok("multipart key cached on B", B, mk, b"old multipart")
    parts = [os.urandom(5 << 20), b"tail" * 1000]
    up = clients["A"].create_multipart_upload(Bucket=BKT, Key=mk)["UploadId"]
    done = []
    for i, p in enumerate(parts, 1):
        r = clients["A"].upload_part(Bucket=BKT, Key=mk, UploadId=up, PartNumber=i, Body=p)
        done.append({"PartNumber": i, "ETag": r["ETag"]})
    clients["A"].complete_multipart_upload(Bucket=BKT, Key=mk, UploadId=up,
                                           MultipartUpload={"Parts": done})
    new[mk] = b"".join(parts)
    for k in wa + wb + [mk]:
        for n, g in GW.items():
            read_ok("%s (owner %s) read through %s right after the write"
                    % (k, "A" if own[k] == NAME_A else "B", n), g, k, new[k])
    st, body = admin(A, "POST", "/_/flush")
    E.eq("POST /_/flush through A: status (%s)" % body[:200], st, 200)
    # A's writes were one notice each (8 PUTs, 1 CompleteMultipartUpload); each of the 4 it
    # kept dirty (its own keys) is told again once drained, before the flush answers
    drained_notices = cluster(A)["invalidations_sent"] - sent_before - (len(wa) + 1)
    if drained_notices < 4:
        raise E.Fail("A told B of %d drains (want >= 4: every object it drained)"
                     % drained_notices)
    for k in wa + wb + [mk]:
        E.same_bytes("%s on the origin after the flush" % k, origin_bytes(k), new[k])
        for n, g in GW.items():
            read_ok("%s read through %s after the flush" % (k, n), g, k, new[k])


t.check("write-back in a cluster: every read through every gateway gets the new bytes, "
        "before and after the drain", write_back_cluster)


def dirty_then_written_elsewhere():
    # B owns k and holds it dirty (its drain's answer held in the relay); then k is written
    # through A, which does not own it: written through to the origin, B told. B's older
    # dirty copy must go (and its drain with it), or B serves it and may upload it over the
    # newer object.
    for i, k in enumerate(b_keys[70:73]):
        v_b, v_a = b"written through B %d " % i * 300, b"then through A %d " % i * 200
        relay_b.hold_after(0)
        try:
            B.boto3(read_timeout=60).put_object(Bucket=BKT, Key=k, Body=v_b)
            A.boto3(read_timeout=60).put_object(Bucket=BKT, Key=k, Body=v_a)
        finally:
            relay_b.release()
        for n, g in GW.items():
            read_ok("round %d: %s, dirty on B then written through A, read through %s"
                    % (i, k, n), g, k, v_a)
        st, body = admin(B, "POST", "/_/flush")
        E.eq("round %d: POST /_/flush through B: status" % i, st, 200)
        E.same_bytes("round %d: %s on the origin after the flush" % (i, k), origin_bytes(k), v_a)
        for n, g in GW.items():
            read_ok("round %d: %s after the flush, through %s" % (i, k, n), g, k, v_a)


t.check("a dirty copy on the owner, then a write of the key through the other gateway: the "
        "newer write wins everywhere", dirty_then_written_elsewhere)

for g in (A, B):
    g.stop()
origin.stop()
sys.exit(t.finish())
