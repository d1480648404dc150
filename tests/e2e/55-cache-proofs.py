"""55-cache-proofs.py — the SSD cache's promises, asserted with /_/stats (backend counters) and
x-cache: miss then hit without the backend; 32 concurrent cold GETs fetch each byte once; a cold
1 MiB range reads at most its blocks plus read-ahead; a workload twice the cache size never
exceeds the cap and every body is right; kill -9 during fills leaves nothing corrupt; a restart
serves the first GET as a hit; a backend change is seen after --revalidate-after; cached objects
survive a backend outage; admin invalidation; read-after-write through the gateway."""
import concurrent.futures as cf
import hashlib
import os
import random
import shutil
import signal
import subprocess
import time
import urllib.request

import e2elib as E

B = "cachep"
MiB = 1 << 20


def mkobj(srv, key, size, seed):
    rnd = random.Random(seed)
    block = bytes(rnd.getrandbits(8) for _ in range(64 * 1024))
    path = os.path.join(srv.store, B, key)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    h = hashlib.sha256()
    with open(path, "wb") as f:
        left = size
        i = 0
        while left:
            piece = (block[i % 64:] + block[:i % 64])[:min(left, len(block))]
            f.write(piece)
            h.update(piece)
            left -= len(piece)
            i += 1
    return h.hexdigest()


def get(srv, key, rng=None, timeout=120):
    hdrs = {"range": "bytes=%d-%d" % rng} if rng else None
    r = srv.req("GET", "/%s/%s" % (B, key), headers=hdrs, timeout=timeout)
    if r.status not in (200, 206):
        raise E.Fail("GET %s: %s %r" % (key, r.status, r.body[:200]))
    return r


def be(srv):
    return srv.stats()["backend"]


def main():
    t = E.Suite("55-cache-proofs.py")
    srv = E.Server(t, extra=["--cache-size", "64M", "--block-size", "1M", "--readahead", "2M",
                             "--revalidate-after", "2s"]).start()
    os.makedirs(os.path.join(srv.store, B))
    sums = {}

    def miss_then_hit():
        sums["a"] = mkobj(srv, "a", 3 * MiB + 5, 1)
        r = get(srv, "a")
        E.eq("first x-cache", r.h("x-cache"), "miss")
        E.eq("first body", E.sha(r.body), sums["a"])
        b0 = be(srv)
        r = get(srv, "a")
        E.eq("second x-cache", r.h("x-cache"), "hit")
        E.eq("second body", E.sha(r.body), sums["a"])
        b1 = be(srv)
        E.eq("backend requests during a hit", b1["requests"], b0["requests"])
        # a GET is counted when the server has finished with it, just after its client read
        # the last byte: wait for both to be counted
        E.wait_until(lambda: srv.stats()["cache"]["hits"] >= 1 and srv.stats()["cache"]["misses"] >= 1)
        st = srv.stats()["cache"]
        if st["hits"] < 1 or st["misses"] < 1:
            raise E.Fail("cache stats %r" % st)

    def coalesce32():
        size = 12 * MiB  # one fetch run (at most 16 blocks): exactly one request starts backend work
        s = mkobj(srv, "c32", size, 2)
        b0 = be(srv)
        with cf.ThreadPoolExecutor(32) as ex:
            rs = list(ex.map(lambda _: get(srv, "c32"), range(32)))
        for r in rs:
            E.eq("body", E.sha(r.body), s)
        hows = sorted(r.h("x-cache") for r in rs)
        E.eq("misses among 32", hows.count("miss"), 1)
        if hows.count("miss") + hows.count("coalesced") + hows.count("hit") != 32:
            raise E.Fail("x-cache values %r" % hows)
        b1 = be(srv)
        E.eq("backend bytes read for 32 cold GETs", b1["bytes_read"] - b0["bytes_read"], size)

    def cold_range():
        size = 48 * MiB
        mkobj(srv, "big", size, 3)
        b0 = be(srv)
        r = get(srv, "big", rng=(20 * MiB + 100, 21 * MiB + 99))
        E.eq("status", r.status, 206)
        E.eq("length", len(r.body), MiB)
        b1 = be(srv)
        got = b1["bytes_read"] - b0["bytes_read"]
        # two 1 MiB blocks (the range straddles a boundary) + 2 MiB read-ahead at most
        if got > 4 * MiB:
            raise E.Fail("a cold 1 MiB range pulled %d bytes from the backend (limit 4 MiB)" % got)

    def capacity():
        cap = 64 * MiB
        objs = {}
        for i in range(40):
            objs["w/%02d" % i] = mkobj(srv, "w/%02d" % i, 3 * MiB + i, 100 + i)
        keys = sorted(objs)
        rnd = random.Random(7)
        peak = [0]
        stop = [False]

        def poll():
            while not stop[0]:
                peak[0] = max(peak[0], srv.stats()["cache"]["used_bytes"])
                time.sleep(0.05)

        def worker(seed):
            r2 = random.Random(seed)
            for _ in range(40):
                k = r2.choice(keys)
                if r2.random() < 0.3:
                    a = r2.randrange(0, 3 * MiB)
                    resp = get(srv, k, rng=(a, a + 200000))
                    data = open(os.path.join(srv.store, B, k), "rb").read()[a:a + 200001]
                    E.eq("range body of %s" % k, resp.body, data)
                else:
                    E.eq("body of %s" % k, E.sha(get(srv, k).body), objs[k])
        with cf.ThreadPoolExecutor(5) as ex:
            pf = ex.submit(poll)
            fs = [ex.submit(worker, rnd.random()) for _ in range(4)]
            for f in fs:
                f.result()
            stop[0] = True
            pf.result()
        st = srv.stats()["cache"]
        if peak[0] > cap or st["used_bytes"] > cap:
            raise E.Fail("used_bytes reached %d (cap %d)" % (max(peak[0], st["used_bytes"]), cap))
        # disk really used (allocated blocks: data files are sparse), after queued unlinks ran
        # (a background thread: waited for, at most 10 s)
        def disk():
            for _ in range(5):     # du fails when a file vanishes under it (an unlink): again
                p = subprocess.run(["du", "-s", "--block-size=1", os.path.join(srv.cache, "data")],
                                   capture_output=True, text=True)
                if p.returncode == 0:
                    break
            return int(p.stdout.split()[0])
        E.wait_until(lambda: disk() <= cap + 2 * MiB, timeout=10, every=0.1)
        du = disk()
        if du > cap + 2 * MiB:
            raise E.Fail("the cache data uses %d bytes of disk (cap %d)" % (du, cap))
        if st["evictions"] == 0:
            raise E.Fail("no evictions over a workload twice the cache size")

    def revalidate():
        s1 = mkobj(srv, "rv", 100000, 11)
        E.eq("first", E.sha(get(srv, "rv").body), s1)
        time.sleep(0.2)
        s2 = mkobj(srv, "rv", 100001, 12)   # changed behind the gateway
        r = get(srv, "rv")
        E.eq("within --revalidate-after: the cached bytes", E.sha(r.body), s1)
        time.sleep(2.5)
        r = get(srv, "rv")
        E.eq("after --revalidate-after: the new bytes", E.sha(r.body), s2)

    def outage():
        s1 = mkobj(srv, "out", 50000, 13)
        E.eq("cached", E.sha(get(srv, "out").body), s1)
        time.sleep(2.5)                      # due for revalidation
        moved = srv.store + ".away"
        os.rename(srv.store, moved)
        try:
            r = get(srv, "out")
            E.eq("stale-if-error body", E.sha(r.body), s1)
            t0 = time.time()
            r = srv.req("GET", "/%s/never-cached" % B, timeout=30)
            if r.status < 400 or not r.code():
                raise E.Fail("a miss during the outage: %s %r" % (r.status, r.body[:200]))
            if time.time() - t0 > 10:
                raise E.Fail("the miss took %.1f s" % (time.time() - t0))
        finally:
            os.rename(moved, srv.store)

    def invalidate():
        s1 = mkobj(srv, "inv/x", 10000, 14)
        mkobj(srv, "inv/y", 10000, 15)
        get(srv, "inv/x")
        get(srv, "inv/y")
        E.eq("hit", get(srv, "inv/x").h("x-cache"), "hit")
        tok = {"Authorization": "Bearer " + srv.token}
        r = E.request(srv.endpoint, "DELETE", "/_/cache/%s/inv/x" % B, headers=tok, anon=True)
        E.eq("DELETE /_/cache/B/K", r.status, 200)
        E.eq("after invalidation", get(srv, "inv/x").h("x-cache"), "miss")
        r = E.request(srv.endpoint, "DELETE", "/_/cache/%s" % B, query="prefix=inv%2F", headers=tok, anon=True)
        E.eq("DELETE /_/cache/B?prefix=", r.status, 200)
        E.eq("after prefix invalidation", get(srv, "inv/y").h("x-cache"), "miss")
        E.eq("body", E.sha(get(srv, "inv/x").body), s1)

    def read_after_write():
        s3 = srv.boto3()
        for i in range(3):
            data = os.urandom(300000 + i)
            s3.put_object(Bucket=B, Key="raw", Body=data)
            r = get(srv, "raw")
            E.eq("read after write #%d" % i, r.body, data)
            E.eq("x-cache after write", r.h("x-cache"), "hit")
        s3.copy_object(Bucket=B, Key="raw2", CopySource={"Bucket": B, "Key": "raw"})
        E.eq("copy", get(srv, "raw2").body, data)
        s3.put_object(Bucket=B, Key="raw2", Body=b"new")
        E.eq("overwrite of a copy", get(srv, "raw2").body, b"new")
        s3.delete_object(Bucket=B, Key="raw")
        r = srv.req("GET", "/%s/raw" % B)
        E.eq("GET after DELETE", r.status, 404)
        mp = s3.create_multipart_upload(Bucket=B, Key="raw2")
        part = os.urandom(5 * MiB)
        e1 = s3.upload_part(Bucket=B, Key="raw2", UploadId=mp["UploadId"], PartNumber=1, Body=part)["ETag"]
        s3.complete_multipart_upload(Bucket=B, Key="raw2", UploadId=mp["UploadId"],
                                     MultipartUpload={"Parts": [{"ETag": e1, "PartNumber": 1}]})
        E.eq("after multipart complete", get(srv, "raw2").body, part)

    def crash_restart():
        sums2 = {}
        for i in range(4):
            sums2["k/%d" % i] = mkobj(srv, "k/%d" % i, 12 * MiB + i, 200 + i)
        with cf.ThreadPoolExecutor(4) as ex:
            fs = [ex.submit(lambda k: srv.req("GET", "/%s/%s" % (B, k), timeout=30), k)
                  for k in sums2]
            time.sleep(0.05)
            srv.proc.send_signal(signal.SIGKILL)
            for f in fs:
                try:
                    f.result()
                except Exception:  # noqa: BLE001 - the server was killed under it
                    pass
        srv.proc.wait()
        srv.proc = None
        srv.start()
        for k, s in sums2.items():
            E.eq("after kill -9: %s" % k, E.sha(get(srv, k).body), s)
        for k, s in sums2.items():
            r = get(srv, k)
            E.eq("second read after kill -9: %s" % k, E.sha(r.body), s)

    def restart_warm():
        s1 = mkobj(srv, "warm", 2 * MiB, 300)
        get(srv, "warm")
        srv.stop()
        t0 = time.time()
        srv.extra = ["--cache-size", "64M", "--block-size", "1M", "--revalidate-after", "never"]
        srv.start()
        up = time.time() - t0
        b0 = be(srv)
        r = get(srv, "warm")
        E.eq("first GET after restart", r.h("x-cache"), "hit")
        E.eq("body", E.sha(r.body), s1)
        E.eq("backend requests", be(srv)["requests"], b0["requests"])
        if up > 5:
            raise E.Fail("restart took %.1f s" % up)

    t.check("miss then hit; the hit does not touch the backend", miss_then_hit)
    t.check("32 concurrent cold GETs: each byte fetched once, 1 miss, correct bodies", coalesce32)
    t.check("a cold 1 MiB range fetches its blocks plus read-ahead only", cold_range)
    t.check("a workload twice the cache size never exceeds the cap; bodies correct", capacity)
    t.check("a backend change is served after --revalidate-after", revalidate)
    t.check("backend outage: cached objects served (stale-if-error), misses fail fast", outage)
    t.check("admin invalidation of a key and a prefix", invalidate)
    t.check("read-after-write through PUT, copy, overwrite, DELETE, multipart", read_after_write)
    t.check("kill -9 during fills: every object intact after restart", crash_restart)
    t.check("restart with a warm cache: first GET is a hit, no backend request", restart_warm)
    srv.stop()
    srv.cleanup()
    return t.finish()


if __name__ == "__main__":
    raise SystemExit(main())
