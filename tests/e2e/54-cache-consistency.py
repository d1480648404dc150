"""54-cache-consistency: the cache never serves what it should not. A file rewritten directly in
the store is served old until --revalidate-after (2s) and fresh after (size change, same size,
deletion). During a backend outage (bucket dir chmod 000 under a server without DAC capabilities; renaming
the store is no outage: the file backend holds its root open) cached objects are still served
(stale-if-error) and misses fail quickly with an S3 XML error; with the S3 backend pointed at a
dead port, misses are a 503 ServiceUnavailable within seconds (be_s3's retries), not a hang. Writes through the gateway:
PUT then GET is a hit with the new bytes; overwrite, DELETE (then 404), copy and multipart
complete replace or invalidate what was cached; a reader streaming the old version keeps it."""
import hashlib
import http.client
import os
import sys
import time

import e2elib as E

MiB = 1 << 20
B = "consist"
t = E.Suite("54-cache-consistency.py")
# 2 s: the checks "within --revalidate-after" (a GET, a rewrite of up to 9 MiB, a GET) must
# fit in it with room on a slow machine (ASan, a loaded CPU); the checks after it sleep past it
REVAL_S = 2
srv = E.Server(t, extra=["--cache-size", "512M", "--revalidate-after", "%ds" % REVAL_S]).start()


def path_of(key):
    return os.path.join(srv.store, B, key)


def write_src(key, data):
    p = path_of(key)
    os.makedirs(os.path.dirname(p), exist_ok=True)
    tmp = p + ".tmp-e2e"
    with open(tmp, "wb") as f:
        f.write(data)
    os.rename(tmp, p)


def get(key, rng=None, ok=(200, 206), timeout=60):
    hdrs = {"range": "bytes=%d-%d" % rng} if rng else None
    r = srv.req("GET", "/%s/%s" % (B, key), headers=hdrs, timeout=timeout)
    if ok and r.status not in ok:
        raise E.Fail("GET %s %r: %s %r" % (key, rng, r.status, r.body[:200]))
    return r


def setup():
    os.makedirs(os.path.join(srv.store, B))


E.setup_or_die(t, srv, setup)


def revalidate_size_change():
    old, new = os.urandom(300000), os.urandom(300001)
    write_src("rv1", old)
    E.same_bytes("first GET", get("rv1").body, old)
    write_src("rv1", new)
    r = get("rv1")
    E.same_bytes("within --revalidate-after: the cached bytes", r.body, old)
    E.eq("x-cache", r.h("x-cache"), "hit")
    time.sleep(REVAL_S + 0.3)
    E.same_bytes("after --revalidate-after: the new bytes", get("rv1").body, new)
    E.same_bytes("a range of the new bytes", get("rv1", (1000, 1999)).body, new[1000:2000])
    r = get("rv1")
    E.same_bytes("then cached", r.body, new)
    E.eq("then a hit", r.h("x-cache"), "hit")


def revalidate_same_size():
    old = os.urandom(9 * MiB)
    new = bytearray(old)
    new[5 * MiB:5 * MiB + 16] = os.urandom(16)
    new = bytes(new)
    write_src("rv2", old)
    E.same_bytes("first GET", get("rv2").body, old)
    time.sleep(0.05)
    write_src("rv2", new)    # same size, new mtime
    E.same_bytes("within --revalidate-after", get("rv2").body, old)
    time.sleep(REVAL_S + 0.3)
    E.same_bytes("after --revalidate-after: same-size rewrite seen", get("rv2").body, new)
    E.same_bytes("a range over the changed bytes", get("rv2", (5 * MiB, 5 * MiB + 99)).body,
                 new[5 * MiB:5 * MiB + 100])


def revalidate_deleted():
    write_src("rv3", b"soon gone")
    E.eq("first GET", get("rv3").body, b"soon gone")
    os.unlink(path_of("rv3"))
    time.sleep(REVAL_S + 0.3)
    r = get("rv3", ok=None)
    E.expect_error("GET after the source was deleted", r, 404, "NoSuchKey")


def prefix_of(what, body, old, want_len):
    """@body must be all of @old (len @want_len), or cut short: a strict prefix of it."""
    if len(body) == want_len and body == old:
        return "whole"
    if len(body) < want_len and old[:len(body)] == body:
        return "cut short"
    raise E.Fail("%s: %d bytes that are neither the object nor a prefix of it (mixed versions?)"
                 % (what, len(body)))


def changed_under_partial_cache():
    old = os.urandom(40 * MiB)
    new = os.urandom(40 * MiB)
    write_src("mix", old)
    E.same_bytes("a range caches the first block", get("mix", (0, 100)).body, old[:101])
    write_src("mix", new)    # same size, new content, within --revalidate-after
    outcomes = []
    for i in range(3):
        r = get("mix", ok=(200,))
        if r.body == new:
            outcomes.append("new")
            break
        outcomes.append(prefix_of("GET #%d after the change" % (i + 1), r.body, old, len(old)))
    if outcomes[-1] != "new":
        time.sleep(REVAL_S + 0.3)
        r = get("mix")
        E.same_bytes("after --revalidate-after", r.body, new)
        outcomes.append("new after revalidation")
    print("       # %s" % ", ".join(outcomes))


def truncated_mid_fill():
    import concurrent.futures as cf
    big = os.urandom(64 * MiB)
    write_src("trunc", big)

    def reader():
        r = get("trunc", ok=(200,), timeout=20)
        return prefix_of("a reader of the fill", r.body, big, len(big))

    b0 = srv.stats()["backend"]["bytes_read"]
    with cf.ThreadPoolExecutor(4) as ex:
        fs = [ex.submit(reader) for _ in range(4)]
        deadline = time.time() + 10
        while srv.stats()["backend"]["bytes_read"] - b0 < 2 * MiB and time.time() < deadline:
            time.sleep(0.002)
        os.truncate(path_of("trunc"), MiB)
        t0 = time.time()
        outs = [f.result() for f in fs]
        if time.time() - t0 > 10:
            raise E.Fail("readers of a failed fill took %.1f s" % (time.time() - t0))
    time.sleep(REVAL_S + 0.3)
    r = get("trunc")
    E.same_bytes("after the source shrank", r.body, big[:MiB])
    print("       # readers: %s" % ", ".join(outs))


def outage():
    """Renaming the store away is no outage for the file backend (it holds the root open), and
    root ignores permissions: so a second server runs without CAP_DAC_OVERRIDE and
    CAP_DAC_READ_SEARCH (setpriv), and the bucket directory is made unreadable (chmod 000)."""
    wrapper = os.path.join(srv.tmp, "nocaps.sh")
    with open(wrapper, "w") as f:
        f.write("#!/bin/sh\nexec setpriv --inh-caps=-dac_override,-dac_read_search "
                "--bounding-set=-dac_override,-dac_read_search %s \"$@\"\n" % E.BIN)
    os.chmod(wrapper, 0o755)
    gw = E.Server(t, extra=["--cache-size", "64M", "--revalidate-after", "1s"])
    bdir = os.path.join(gw.store, "down")
    os.makedirs(bdir)
    s1 = os.urandom(2 * MiB + 5)
    s2 = os.urandom(3000)
    with open(os.path.join(bdir, "cached"), "wb") as f:
        f.write(s1)
    with open(os.path.join(bdir, "uncached"), "wb") as f:
        f.write(s2)
    real, E.BIN = E.BIN, wrapper
    try:
        gw.start()
    finally:
        E.BIN = real
    try:
        def gget(key, rng=None):
            hdrs = {"range": "bytes=%d-%d" % rng} if rng else None
            return gw.req("GET", "/down/" + key, headers=hdrs, timeout=30)
        E.same_bytes("cached before the outage", gget("cached").body, s1)
        time.sleep(1.3)                     # due for revalidation when the outage starts
        st0 = gw.stats()["cache"]
        os.chmod(bdir, 0)
        try:
            r = gget("uncached")
            if r.status == 200:
                raise E.Fail("the outage is not one: an uncached key was served (the server has "
                             "DAC capabilities?)")
            for i in range(2):
                r = gget("cached")
                E.eq("stale-if-error status #%d" % (i + 1), r.status, 200)
                E.same_bytes("stale-if-error body #%d" % (i + 1), r.body, s1)
            time.sleep(1.3)                 # due again: still served
            r = gget("cached", (MiB, MiB + 9))
            E.same_bytes("stale-if-error range", r.body, s1[MiB:MiB + 10])
            st1 = gw.stats()["cache"]
            if st1["stale_served"] - st0["stale_served"] < 2:
                raise E.Fail("cache.stale_served did not count the stale answers: %r -> %r"
                             % (st0["stale_served"], st1["stale_served"]))
            codes = []
            for key in ("uncached", "never-existed"):
                for method in ("GET", "HEAD"):
                    t0 = time.time()
                    r = gw.req(method, "/down/" + key, timeout=30)
                    took = time.time() - t0
                    if r.status < 400 or (method == "GET" and (not r.code() or not r.request_id_ok())):
                        raise E.Fail("%s of a miss during the outage: %r" % (method, r))
                    if took > 5:
                        raise E.Fail("a miss during the outage took %.1f s" % took)
                    codes.append("%s %s %s" % (method, r.status, r.code() or ""))
            print("       # misses during the outage: %s" % "; ".join(codes))
        finally:
            os.chmod(bdir, 0o755)
        time.sleep(1.3)
        E.same_bytes("after the outage", gget("cached").body, s1)
        E.same_bytes("the uncached key after the outage", gget("uncached").body, s2)
    finally:
        gw.stop()
        gw.cleanup()


def put_then_get():
    s3 = srv.boto3()
    b0 = srv.stats()["backend"]["bytes_read"]
    for i, size in enumerate((100, 3 * MiB + 1, 17 * MiB + 3)):
        data = os.urandom(size)
        s3.put_object(Bucket=B, Key="w/put", Body=data)
        r = get("w/put")
        E.same_bytes("GET after PUT #%d" % (i + 1), r.body, data)
        E.eq("x-cache after PUT #%d" % (i + 1), r.h("x-cache"), "hit")
    E.eq("backend bytes read for GETs after PUTs", srv.stats()["backend"]["bytes_read"], b0)


def overwrite_cached():
    s3 = srv.boto3()
    old = os.urandom(20 * MiB)
    write_src("w/ow", old)
    E.same_bytes("cached by a GET", get("w/ow").body, old)
    new = os.urandom(1000)
    s3.put_object(Bucket=B, Key="w/ow", Body=new)
    E.same_bytes("GET after overwrite", get("w/ow").body, new)
    r = get("w/ow", (10 * MiB, 10 * MiB + 9), ok=None)
    E.eq("a range only the old version had", r.status, 416)
    h = s3.head_object(Bucket=B, Key="w/ow")
    E.eq("HEAD size after overwrite", h["ContentLength"], 1000)
    E.eq("HEAD ETag after overwrite", h["ETag"], '"%s"' % hashlib.md5(new).hexdigest())


def delete_then_404():
    s3 = srv.boto3()
    s3.put_object(Bucket=B, Key="w/del", Body=b"delete me")
    E.eq("cached", get("w/del").h("x-cache"), "hit")
    s3.delete_object(Bucket=B, Key="w/del")
    E.expect_error("GET after DELETE", get("w/del", ok=None), 404, "NoSuchKey")
    r = srv.req("HEAD", "/%s/w/del" % B)
    E.eq("HEAD after DELETE", r.status, 404)
    s3.put_object(Bucket=B, Key="w/del", Body=b"back again")
    E.eq("GET after re-PUT", get("w/del").body, b"back again")


def copy_replaces():
    s3 = srv.boto3()
    src = os.urandom(2 * MiB)
    s3.put_object(Bucket=B, Key="w/csrc", Body=src)
    old = os.urandom(5 * MiB)
    write_src("w/cdst", old)
    E.same_bytes("destination cached", get("w/cdst").body, old)
    s3.copy_object(Bucket=B, Key="w/cdst", CopySource={"Bucket": B, "Key": "w/csrc"})
    E.same_bytes("GET of the copy destination", get("w/cdst").body, src)
    s3.copy_object(Bucket=B, Key="w/cnew", CopySource={"Bucket": B, "Key": "w/csrc"})
    E.same_bytes("GET of a new copy", get("w/cnew").body, src)
    s3.put_object(Bucket=B, Key="w/csrc", Body=b"changed source")
    E.same_bytes("the copy keeps its bytes", get("w/cdst").body, src)
    E.eq("the source has its new bytes", get("w/csrc").body, b"changed source")


def multipart_replaces():
    s3 = srv.boto3()
    old = os.urandom(3 * MiB)
    s3.put_object(Bucket=B, Key="w/mp", Body=old)
    E.same_bytes("cached", get("w/mp").body, old)
    mp = s3.create_multipart_upload(Bucket=B, Key="w/mp")
    parts = [os.urandom(5 * MiB), os.urandom(1234)]
    done = []
    for i, p in enumerate(parts):
        e = s3.upload_part(Bucket=B, Key="w/mp", UploadId=mp["UploadId"], PartNumber=i + 1, Body=p)["ETag"]
        done.append({"ETag": e, "PartNumber": i + 1})
    E.same_bytes("before complete: the old bytes", get("w/mp").body, old)
    s3.complete_multipart_upload(Bucket=B, Key="w/mp", UploadId=mp["UploadId"],
                                 MultipartUpload={"Parts": done})
    E.same_bytes("after complete", get("w/mp").body, b"".join(parts))
    E.same_bytes("a range across the parts", get("w/mp", (5 * MiB - 10, 5 * MiB + 9)).body,
                 b"".join(parts)[5 * MiB - 10:5 * MiB + 10])


def writes_during_fill():
    import concurrent.futures as cf
    s3 = srv.boto3()
    tok = {"Authorization": "Bearer " + srv.token}
    for how in ("invalidate", "put"):
        key = "w/fill-" + how
        old, new = os.urandom(64 * MiB), os.urandom(64 * MiB if how == "invalidate" else 3 * MiB)
        write_src(key, old)
        b0 = srv.stats()["backend"]["bytes_read"]
        with cf.ThreadPoolExecutor(1) as ex:
            f = ex.submit(get, key, None, (200,), 30)
            deadline = time.time() + 10
            while srv.stats()["backend"]["bytes_read"] - b0 < 4 * MiB and time.time() < deadline:
                time.sleep(0.002)
            if how == "invalidate":
                write_src(key, new)
                r = E.request(srv.endpoint, "DELETE", "/_/cache/%s/%s" % (B, key), headers=tok, anon=True)
                E.eq("DELETE /_/cache during the fill", r.status, 200)
            else:
                s3.put_object(Bucket=B, Key=key, Body=new)
            prefix_of("the reader of the fill (%s)" % how, f.result().body, old, len(old))
        time.sleep(0.3)
        for i in range(2):
            r = get(key)
            E.same_bytes("GET #%d after %s during a fill" % (i + 1, how), r.body, new)


def settled_backend_bytes(srv, b0, want, timeout=10):
    """Backend bytes read since @b0 once the count stayed the same for 0.5 s (at once when it
    passed @want: that is a failure already), bounded by @timeout."""
    last, still_since, deadline = None, time.time(), time.time() + timeout
    while time.time() < deadline:
        got = srv.stats()["backend"]["bytes_read"] - b0
        if got > want:
            return got
        if got != last:
            last, still_since = got, time.time()
        elif time.time() - still_since >= 0.5:
            return got
        time.sleep(0.02)
    return srv.stats()["backend"]["bytes_read"] - b0


def invalidate_during_fill_unchanged():
    """DELETE /_/cache of a key whose fill is running, the source unchanged: the reader of the
    fill still gets the whole object (the fill's bytes are good; only its index entry is gone)
    without the backend being asked for any byte twice, and the next GET fetches again."""
    import concurrent.futures as cf
    tok = {"Authorization": "Bearer " + srv.token}
    outs = []
    for i in range(3):
        key = "w/inv-fill-%d" % i
        data = os.urandom(64 * MiB)
        write_src(key, data)
        st0 = srv.stats()
        b0 = st0["backend"]["bytes_read"]
        with cf.ThreadPoolExecutor(2) as ex:
            fs = [ex.submit(get, key, None, (200,), 30) for _ in range(2)]
            deadline = time.time() + 10
            while srv.stats()["backend"]["bytes_read"] - b0 < (2 + 8 * i) * MiB and time.time() < deadline:
                time.sleep(0.002)
            r = E.request(srv.endpoint, "DELETE", "/_/cache/%s/%s" % (B, key), headers=tok, anon=True)
            E.eq("DELETE /_/cache during the fill", r.status, 200)
            for f in fs:
                E.same_bytes("a reader of the fill invalidated at %d MiB" % (2 + 8 * i), f.result().body, data)
        # The fetch thread counts its bytes once its transfer returns, which can be after the
        # readers have theirs: the count is taken once it stops moving.
        got = settled_backend_bytes(srv, b0, 64 * MiB)
        outs.append("%.0f MiB" % (got / MiB))
        if got != 64 * MiB:  # what the cache did meanwhile, for the failure to say why
            st = srv.stats()
            d = {k: st["cache"].get(k, 0) - st0["cache"].get(k, 0)
                 for k in ("misses", "hits", "partial", "coalesced", "source_sends", "fill_bytes",
                           "uncached_bytes")}
            raise E.Fail("backend bytes for the invalidated fill and its readers (each byte once),"
                         " round %d: expected %d, got %d; cache counters meanwhile: %s"
                         % (i, 64 * MiB, got, d))
        r = get(key)
        E.same_bytes("the GET after", r.body, data)
        E.eq("the GET after: x-cache", r.h("x-cache"), "miss")
    print("       # backend bytes per round: %s" % ", ".join(outs))


def reader_keeps_its_version():
    s3 = srv.boto3()
    old = os.urandom(40 * MiB)
    s3.put_object(Bucket=B, Key="w/stream", Body=old)
    get("w/stream")
    path = "/%s/w/stream" % B
    hdrs = {"host": "127.0.0.1:%d" % srv.port}
    E.sign_headers("GET", path, "", hdrs, E.EMPTY_SHA, srv.ak, srv.sk)
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=60)
    try:
        conn.request("GET", path, headers=hdrs)
        r = conn.getresponse()
        first = r.read(MiB)
        new = os.urandom(40 * MiB)
        s3.put_object(Bucket=B, Key="w/stream", Body=new)
        E.same_bytes("a fresh GET during the old stream", get("w/stream").body, new)
        rest = r.read()
    finally:
        conn.close()
    E.same_bytes("the stream started before the overwrite", first + rest, old)


t.check("store rewrite (size change) served fresh after --revalidate-after 2s", revalidate_size_change)
t.check("store rewrite (same size) served fresh after --revalidate-after 2s", revalidate_same_size)
t.check("store deletion: 404 after --revalidate-after", revalidate_deleted)
t.check("source rewritten under a partly cached object: never a mixed body", changed_under_partial_cache)
t.check("source truncated mid-fill: readers cut short (no hang), then the new size", truncated_mid_fill)
t.check("backend outage: cached served (stale-if-error), misses fail fast with XML", outage)
def s3_backend_dead_port():
    """Connection refused: be_s3 retries a few times with a backoff (~2-3 s in all), then 503.
    Not a hang, and concurrent misses do not queue behind each other."""
    import concurrent.futures as cf
    dead = E.free_port()          # nothing listens there
    gw = E.Server(t, extra=["--backend", "http://127.0.0.1:%d" % dead, "--backend-timeout", "5s"]).start()
    took = []
    try:
        def one(method, key, rng=None):
            t0 = time.time()
            hdrs = {"range": "bytes=%d-%d" % rng} if rng else None
            r = gw.req(method, "/bkt/" + key, headers=hdrs, timeout=30)
            took.append(time.time() - t0)
            if method == "GET":
                E.expect_error("%s %s with the upstream down" % (method, key), r, 503, "ServiceUnavailable")
            else:
                E.eq("HEAD with the upstream down", r.status, 503)
        one("GET", "some/key")
        one("HEAD", "some/key")
        one("GET", "other", (0, 99))
        t0 = time.time()
        with cf.ThreadPoolExecutor(8) as ex:
            for f in [ex.submit(one, "GET", "k%d" % i) for i in range(8)]:
                f.result()
        par = time.time() - t0
        print("       # 503 after %s s; 8 concurrent misses in %.1f s"
              % (", ".join("%.1f" % x for x in took[:3]), par))
        if max(took) > 6:
            raise E.Fail("a miss with the upstream down took %.1f s" % max(took))
        if par > 8:
            raise E.Fail("8 concurrent misses took %.1f s" % par)
        import urllib.request
        with urllib.request.urlopen(gw.endpoint + "/_/health", timeout=5) as h:
            E.eq("/_/health", h.status, 200)
    finally:
        gw.stop()
        gw.cleanup()


t.check("S3 backend on a dead port: misses get 503 ServiceUnavailable in seconds, no hang", s3_backend_dead_port)
t.check("PUT then GET: a hit with the new bytes, no backend read", put_then_get)
t.check("PUT over a cached object: new bytes, old ranges gone, HEAD right", overwrite_cached)
t.check("DELETE of a cached object: then 404", delete_then_404)
t.check("copy onto a cached key replaces it", copy_replaces)
t.check("multipart complete onto a cached key replaces it", multipart_replaces)
t.check("invalidation or PUT while the old version fills: then the new bytes", writes_during_fill)
t.check("invalidation during a fill (source unchanged): its readers still get every byte",
        invalidate_during_fill_unchanged)
t.check("a reader streaming the old version keeps it across an overwrite", reader_keeps_its_version)
srv.stop()
srv.cleanup()
sys.exit(t.finish())
