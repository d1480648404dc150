#!/usr/bin/env python3
"""89-peer-hung: a cluster of two gateways where one stops answering its peer. A and B share
an origin s3cached (their S3 backend), --revalidate-after never, --peer-timeout 2s, A with
--workers 2. B's ring name is a small python socket server in front of it: it relays, or
"hangs" (accepts TCP, reads what A sends and never answers, as a stuck process would), or
relays again ("B comes back"). Clients read B on its own port meanwhile.
  - B hung: a DeleteObjects of 50 keys through A is answered within about one peer-timeout
    (one notice carrying the 50 keys, not 50 waits of 2 s); A then counts B behind, and a
    PUT through A is answered at once (B is owed a resync: not waited for again), and so is
    a read through A of a key B owns (served by A from the backend, not proxied to B);
  - B back: A's resync reaches it (peers_behind 0) and B, which had cached the keys, serves
    none of what changed while it was away: the overwritten key's new bytes, 404 for the
    deleted ones;
  - B hung, a PUT through A, then A restarted: A still owes B its resync (kept in its cache
    directory) and B, back, serves the new bytes;
  - B hung again: four DeleteObjects of 10 keys at once through A (2 workers) end within
    about one peer-timeout, and an unrelated cold GET through A meanwhile is not delayed (the
    notices wait on the transfer thread, not on workers).
Before the fix: 2 s per key and per notice, a worker held all along (50 keys: ~100 s), and B
served the old bytes for good after it came back.
"""
import os
import socket
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2elib as E  # noqa: E402

t = E.Suite("89-peer-hung")
TOOL = os.path.join(os.path.dirname(os.path.abspath(E.BIN)), "ring-owner")
AK, SK = "AKHUNG" + os.urandom(3).hex().upper(), os.urandom(20).hex()
PEER_SECRET = "peer" + os.urandom(8).hex()
TIMEOUT_S = 2.0
SLACK_S = 2.5  # what a loaded machine may add to one peer-timeout
BKT = "hungb"


class HangProxy:
    """B's ring address: relays to B's port, or, hung, accepts and reads but never answers
    (and forwards nothing, on new connections and on those already open)."""

    def __init__(self, target_port):
        self.target = target_port
        self.hung = False
        self.mu = threading.Lock()
        self.socks = set()
        self.lsock = socket.socket()
        self.lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.lsock.bind(("127.0.0.1", 0))
        self.lsock.listen(256)
        self.port = self.lsock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                c, _ = self.lsock.accept()
            except OSError:
                return
            with self.mu:
                self.socks.add(c)
                hung = self.hung
            if hung:
                threading.Thread(target=self._swallow, args=(c,), daemon=True).start()
                continue
            try:
                u = socket.create_connection(("127.0.0.1", self.target), timeout=10)
                u.settimeout(None)
            except OSError:
                c.close()
                continue
            with self.mu:
                self.socks.add(u)
            threading.Thread(target=self._pump, args=(c, u), daemon=True).start()
            threading.Thread(target=self._pump, args=(u, c), daemon=True).start()

    def _swallow(self, c):
        try:
            while c.recv(1 << 16):
                pass
        except OSError:
            pass

    def _pump(self, src, dst):
        try:
            while True:
                data = src.recv(1 << 16)
                if not data:
                    break
                if not self.hung:
                    dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def hang(self):
        with self.mu:
            self.hung = True

    def release(self):
        """B comes back: what was stuck is closed, new connections relay."""
        with self.mu:
            self.hung = False
            socks, self.socks = list(self.socks), set()
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def close(self):
        self.release()
        self.lsock.close()


# --- the origin, B behind the proxy, A -----------------------------------------------------------

origin = E.Server(t)
origin.start()
os.makedirs(os.path.join(origin.store, BKT), exist_ok=True)
pa, pb = E.free_port(), E.free_port()
while pb == pa:
    pb = E.free_port()
proxy = HangProxy(pb)
NAME_A, NAME_B = "127.0.0.1:%d" % pa, "127.0.0.1:%d" % proxy.port
PEERS = NAME_A + "," + NAME_B


def gateway(port, self_name, extra=()):
    g = E.Server(t, auth=["--access-key", AK, "--secret-key", SK], port=port,
                 extra=["--backend", "http://127.0.0.1:%d" % origin.port,
                        "--backend-access-key", origin.ak, "--backend-secret-key", origin.sk,
                        "--peers", PEERS, "--self", self_name, "--peer-secret", PEER_SECRET,
                        "--peer-timeout", "%gs" % TIMEOUT_S, "--revalidate-after", "never",
                        "--backend-timeout", "20s"] + list(extra))
    g.ak, g.sk = AK, SK
    return g


A = gateway(pa, NAME_A, ["--workers", "2"])
B = gateway(pb, NAME_B)
A.start()
B.start()
s3a = A.boto3(read_timeout=30)


def owners(keys):
    r = subprocess.run([TOOL, "--uri", "--peers", PEERS],
                       input="".join("/%s/%s\n" % (BKT, k) for k in keys).encode(),
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
    if r.returncode != 0:
        raise E.Fail("ring-owner: %s" % r.stderr.decode(errors="replace")[-300:])
    return [ln.split("\t")[0] for ln in r.stdout.decode().splitlines()]


def put_origin(k, data):
    with open(os.path.join(origin.store, BKT, k), "wb") as f:
        f.write(data)


def get(g, k):
    return E.request(g.endpoint, "GET", "/%s/%s" % (BKT, k), ak=AK, sk=SK, timeout=30)


def cluster(g):
    return g.stats()["cluster"]


def behind(g):
    """Gateways @g counts behind (0 where it has no such figure: the staleness checks that
    follow are what fail then)."""
    return cluster(g).get("peers_behind", 0)


def delete_objects(keys):
    t0 = time.time()
    r = s3a.delete_objects(Bucket=BKT, Delete={"Objects": [{"Key": k} for k in keys],
                                               "Quiet": True})
    if r.get("Errors"):
        raise E.Fail("DeleteObjects errors: %s" % r["Errors"][:3])
    return time.time() - t0


cand = ["k-%04d" % i for i in range(400)]
own = dict(zip(cand, owners(cand)))
b_keys = [k for k in cand if own[k] == NAME_B]
a_keys = [k for k in cand if own[k] == NAME_A]
DEL50 = cand[:50]                              # deleted while B hangs (B caches its share)
B_CACHED = [k for k in DEL50 if own[k] == NAME_B][:8]
OVER = [k for k in b_keys if k not in DEL50][0]  # overwritten through A while B hangs
DEL4 = [[k for k in cand[100:200] if k not in (OVER,)][i * 10:(i + 1) * 10] for i in range(4)]
COLD = [k for k in a_keys if k >= "k-0300"][:2]  # never read before: a miss on A
OLD = {k: ("old %s " % k).encode() * 150 for k in cand}


def setup():
    if len(B_CACHED) < 3 or len(COLD) < 2:
        raise E.Fail("the ring gave B %d of the 50 keys, A %d cold keys" % (len(B_CACHED), len(COLD)))
    for k in cand:
        put_origin(k, OLD[k])
    for k in B_CACHED + [OVER]:
        get(B, k)
        r = get(B, k)
        E.eq("%s read twice through B, its owner" % k, (r.status, r.body == OLD[k], r.h("x-cache")),
             (200, True, "hit"))


t.check("B caches its keys (read through B itself)", setup)


def hung_writes_take_one_timeout():
    proxy.hang()
    took = delete_objects(DEL50)
    print("       # DeleteObjects of 50 keys with B hung: %.2f s" % took)
    if took > TIMEOUT_S + SLACK_S:
        raise E.Fail("DeleteObjects of 50 keys took %.1f s with B hung (peer-timeout %g s)"
                     % (took, TIMEOUT_S))
    E.eq("A counts B behind", cluster(A)["peers_behind"], 1)
    t0 = time.time()
    new = b"NEW bytes written while B hung " * 100
    s3a.put_object(Bucket=BKT, Key=OVER, Body=new)
    took = time.time() - t0
    print("       # PUT with B hung and owed a resync: %.2f s" % took)
    if took > TIMEOUT_S + SLACK_S:
        raise E.Fail("PUT took %.1f s with B hung" % took)
    OLD[OVER] = new
    k = [x for x in b_keys if x not in DEL50 and x != OVER and x not in sum(DEL4, [])][0]
    t0 = time.time()
    r = get(A, k)
    took = time.time() - t0
    print("       # a read through A of a key B owns, B hung and behind: %.2f s" % took)
    E.eq("that read: served by A from the backend", (r.status, r.body == OLD[k]), (200, True))
    if took > 1.0:
        raise E.Fail("a read of B's key through A waited %.1f s for B, known behind" % took)


t.check("B hung: a DeleteObjects of 50 keys and a PUT through A each end within about one "
        "peer-timeout; a read of B's key through A does not wait for B", hung_writes_take_one_timeout)


def back_and_not_stale():
    proxy.release()
    t0 = time.time()
    if not E.wait_until(lambda: behind(A) == 0, timeout=15):
        raise E.Fail("A still counts B behind 15 s after B came back: %s" % cluster(A))
    print("       # A's resync reached B %.1f s after it came back" % (time.time() - t0))
    r = get(B, OVER)
    E.eq("B, back, serves the key overwritten while it hung: the new bytes",
         (r.status, r.body == OLD[OVER]), (200, True))
    for k in B_CACHED:
        E.eq("B, back, serves %s deleted while it hung" % k, get(B, k).status, 404)
    E.eq("resyncs confirmed", cluster(A).get("resyncs", 0) >= 1, True)


t.check("B back: it serves nothing that changed while it hung (--revalidate-after never)",
        back_and_not_stale)


def workers_not_held():
    proxy.hang()
    took = [None] * 4
    errs = []

    def one(i):
        try:
            took[i] = delete_objects(DEL4[i])
        except Exception as e:  # noqa: BLE001 - reported below
            errs.append(repr(e))
    ths = [threading.Thread(target=one, args=(i,)) for i in range(4)]
    for th in ths:
        th.start()
    time.sleep(0.5)  # the four are waiting for B now
    t0 = time.time()
    r = get(A, COLD[0])
    g_took = time.time() - t0
    for th in ths:
        th.join(60)
    print("       # 4 DeleteObjects of 10 keys: %s s; a cold GET meanwhile: %.2f s"
          % ([round(x, 2) if x else x for x in took], g_took))
    E.eq("the cold GET through A", (r.status, r.body == OLD[COLD[0]]), (200, True))
    if errs:
        raise E.Fail("DeleteObjects failed: %s" % errs[:2])
    if g_took > 1.0:
        raise E.Fail("an unrelated GET waited %.1f s while 4 DeleteObjects waited for B" % g_took)
    if max(took) > TIMEOUT_S + SLACK_S:
        raise E.Fail("a DeleteObjects of 10 keys took %.1f s with B hung" % max(took))
    proxy.release()
    if not E.wait_until(lambda: behind(A) == 0, timeout=15):
        raise E.Fail("B still behind after it came back again")
    for k in [k for k in sum(DEL4, []) if own[k] == NAME_B][:3]:
        E.eq("B, back again, serves %s deleted while it hung" % k, get(B, k).status, 404)


def owed_across_restart():
    k = [x for x in b_keys if x not in DEL50 and x != OVER and x not in sum(DEL4, [])][1]
    get(B, k)
    E.eq("%s cached on B" % k, get(B, k).h("x-cache"), "hit")
    proxy.hang()
    new = b"written through A, then A restarted, B still hung " * 50
    s3a.put_object(Bucket=BKT, Key=k, Body=new)
    E.eq("A counts B behind", behind(A), 1)
    A.stop()
    A.start()  # same port, same cache directory
    proxy.release()
    time.sleep(1.5)  # a resync would have landed by now
    if not E.wait_until(lambda: behind(A) == 0, timeout=15):
        raise E.Fail("B still behind 15 s after it came back")
    r = get(B, k)
    E.eq("B, back, serves the key written through A before A restarted: the new bytes",
         (r.status, r.body == new), (200, True))


t.check("A restarted while B hung: A still resyncs B once it is back", owed_across_restart)


t.check("B hung, A with 2 workers: 4 DeleteObjects at once end within about one peer-timeout "
        "and an unrelated GET is not delayed", workers_not_held)

proxy.release()
A.stop()
B.stop()
origin.stop()
proxy.close()
sys.exit(t.finish())
