"""tests/faults/faults.py (make test-faults): the real server (build/s3cached) under the
LD_PRELOAD shim tests/faults/faultinj.c, which fails chosen libc calls or allocations on their
N-th call. Each scenario arms rules, drives requests, and checks the invariants:
  - a request that meets a fault gets a clean S3 XML error (status, <Code>, <RequestId> equal
    to x-amz-request-id) within a bounded time, or -- once a 200 and its headers are out -- a
    short body; never wrong bytes, never a hang;
  - the server stays up and healthy; objects already stored read back byte-identical; a
    failed upload leaves nothing on the backend and the old version in place;
  - a cached copy that cannot be read is not served again: the next read refetches it;
  - nothing leaks: no staged upload, deleted file or backend file left open, no socket left
    once the clients have gone, and the descriptor count back where it was.
Scenarios: cache disk full (PUT, UploadPart, staged fsync, miss fill), a read error on one
cached object (hit by sendfile, partly cached object by pread), fsync/fdatasync failures
(staged upload, fill, LMDB, directory) and a failed rename, allocation failure at the N-th
call swept over a request mix (FAULT_SWEEP=lo:hi:step), a failed LMDB meta page write
(MDB_PANIC: the index reopens itself), and a full LMDB map (S3C_FAULT_MDB_MAPSIZE: reads
served uncached, write-back PUTs refused cleanly), grown by a restart. Last line:
"faults: N passed, N failed".
"""
import collections
import glob
import hashlib
import os
import re
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "e2e"))
import e2elib as E  # noqa: E402

SO = os.environ.get("S3C_FAULTINJ", os.path.join(E.REPO, "build", "faults", "faultinj.so"))
SWEEP = [int(x) for x in os.environ.get("FAULT_SWEEP", "1:2400:8").split(":")]
B = "fbk"
MIB = 1 << 20
t = E.Suite("faults")
T0 = time.time()


def rnd(n):
    return os.urandom(n)


class Faulty:
    """One s3cached under the shim. rules() arms a rule set (and waits until the shim has
    loaded it); fired() lists the faults injected since."""

    def __init__(self, extra=(), mapsize=None):
        self.srv = E.Server(t, extra=["--block-size", "1M", "--readahead", "0"] + list(extra))
        self.ctl = os.path.join(self.srv.tmp, "faults.ctl")
        self.log = os.path.join(self.srv.tmp, "faults.log")
        open(self.ctl, "w").close()
        self.srv.env = {"LD_PRELOAD": SO, "S3C_FAULT_CTL": self.ctl, "S3C_FAULT_LOG": self.log}
        if mapsize:
            self.srv.env["S3C_FAULT_MDB_MAPSIZE"] = str(mapsize)
        os.makedirs(os.path.join(self.srv.store, B))
        self.log_off = 0
        self.stored = {}  # key -> bytes of every acknowledged object

    def start(self):
        self.srv.start()
        return self

    @property
    def pid(self):
        return self.srv.proc.pid

    def _log_text(self):
        try:
            with open(self.log, errors="replace") as f:
                return f.read()
        except FileNotFoundError:
            return ""

    def rules(self, *lines):
        n0 = self._log_text().count("rules ")
        tmp = self.ctl + ".new"
        with open(tmp, "w") as f:
            f.write("".join(ln + "\n" for ln in lines))
        os.rename(tmp, self.ctl)
        deadline = time.time() + 10
        while True:
            text = self._log_text()
            if text.count("rules ") > n0:
                self.log_off = len(text)
                return
            if time.time() > deadline:
                raise E.Fail("the shim did not load %r within 10 s" % (lines,))
            self.healthy(quiet=True)  # any call through the shim makes it look
            time.sleep(0.06)

    def fired(self, func=None):
        out = []
        for ln in self._log_text()[self.log_off:].splitlines():
            parts = ln.split(" ", 3)
            if parts[0] == "rules" or len(parts) < 3:
                continue
            if func is None or parts[0] == func:
                out.append(ln)
        return out

    def req(self, method, path, **kw):
        kw.setdefault("timeout", 30)
        return self.srv.req(method, path, **kw)

    def put(self, key, body, **kw):
        r = self.req("PUT", "/%s/%s" % (B, key), body=body, **kw)
        if r.status == 200:
            self.stored[key] = body
        return r

    def get(self, key, **kw):
        return self.req("GET", "/%s/%s" % (B, key), **kw)

    def healthy(self, quiet=False):
        if self.srv.proc is None or self.srv.proc.poll() is not None:
            if quiet:
                return False
            raise E.Fail("the server died (status %s); log tail:\n%s"
                         % (self.srv.proc and self.srv.proc.returncode, self.srv.log_tail(15)))
        try:
            with urllib.request.urlopen(self.srv.endpoint + "/_/health", timeout=5) as r:
                ok = r.status == 200 and r.read().startswith(b"ok")
        except Exception as e:  # noqa: BLE001
            if quiet:
                return False
            raise E.Fail("/_/health failed: %s" % e)
        if not ok and not quiet:
            raise E.Fail("/_/health did not answer ok")
        return ok

    def intact(self, want_hit=None):
        """Every acknowledged object reads back byte-identical (and as a hit, if asked)."""
        for key, body in sorted(self.stored.items()):
            r = self.get(key)
            if r.status != 200:
                raise E.Fail("GET %s: status %s %r" % (key, r.status, r))
            E.same_bytes("GET %s" % key, r.body, body)
            if want_hit and key in want_hit and r.h("x-cache") != "hit":
                raise E.Fail("GET %s: x-cache %s, expected hit" % (key, r.h("x-cache")))

    def fds(self):
        """Open descriptors of the server by kind."""
        out = collections.Counter()
        d = "/proc/%d/fd" % self.pid
        cache, store = os.path.realpath(self.srv.cache), os.path.realpath(self.srv.store)
        for fd in os.listdir(d):
            try:
                tgt = os.readlink(os.path.join(d, fd))
            except OSError:
                continue
            if tgt.startswith("socket:"):
                out["socket"] += 1
            elif tgt.endswith(" (deleted)"):
                out["deleted"] += 1
            elif tgt.startswith(cache + "/tmp/"):
                out["staged"] += 1
            elif tgt.startswith(cache + "/data/"):
                out["data"] += 1
            elif tgt.startswith(cache + "/index/"):
                out["index"] += 1
            elif tgt.startswith(store):
                out["store-dir" if os.path.isdir(tgt) else "store"] += 1
            else:
                out["other"] += 1
        out["total"] = sum(out.values())
        return out

    def no_leaks(self, base):
        """Nothing staged, deleted or from the backend is held open; sockets and the other
        descriptors are back at @base (polled for up to 10 s: closes are asynchronous)."""
        deadline = time.time() + 10
        while True:
            now = self.fds()
            bad = [k for k in ("staged", "deleted", "store") if now[k]]
            bad += [k for k in ("socket", "other", "index", "store-dir") if now[k] != base[k]]
            if not bad:
                return now
            if time.time() > deadline:
                raise E.Fail("descriptors: %s (baseline %s): %s"
                             % (dict(now), dict(base), ", ".join(bad)))
            time.sleep(0.1)


def clean_error(what, r, statuses, code=None):
    """@r is an S3 XML error with one of @statuses (and @code) and a matching RequestId."""
    if r.status not in statuses or (code and r.code() != code) or not r.code():
        raise E.Fail("%s: expected %s %s, got %s %s %r"
                     % (what, "/".join(map(str, sorted(statuses))), code or "", r.status,
                        r.code(), (r.body or b"")[:200]))
    if not r.request_id_ok():
        raise E.Fail("%s: <RequestId> must equal x-amz-request-id: %r" % (what, r))


def correct_or_cut(what, r, body):
    """A read under a fault: the right bytes, a 200 cut short (a prefix of them) or a clean
    5xx. Returns True when it was complete and correct."""
    if r.status == 200:
        if r.body == body:
            return True
        if len(r.body) < len(body) and body.startswith(r.body):
            return False
        raise E.Fail("%s: WRONG BYTES: %d bytes, sha256 %s (want %d, %s)"
                     % (what, len(r.body), E.sha(r.body)[:16], len(body), E.sha(body)[:16]))
    clean_error(what, r, {500, 503, 507})
    return False


def version_files(fx, key):
    h = hashlib.sha256(("%s/%s" % (B, key)).encode()).hexdigest()
    return sorted(glob.glob(os.path.join(fx.srv.cache, "data", h[:2], h[2:4], h + "-*")))


def on_backend(fx, key):
    p = os.path.join(fx.srv.store, B, key)
    return open(p, "rb").read() if os.path.exists(p) else None


# ------------------------------------------------------------------------------ scenarios

fx = Faulty()
E.setup_or_die(t, fx.srv, fx.start)
BASE = {}


def setup():
    for key, n in (("keep", 2 * MIB + 7), ("small", 1000), ("other", 3 * MIB)):
        r = fx.put(key, rnd(n))
        E.eq("PUT %s" % key, r.status, 200)
    fx.intact(want_hit=fx.stored)
    base = fx.fds()
    base["socket"] = 1  # the listening socket alone, once the clients have gone
    BASE.update(fx.no_leaks(base))
    print("       | descriptors at start: %s" % dict(BASE))


E.setup_or_die(t, fx.srv, setup)


def disk_full_put():
    fx.rules("write:1:ENOSPC:0:/cache/tmp/", "pwrite:1:ENOSPC:0:/cache/tmp/",
             "fallocate:1:ENOSPC:0:/cache/tmp/")
    old = fx.stored["keep"]
    for key, n in (("full-new", 1000), ("full-big", 5 * MIB), ("keep", 3 * MIB)):
        t0 = time.time()
        r = fx.put(key, rnd(n))
        clean_error("PUT %s (%d bytes) on a full cache disk" % (key, n), r, {507},
                    "InsufficientStorage")
        if time.time() - t0 > 10:
            raise E.Fail("PUT %s took %.1f s" % (key, time.time() - t0))
    if on_backend(fx, "full-new") is not None or on_backend(fx, "full-big") is not None:
        raise E.Fail("a failed PUT reached the backend")
    E.same_bytes("backend copy of keep after a failed overwrite", on_backend(fx, "keep"), old)
    # multipart: the part is staged the same way
    r = fx.req("POST", "/%s/mp-full" % B, query="uploads")
    E.eq("CreateMultipartUpload", r.status, 200)
    up = re.search(rb"<UploadId>([^<]+)</UploadId>", r.body).group(1).decode()
    r = fx.req("PUT", "/%s/mp-full" % B, query="partNumber=1&uploadId=" + up, body=rnd(MIB))
    clean_error("UploadPart on a full cache disk", r, {507}, "InsufficientStorage")
    E.eq("AbortMultipartUpload", fx.req("DELETE", "/%s/mp-full" % B, query="uploadId=" + up).status, 204)
    if not fx.fired("write") and not fx.fired("pwrite"):
        raise E.Fail("no write was failed: the rule did not match the staged files")
    fx.intact(want_hit=fx.stored)  # reads keep working, nothing stored is damaged
    fx.healthy()
    # ENOSPC surfacing at fsync (delayed allocation)
    fx.rules("fsync:1:ENOSPC:1:/cache/tmp/")
    r = fx.put("full-late", rnd(MIB))
    clean_error("PUT whose staged file fails fsync with ENOSPC", r, {507}, "InsufficientStorage")
    if on_backend(fx, "full-late") is not None:
        raise E.Fail("a PUT that failed its fsync reached the backend")
    fx.rules()
    E.eq("PUT once there is room again", fx.put("full-new", rnd(1000)).status, 200)
    fx.intact()
    fx.no_leaks(BASE)


t.check("cache disk full during PUT/UploadPart: 507 InsufficientStorage, reads keep working, "
        "nothing stored damaged", disk_full_put)


def disk_full_fill():
    cold = rnd(5 * MIB + 123)
    with open(os.path.join(fx.srv.store, B, "cold-full"), "wb") as f:
        f.write(cold)
    by0 = fx.srv.stats()["cache"]["bypassed"]
    fx.rules(*("%s:1:ENOSPC:0:/cache/data/" % fn
               for fn in ("copy_file_range", "pwrite", "write", "fallocate", "create")))
    for i in range(2):
        r = fx.get("cold-full")
        E.eq("GET of an uncached object with the cache disk full (try %d)" % (i + 1), r.status, 200)
        E.same_bytes("GET cold-full with the cache disk full", r.body, cold)
    if not fx.fired():
        raise E.Fail("no fill write was failed: the rules did not match the data files")
    by1 = fx.srv.stats()["cache"]["bypassed"]
    if by1 <= by0:
        raise E.Fail("bypassed did not grow (%d -> %d): was it served from the disk?" % (by0, by1))
    fx.intact(want_hit=["keep", "small", "other"])
    fx.rules()
    r = fx.get("cold-full")
    E.same_bytes("GET cold-full after the disk has room", r.body, cold)
    r = fx.get("cold-full")
    E.eq("second GET after the disk has room: cached", r.h("x-cache"), "hit")
    E.same_bytes("GET cold-full (hit)", r.body, cold)
    fx.stored["cold-full"] = cold
    fx.no_leaks(BASE)


t.check("cache disk full during a miss: served from the backend uncached (bypass), cached "
        "once there is room", disk_full_fill)


def dropped(name, key="victim", timeout=10):
    """Whether the cached version file @name of @key is gone within @timeout s (a worker drops
    a copy that could not be read, just after the response that met the error)."""
    return E.wait_until(lambda: name not in map(os.path.basename, version_files(fx, key)),
                        timeout=timeout)


def read_error_hit():
    body = rnd(3 * MIB + 5)
    E.eq("PUT victim", fx.put("victim", body).status, 200)
    r = fx.get("victim")
    E.eq("GET victim before the fault", (r.status, r.h("x-cache")), (200, "hit"))
    files = version_files(fx, "victim")
    E.eq("one cached version of victim", len(files), 1)
    name = os.path.basename(files[0])
    fx.rules("sendfile:1:EIO:0:" + name, "pread:1:EIO:0:" + name, "read:1:EIO:0:" + name)
    tries = []
    for i in range(3):
        r = fx.get("victim")
        done = correct_or_cut("GET victim with its cache file unreadable (try %d)" % (i + 1), r, body)
        tries.append((r.status, r.h("x-cache"), len(r.body), done))
        if done:
            break
        dropped(name)    # the check of the failed response runs on a worker: wait for it
    if not tries[-1][3] or len(tries) > 2:
        raise E.Fail("not served correctly by the second try: %s" % tries)
    if tries[-1][1] == "hit" and len(tries) > 1:
        raise E.Fail("the retry was a hit on the broken copy: %s" % tries)
    if not (fx.fired("sendfile") or fx.fired("pread")):
        raise E.Fail("no read of %s was failed" % name)
    print("       | tries: %s" % tries)
    if not dropped(name):
        raise E.Fail("the unreadable version %s was not dropped" % name)
    fx.intact(want_hit=["keep", "small", "other"])
    fx.rules()
    r = fx.get("victim")
    E.same_bytes("GET victim after the fault", r.body, body)
    E.eq("GET victim after the fault", r.h("x-cache"), "hit")
    fx.no_leaks(BASE)


t.check("read error (EIO) on one cached object: the next GET refetches from the backend, "
        "others untouched", read_error_hit)


def read_error_partial():
    body = rnd(4 * MIB)
    with open(os.path.join(fx.srv.store, B, "half"), "wb") as f:
        f.write(body)
    r = fx.get("half", headers={"Range": "bytes=0-%d" % (MIB - 1)})
    E.eq("ranged GET caches block 0", r.status, 206)
    E.same_bytes("ranged GET", r.body, body[:MIB])
    # block 0 is marked present once synced and indexed, just after the answer: a ranged GET
    # of it that is a hit shows it (waited for, at most 10 s)
    if not E.wait_until(lambda: fx.get("half", headers={"Range": "bytes=0-%d" % (MIB - 1)})
                        .h("x-cache") == "hit", timeout=10, every=0.1):
        raise E.Fail("block 0 of half is not a hit 10 s after it was read")
    name = os.path.basename(version_files(fx, "half")[0])
    fx.rules("pread:1:EIO:0:" + name)
    tries = []
    for i in range(3):
        r = fx.get("half")
        done = correct_or_cut("GET half with its cached block unreadable (try %d)" % (i + 1), r, body)
        tries.append((r.status, r.h("x-cache"), len(r.body), done))
        if done:
            break
        dropped(name, "half")   # the failed copy is dropped on a worker: wait for it
    if not tries[-1][3]:
        raise E.Fail("not served correctly in 3 tries: %s" % tries)
    print("       | tries: %s" % tries)
    fx.rules()
    E.same_bytes("GET half after the fault", fx.get("half").body, body)
    fx.stored["half"] = body
    fx.no_leaks(BASE)


t.check("read error (EIO) on a partly cached object (streamed by pread): refetched next time",
        read_error_partial)


def fsync_failures():
    # (a) the staged upload cannot be made durable: the PUT fails, the backend keeps the old one
    old = fx.stored["keep"]
    fx.rules("fsync:1:EIO:1:/cache/tmp/")
    r = fx.put("keep", rnd(MIB))
    clean_error("PUT whose staged file fails fsync", r, {500}, "InternalError")
    E.same_bytes("backend copy of keep", on_backend(fx, "keep"), old)
    E.same_bytes("GET keep", fx.get("keep").body, old)
    if not fx.fired("fsync"):
        raise E.Fail("the staged fsync was not failed")
    # (b) a fill's fdatasync fails: bytes reach the reader, blocks are never marked present
    cold = rnd(3 * MIB)
    with open(os.path.join(fx.srv.store, B, "cold-sync"), "wb") as f:
        f.write(cold)
    fx.rules("fdatasync:1:EIO:0:/cache/data/")
    seen = []
    for i in range(3):
        n0 = len(fx.fired("fdatasync"))
        r = fx.get("cold-sync")
        seen.append((r.h("x-cache"), correct_or_cut("GET cold-sync, fdatasync failing", r, cold)))
        # the fill syncs after its last byte reached the reader: the next GET goes once its
        # fdatasync has failed, i.e. once the run has ended without marking anything present.
        # (A GET sent while that run's bytes had all landed was answered from them as a
        # "hit": 2 runs in 4 once the test no longer slept 0.8 s just before.)
        E.wait_until(lambda: len(fx.fired("fdatasync")) > n0, timeout=10)
    if any(h == "hit" for h, _ in seen) or not any(ok for _, ok in seen):
        raise E.Fail("with every fdatasync failing: %s (want correct bytes, never a hit)" % seen)
    if not fx.fired("fdatasync"):
        raise E.Fail("no fill fdatasync was failed")
    fx.rules()
    E.same_bytes("GET cold-sync once fdatasync works", fx.get("cold-sync").body, cold)
    E.eq("then cached", fx.get("cold-sync").h("x-cache"), "hit")
    fx.stored["cold-sync"] = cold
    # (c) the LMDB index cannot sync: writes still reach the backend, reads are right or clean
    fx.rules("fdatasync:1:EIO:0:/cache/index/", "fsync:1:EIO:0:/cache/index/")
    body = rnd(MIB + 1)
    r = fx.req("PUT", "/%s/idx-fail" % B, body=body)  # not in fx.stored until the index works
    if r.status != 200:
        clean_error("PUT with the index failing", r, {500, 503, 507})
    cold2 = rnd(2 * MIB)
    with open(os.path.join(fx.srv.store, B, "cold-idx"), "wb") as f:
        f.write(cold2)
    for key, want in (("idx-fail", body if r.status == 200 else None), ("cold-idx", cold2)):
        g = fx.get(key)
        if want is not None:
            correct_or_cut("GET %s with the index failing" % key, g, want)
    fx.intact(want_hit=["keep", "small", "other"])  # what is indexed stays readable
    if not fx.fired():
        raise E.Fail("no index write or sync was failed")
    fx.rules()
    if r.status == 200:
        E.same_bytes("GET idx-fail once the index works", fx.get("idx-fail").body, body)
        fx.stored["idx-fail"] = body
    E.same_bytes("GET cold-idx once the index works", fx.get("cold-idx").body, cold2)
    fx.stored["cold-idx"] = cold2
    # (d) adopting a PUT fails (directory fsync, rename): it is on the backend, so 200, and
    # the next GET fetches it
    for rule in ("fsync:1:EIO:0:/cache/data/", "rename:1:EIO:0:/cache/data/",
                 "rename:1:ENOSPC:0:/cache/data/"):
        fx.rules(rule)
        body = rnd(MIB + 3)
        E.eq("PUT adopt-fail (%s)" % rule, fx.put("adopt-fail", body).status, 200)
        fx.rules()
        E.same_bytes("GET adopt-fail (%s)" % rule, fx.get("adopt-fail").body, body)
    fx.intact()
    fx.healthy()
    fx.no_leaks(BASE)


t.check("fsync/fdatasync/rename failures (staged upload, fill, LMDB, adopt): clean errors, "
        "nothing damaged", fsync_failures)


# ---------------------------------------------------------------------------- allocations

def put_chunked(key, data):
    """A STREAMING-AWS4-HMAC-SHA256-PAYLOAD upload built by hand (awschunk.c's path)."""
    amz = E.amz_now()
    mode = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"
    path = "/%s/%s" % (B, key)
    chunks = [data[i:i + 65536] for i in range(0, len(data), 65536)]
    hdrs = {"host": "127.0.0.1:%d" % fx.srv.port, "content-encoding": "aws-chunked",
            "x-amz-decoded-content-length": str(len(data))}
    seed, scope, _ = E.sign_headers("PUT", path, "", dict(hdrs), mode, fx.srv.ak, fx.srv.sk, amz_date=amz)
    hdrs["content-length"] = str(len(E.aws_chunked_body(chunks, fx.srv.sk, amz, scope, seed)))
    seed, scope, _ = E.sign_headers("PUT", path, "", hdrs, mode, fx.srv.ak, fx.srv.sk, amz_date=amz)
    body = E.aws_chunked_body(chunks, fx.srv.sk, amz, scope, seed)
    return E.request(fx.srv.endpoint, "PUT", path, headers={k: v for k, v in hdrs.items() if k != "host"},
                     body=body, anon=True, timeout=30)


def request_mix(i, small):
    """About a dozen requests touching every request path; returns their statuses."""
    out = []
    admin = {"Authorization": "Bearer " + fx.srv.token}
    delete_xml = b"<Delete><Object><Key>m%d-gone</Key></Object></Delete>" % i
    md5 = __import__("base64").b64encode(hashlib.md5(delete_xml).digest()).decode()
    ops = [
        lambda: fx.put("m%d" % i, small),
        lambda: fx.get("keep"),
        lambda: fx.req("HEAD", "/%s/other" % B),
        lambda: E.request(fx.srv.endpoint, "DELETE", "/_/cache/%s/small" % B, headers=admin, anon=True, timeout=30),
        lambda: fx.get("small"),
        lambda: fx.req("GET", "/" + B, query="list-type=2&prefix=m"),
        lambda: fx.req("POST", "/" + B, query="delete", body=delete_xml, headers={"Content-MD5": md5}),
        lambda: put_chunked("c%d" % i, small),
        lambda: fx.req("POST", "/%s/mp%d" % (B, i), query="uploads"),
        lambda: fx.req("DELETE", "/%s/m%d" % (B, i)),
        lambda: fx.get("m%d" % i),
    ]
    for op in ops:
        try:
            r = op()
            out.append(r.status)
            if r.status == 200 and r.h("x-amz-request-id") and op is ops[7]:
                fx.stored["c%d" % i] = small
        except (OSError, E.Fail) as e:  # a connection libmicrohttpd could not serve
            out.append("closed" if not isinstance(e, TimeoutError) else "TIMEOUT")
    fx.stored.pop("m%d" % i, None)  # deleted by the mix
    return out


def malloc_sweep():
    lo, hi, step = SWEEP
    small = rnd(20000)
    seen = collections.Counter()
    t0 = time.time()
    fired = 0
    for n in range(lo, hi, step):
        fx.rules("malloc:%d:ENOMEM:1" % n)
        res = request_mix(n, small)
        seen.update(str(s) for s in res)
        if "TIMEOUT" in res:
            raise E.Fail("allocation %d failed: a request hung: %s" % (n, res))
        if not fx.healthy(quiet=True):
            fx.rules()
            if not fx.healthy(quiet=True):
                raise E.Fail("allocation %d failed: the server is down (status %s); log tail:\n%s"
                             % (n, fx.srv.proc.poll(), fx.srv.log_tail(12)))
    fx.rules()
    fired = fx._log_text().count("malloc #")
    print("       | %d sweeps (%d allocations failed) in %.0f s; statuses %s"
          % (len(range(lo, hi, step)), fired, time.time() - t0, dict(seen)))
    if not fired:
        raise E.Fail("no allocation was failed")
    fx.intact()
    fx.healthy()
    fx.no_leaks(BASE)


t.check("allocation failure at the N-th malloc, swept over a request mix: no crash, no hang, "
        "everything acknowledged intact", malloc_sweep)


def final_fds():
    now = fx.no_leaks(BASE)
    print("       | descriptors: start %s, end %s" % (dict(BASE), dict(now)))


t.check("no descriptor leaked over all the faults above", final_fds)


def index_write_error():
    # A failed write of an LMDB meta page puts the environment in its fatal state (MDB_PANIC):
    # every transaction fails until it is opened again. The index reopens it (cache/index.c)
    # at its next transaction, so only the requests of that moment meet the error: no crash,
    # clean errors, cached objects right; then caching goes on without a restart.
    body = rnd(MIB + 9)
    fired = []

    def panicked():
        with open(fx.srv.log, errors="replace") as f:
            return "MDB_PANIC" in f.read()

    # A commit writes its data pages (writev, or pwrite for a lone page), then the meta page
    # (pwrite, the commit's last): a failed data write only fails that commit, a failed meta
    # write is fatal. The n-th pwrite of a commit, n = 1, 2, ..., until one was the meta page
    # (the index logs MDB_PANIC when its next transaction finds it). Which call of the window
    # is the meta page depends on how the commit's pages lie (a lone data page is a pwrite
    # too), so the sweep ends with the next pwrite shorter than a page: a meta page.
    rules = (["write:1:EIO:1:/cache/index/"]
             + ["pwrite:%d:EIO:1:/cache/index/" % n for n in range(1, 9)]
             + ["pwrite:1:EIO:1:/cache/index/:4095"])
    for i, rule in enumerate(rules):
        fx.rules(rule)
        r = fx.req("PUT", "/%s/idx-write" % B, body=body)
        if r.status != 200:
            clean_error("PUT with an index write failing", r, {500, 503, 507})
        fired += fx.fired()
        fx.rules()
        # a miss indexes a new entry: the first transaction after the fault
        probe = "probe-%d" % i
        with open(os.path.join(fx.srv.store, B, probe), "wb") as f:
            f.write(body[:1000])
        E.same_bytes("GET %s after %s" % (probe, rule), fx.get(probe).body, body[:1000])
        fx.stored[probe] = body[:1000]
        if panicked():
            break
    if not fired:
        raise E.Fail("no index write was failed")
    print("       | failed: %s" % "; ".join(f.split(" /")[0] + " " + os.path.basename(f)
                                           for f in fired))
    with open(os.path.join(fx.srv.store, B, "cold-idx2"), "wb") as f:
        f.write(body)
    E.eq("PUT idx-write once the index is reopened", fx.put("idx-write", body).status, 200)
    for key in ("idx-write", "cold-idx2", "keep", "small", "other"):
        r = fx.get(key)
        E.eq("GET %s after the index write errors" % key, r.status, 200)
        E.same_bytes("GET %s after the index write errors" % key, r.body,
                     body if key == "cold-idx2" else fx.stored[key])
    fx.stored["cold-idx2"] = body
    # indexed again without a restart: the PUT was adopted, the cold miss cached
    E.eq("GET idx-write: cached (no restart)", fx.get("idx-write").h("x-cache"), "hit")
    E.eq("GET cold-idx2 again: cached (no restart)", fx.get("cold-idx2").h("x-cache"), "hit")
    with open(fx.srv.log, errors="replace") as f:
        log = f.read()
    if "MDB_PANIC" not in log or "reopened" not in log:
        raise E.Fail("no meta page write failed, or the index was not reopened; log tail:\n"
                     + fx.srv.log_tail(10))
    fx.healthy()
    fx.srv.stop()
    fx.srv.start()
    fx.intact()
    E.eq("GET cold-idx2 cached after a restart", fx.get("cold-idx2").h("x-cache"), "hit")


t.check("index write error (LMDB fatal state): no crash, clean errors, cached data right; "
        "the index reopens and caches again without a restart", index_write_error)
fx.srv.stop()
fx.srv.cleanup()


# ---------------------------------------------------------------------------- LMDB map full

MAP_CAP = 128 * 1024
lm = Faulty(mapsize=MAP_CAP)
E.setup_or_die(t, lm.srv, lm.start)
LM = {"first_full": None, "n": 0}


def bypassed_above(n, wait=2.0):
    """Whether cache.bypassed exceeds @n within @wait seconds: a GET is counted when the server
    has finished with it, which may be just after the client read its last byte."""
    deadline = time.time() + wait
    while True:
        if lm.srv.stats()["cache"]["bypassed"] > n:
            return True
        if time.time() >= deadline:
            return False
        time.sleep(0.02)


def get_uncached_or_indexed(key, body):
    """GET @key (right bytes, 200) once the index is full: a hit, or not indexed and then
    counted as a bypass, or (room freed meanwhile) indexed after all: the next GET is a hit.
    Returns the x-cache of the first GET."""
    by0 = lm.srv.stats()["cache"]["bypassed"]
    g = lm.get(key)
    E.eq("GET %s (map capped at %d bytes): status" % (key, MAP_CAP), g.status, 200)
    E.same_bytes("GET %s" % key, g.body, body)
    if g.h("x-cache") != "hit" and not bypassed_above(by0):
        g2 = lm.get(key)
        E.same_bytes("GET %s again" % key, g2.body, body)
        if g2.h("x-cache") != "hit":
            raise E.Fail("GET %s: neither cached nor counted as bypassed (x-cache %s, then %s)"
                         % (key, g.h("x-cache"), g2.h("x-cache")))
    return g.h("x-cache")


def map_full():
    # Once the map is full, a PUT (write-through) still reaches the backend and answers 200;
    # only the cache cannot hold it. A GET of what cannot be indexed is served from the
    # backend uncached (a bypass), never refused.
    statuses = collections.Counter()
    early = []
    for i in range(3000):
        key = "o%05d" % i
        body = b"object %d " % i + rnd(i % 50)
        r = lm.put(key, body)
        if r.status != 200:
            clean_error("PUT %s with the index full" % key, r, {500, 503, 507})
        if LM["first_full"] is None:
            g = lm.get(key)
            E.eq("GET %s: status" % key, g.status, 200)
            E.same_bytes("GET %s" % key, g.body, body)
            how = g.h("x-cache")
        else:
            how = get_uncached_or_indexed(key, body)
        statuses["GET 200 %s" % how] += 1
        if how == "hit":
            if LM["first_full"] is None:
                early.append(key)
        elif LM["first_full"] is None:
            LM["first_full"] = i
        LM["n"] = i + 1
        if LM["first_full"] is not None and i >= LM["first_full"] + 30:
            break
    print("       | index full after %s objects (map capped at %d bytes); %s"
          % (LM["first_full"], MAP_CAP, dict(statuses)))
    if LM["first_full"] is None:
        raise E.Fail("the index never filled up: every GET of %d objects a hit" % LM["n"])
    # a cold object never PUT through the gateway: served, uncached, more than once
    cold = rnd(3 * MIB + 11)
    with open(os.path.join(lm.srv.store, B, "cold-full-map"), "wb") as f:
        f.write(cold)
    by0 = lm.srv.stats()["cache"]["bypassed"]
    for n in (1, 2):
        get_uncached_or_indexed("cold-full-map", cold)
        E.eq("HEAD cold-full-map with the index full",
             lm.req("HEAD", "/%s/cold-full-map" % B).status, 200)
    if lm.srv.stats()["cache"]["bypassed"] <= by0:
        raise E.Fail("no GET of cold-full-map was a bypass")
    lm.stored["cold-full-map"] = cold
    # overwrites of indexed objects: the old record cannot always be deleted (a delete needs
    # free pages too), yet reads return the new bytes, then and later, never an error
    over = early[50:90]
    for key in over:
        body = b"new " + rnd(30)
        E.eq("PUT %s over an indexed object with the index full" % key, lm.put(key, body).status, 200)
        E.same_bytes("GET %s after the overwrite" % key, lm.get(key).body, body)
    time.sleep(0.5)
    for key in over:
        g = lm.get(key)
        E.eq("GET %s again after the overwrite" % key, g.status, 200)
        E.same_bytes("GET %s again after the overwrite" % key, g.body, lm.stored[key])
    lm.healthy()
    # what was indexed before is intact and still served from the cache
    for key in early[:50]:
        r = lm.get(key)
        E.eq("GET %s (indexed before the map filled)" % key, (r.status, r.h("x-cache")), (200, "hit"))
        E.same_bytes("GET %s" % key, r.body, lm.stored[key])
    LM["early"] = early


t.check("LMDB map full: PUTs still reach the backend, GETs of what cannot be indexed are "
        "served uncached (bypass), indexed entries intact", map_full)


def map_grows():
    lm.srv.stop()
    del lm.srv.env["S3C_FAULT_MDB_MAPSIZE"]
    lm.srv.start()
    lm.intact(want_hit=LM.get("early", [])[:50])  # every object right; the early ones hits
    body = rnd(5000)
    E.eq("PUT after growing", lm.put("after-grow", body).status, 200)
    E.eq("GET after growing", lm.get("after-grow").h("x-cache"), "hit")
    out = subprocess.run(["mdb_stat", "-e", os.path.join(lm.srv.cache, "index")],
                         capture_output=True, text=True, timeout=30).stdout
    m = re.search(r"Map size: (\d+)", out)
    if not m or int(m.group(1)) <= MAP_CAP:
        raise E.Fail("the map did not grow on restart: %r" % out[:300])
    print("       | map size after the restart: %s bytes" % m.group(1))
    for key in ("o%05d" % (LM["first_full"] + 5),):
        r = lm.get(key)
        r = lm.get(key)
        E.eq("a key that could not be indexed is cached now", r.h("x-cache"), "hit")
    lm.healthy()


t.check("LMDB map full then restarted without the cap: the map grows, nothing lost or corrupt",
        map_grows)
lm.srv.stop()
lm.srv.cleanup()

# A write-back PUT is acknowledged once it is indexed (dirty): with the map full it cannot be,
# so it fails cleanly and nothing is stored; reads still work (uncached).
wb = Faulty(extra=["--write-mode", "back"], mapsize=MAP_CAP)
E.setup_or_die(t, wb.srv, wb.start)


def map_full_write_back():
    refused = None
    for i in range(3000):
        key = "w%05d" % i
        r = wb.put(key, b"object %d " % i + rnd(i % 50))
        if r.status != 200:
            clean_error("write-back PUT %s with the index full" % key, r, {507},
                        "InsufficientStorage")
            refused = key
            break
    if refused is None:
        raise E.Fail("the index never filled up: 3000 write-back PUTs acknowledged")
    print("       | write-back PUT refused after %d objects (map capped at %d bytes)"
          % (len(wb.stored), MAP_CAP))
    r = wb.get(refused)
    E.expect_error("GET of the refused write-back PUT", r, 404, "NoSuchKey")
    flush = E.request(wb.srv.endpoint, "POST", "/_/flush", query="timeout_s=20",
                      headers={"Authorization": "Bearer " + wb.srv.token}, anon=True, timeout=60)
    E.eq("POST /_/flush", flush.status, 200)
    if on_backend(wb, refused) is not None:
        raise E.Fail("the refused write-back PUT reached the backend")
    cold = rnd(2 * MIB + 3)
    with open(os.path.join(wb.srv.store, B, "cold-wb"), "wb") as f:
        f.write(cold)
    g = wb.get("cold-wb")
    E.eq("GET of an uncached object with the index full (write-back)", g.status, 200)
    E.same_bytes("GET cold-wb", g.body, cold)
    wb.stored["cold-wb"] = cold
    wb.intact()  # every acknowledged write reads back
    wb.healthy()


t.check("LMDB map full, write-back: a PUT that cannot be indexed gets 507 InsufficientStorage "
        "and stores nothing; acknowledged writes and reads intact", map_full_write_back)
wb.srv.stop()
wb.srv.cleanup()
print("faults took %.0f s" % (time.time() - T0))
sys.exit(t.finish())
