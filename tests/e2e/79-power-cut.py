"""79-power-cut: what an answer acknowledged survives a power cut (issue 46). The cache directory
lives on tests/powercut/lazyfs.c, a FUSE file system that keeps what is written in memory and,
on a cut, keeps only what fsync/fdatasync made durable (file data; a directory's entries only
once the directory itself was fsync'd). Each cut point runs a scenario on a fresh gateway, kills
it (SIGKILL) at a random moment, drops everything not durable, and restarts a gateway on what
is left (a plain directory). Then:
- every acknowledged write reads back byte-exact: its last acknowledged version, or a later
  one that was in flight (from the cache, or from the backend once drained);
- no GET serves bytes that are not some version's that was written (a cut fill serves the
  backend's bytes, never zeros or a mix), and a listed key is readable (no index entry whose
  data is missing);
- what is lost is only what was never acknowledged.
Scenarios: write-back PUTs and DELETEs (backend down: they stay dirty, and backend up: drains in flight),
write-back multipart checkpoints, cold fills of large objects, warm-ups with pins, eviction
(LMDB commits under eviction) and SIGHUP reloads during writes. Cut points are drawn from
POWERCUT_SEED (default 1): POWERCUT_CUTS of them (default 8, one a scenario; 120 under
E2E_FULL=1).
LAZYFS_IGNORE=tmp/stage- runs the gateway as if it missed the fsync of a staged body: the
suite must then fail (tests/e2e/79-power-cut.py --expect-fail, run by make test-full).
Skipped where FUSE cannot be mounted (no /dev/fuse, no fusermount3, no libfuse3-dev)."""
import hashlib
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

import e2elib as E

MiB = 1 << 20
B = "ckpt"
t = E.Suite("79-power-cut.py")
FULL = os.environ.get("E2E_FULL") == "1"
CUTS = int(os.environ.get("POWERCUT_CUTS") or (120 if FULL else 8))
SEED = int(os.environ.get("POWERCUT_SEED") or 1)
EXPECT_FAIL = "--expect-fail" in sys.argv


def lazyfs_bin(tmp):
    src = os.path.join(E.REPO, "tests", "powercut", "lazyfs.c")
    have = os.path.join(os.path.dirname(os.path.abspath(E.BIN)), "lazyfs")
    if os.access(have, os.X_OK) and os.path.getmtime(have) >= os.path.getmtime(src):
        return have
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "fuse3"], capture_output=True, text=True)
    if flags.returncode:
        return None
    out = os.path.join(tmp, "lazyfs")
    r = subprocess.run(["cc", "-std=gnu11", "-O2", "-D_GNU_SOURCE", "-o", out, src] + flags.stdout.split(),
                       capture_output=True, timeout=120)
    return out if r.returncode == 0 else None


def fuse_usable():
    if not os.path.exists("/dev/fuse") or not shutil.which("fusermount3"):
        return "no /dev/fuse or fusermount3"
    if not os.access("/dev/fuse", os.R_OK | os.W_OK):
        return "/dev/fuse is not ours to open"
    return None


class Lazy:
    """One lazyfs mount at @mnt."""

    def __init__(self, binary, mnt, env=None):
        self.mnt = mnt
        os.makedirs(mnt, exist_ok=True)
        self.log = open(mnt + ".log", "wb")
        self.proc = subprocess.Popen([binary, mnt, "-f"], stdout=self.log, stderr=subprocess.STDOUT,
                                     env=dict(os.environ, **(env or {})))
        if not E.wait_until(lambda: os.path.ismount(mnt) or self.proc.poll() is not None, timeout=10) \
                or not os.path.ismount(mnt):
            raise E.Fail("lazyfs did not mount %s" % mnt)

    def ctl(self, cmd):
        with open(os.path.join(self.mnt, ".lazyfs-ctl"), "w") as f:
            f.write(cmd + "\n")
        with open(os.path.join(self.mnt, ".lazyfs-ctl")) as f:
            return f.read().strip()

    def dump(self, to):
        ans = self.ctl("dump " + to)
        if ans != "dump 0":
            raise E.Fail("lazyfs dump: %r" % ans)

    def close(self):
        subprocess.run(["fusermount3", "-u", self.mnt], capture_output=True, timeout=30)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def fsync_dir(p):
    fd = os.open(p, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Ledger:
    """What the clients were told. versions[key]: shas in the order written; acked[key]: index
    of the newest acknowledged one (-1: none); a write in flight has its sha in versions."""

    def __init__(self):
        self.mu = threading.Lock()
        self.versions, self.acked = {}, {}

    def sent(self, key, data):
        """@data None: a DELETE."""
        with self.mu:
            self.versions.setdefault(key, []).append(None if data is None else E.sha(data))
            self.acked.setdefault(key, -1)
            return len(self.versions[key]) - 1

    def ack(self, key, i):
        with self.mu:
            self.acked[key] = max(self.acked[key], i)

    def allowed(self, key):
        """Shas a read may return: the newest acknowledged and any written after it."""
        v, a = self.versions.get(key, []), self.acked.get(key, -1)
        return set(v[max(a, 0):]), a >= 0


def put(srv, key, data, ledger, query="", headers=None):
    i = ledger.sent(key, data) if ledger else None
    r = srv.req("PUT", "/%s/%s" % (B, key), query=query, body=data, payload="unsigned",
                headers=headers, timeout=30)
    if r.status == 200 and ledger:
        ledger.ack(key, i)
    return r


def delete(srv, key, ledger):
    i = ledger.sent(key, None)
    r = srv.req("DELETE", "/%s/%s" % (B, key), timeout=30)
    if r.status == 204:
        ledger.ack(key, i)


def mpu(srv, key, parts, ledger):
    """A multipart checkpoint (boto3): acknowledged at its Complete."""
    s3 = srv.boto3(read_timeout=30, connect_timeout=5)
    uid = s3.create_multipart_upload(Bucket=B, Key=key)["UploadId"]
    done = []
    for n, p in enumerate(parts, 1):
        e = s3.upload_part(Bucket=B, Key=key, UploadId=uid, PartNumber=n, Body=p)["ETag"]
        done.append({"PartNumber": n, "ETag": e})
    i = ledger.sent(key, b"".join(parts))
    s3.complete_multipart_upload(Bucket=B, Key=key, UploadId=uid, MultipartUpload={"Parts": done})
    ledger.ack(key, i)


def admin(srv, method, path, body=b""):
    return E.request(srv.endpoint, method, path, body=body, anon=True, timeout=30,
                     headers={"Authorization": "Bearer " + srv.token})


def blob(rng, lo, hi):
    n = rng.randint(lo, hi)
    return rng.randbytes(n) if hasattr(rng, "randbytes") else os.urandom(n)


# --- scenarios: (name, gateway flags, backend "down"|"up", preload, workload) ---------------
# a workload(srv, rng, ledger, stop) runs until stop is set; preload(store, rng) -> {key: sha}


def wl_wb_puts(srv, rng, ledger, stop):
    keys = ["w%d" % i for i in range(8)]
    while not stop.is_set():
        if rng.random() < 0.15:
            delete(srv, rng.choice(keys), ledger)
        else:
            put(srv, rng.choice(keys), blob(rng, 1, 3 * MiB), ledger)


def wl_wb_mpu(srv, rng, ledger, stop):
    n = 0
    while not stop.is_set():
        parts = [blob(rng, 5 * MiB, 5 * MiB) for _ in range(2)] + [blob(rng, 1, MiB)]
        mpu(srv, "shard%d" % (n % 3), parts, ledger)
        n += 1


def wl_wb_sighup(srv, rng, ledger, stop):
    keys = ["h%d" % i for i in range(4)]
    while not stop.is_set():
        put(srv, rng.choice(keys), blob(rng, 1, MiB), ledger)
        if srv.proc and rng.random() < 0.3:
            srv.proc.send_signal(signal.SIGHUP)


def wl_cold_reads(srv, rng, ledger, stop):
    keys = sorted(srv.preloaded)
    while not stop.is_set():
        k = rng.choice(keys)
        srv.req("GET", "/%s/%s" % (B, k), timeout=30)


def wl_warm_pin(srv, rng, ledger, stop):
    import json
    body = json.dumps({"bucket": B, "prefix": "big", "pin": True}).encode()
    admin(srv, "POST", "/_/warm", body)
    wl_cold_reads(srv, rng, ledger, stop)


def wl_evict(srv, rng, ledger, stop):
    keys = sorted(srv.preloaded)
    while not stop.is_set():
        if rng.random() < 0.3:
            put(srv, "e%d" % rng.randrange(6), blob(rng, 1, 2 * MiB), ledger)
        else:
            srv.req("GET", "/%s/%s" % (B, rng.choice(keys)), timeout=30)


def preload_big(store, rng):
    out = {}
    for i in range(4):
        d = blob(rng, 6 * MiB, 12 * MiB)
        with open(os.path.join(store, B, "big%d" % i), "wb") as f:
            f.write(d)
        out["big%d" % i] = E.sha(d)
    return out


def preload_many(store, rng):
    out = {}
    for i in range(24):
        d = blob(rng, 256 * 1024, 2 * MiB)
        with open(os.path.join(store, B, "m%02d" % i), "wb") as f:
            f.write(d)
        out["m%02d" % i] = E.sha(d)
    return out


WB = ["--write-mode", "back"]
SCENARIOS = [
    ("write-back PUTs, backend down", WB, "down", None, wl_wb_puts),
    ("write-back PUTs, draining", WB, "up", None, wl_wb_puts),
    ("write-back multipart checkpoints, backend down", WB, "down", None, wl_wb_mpu),
    ("write-back multipart checkpoints, draining", WB, "up", None, wl_wb_mpu),
    ("cold fills of large objects", [], "up", preload_big, wl_cold_reads),
    ("warm-up with pins", [], "up", preload_big, wl_warm_pin),
    ("LMDB commits under eviction (16 MiB cache)", ["--cache-size", "16M"], "up", preload_many, wl_evict),
    ("SIGHUP reloads during write-back PUTs", WB, "up", None, wl_wb_sighup),
]


def gateway(suite, cache, store, flags, backend_down, token=None, keys=None):
    srv = E.Server(suite, extra=["--revalidate-after", "never", "--log-level", os.environ.get("PC_LOG", "info")] + flags)
    shutil.rmtree(srv.tmp, ignore_errors=True)
    srv.tmp = os.path.dirname(cache)
    srv.cache, srv.store = cache, store
    if keys:
        srv.ak, srv.sk = keys
        srv.auth = ["--access-key", srv.ak, "--secret-key", srv.sk]
    if token:
        srv.token = token
    if backend_down:
        # an S3 backend nobody listens on: the drain retries, the dirty copy is the only one
        srv.extra += ["--backend", "http://127.0.0.1:%d" % E.free_port(), "--backend-access-key", "x",
                      "--backend-secret-key", "y", "--backend-timeout", "1s"]
    return srv


def kill(srv):
    p, srv.proc = srv.proc, None
    if p and p.poll() is None:
        p.kill()
        p.wait()
    if srv in E._LIVE:
        E._LIVE.remove(srv)  # its directories are this cut's, removed with it


def get(srv, key, bad):
    """GET @key, or None (and a line in @bad) when it is not answered whole within 20 s."""
    try:
        return srv.req("GET", "/%s/%s" % (B, key), timeout=20)
    except Exception as e:  # noqa: BLE001 - an answer cut short, or none
        bad.append("%s: GET not answered whole: %r" % (key, e))
        return None


def verify(srv, ledger, preloaded, report):
    """Every acknowledged key reads back as an allowed version; nothing reads as bytes never
    written; every listed key is readable."""
    bad = []
    for key in sorted(ledger.versions):
        allowed, was_acked = ledger.allowed(key)
        written = set(ledger.versions[key])
        r = get(srv, key, bad)
        if r is None:
            continue
        if r.status == 200:
            got = E.sha(r.body)
            if got not in written:
                bad.append("%s: %d bytes that no write sent" % (key, len(r.body)))
            elif got not in allowed:
                bad.append("%s: an older version than the acknowledged one" % key)
        elif r.status == 404:
            if was_acked and None not in allowed:
                bad.append("%s: acknowledged, then 404" % key)
        elif was_acked:
            bad.append("%s: acknowledged, then %d %s" % (key, r.status, r.code()))
        elif r.status != 503:  # 503: not cached, and the backend is away
            bad.append("%s: never acknowledged: %d %s" % (key, r.status, r.code()))
    for key, want in sorted(preloaded.items()):
        r = get(srv, key, bad)
        if r is None:
            continue
        if r.status != 200 or E.sha(r.body) != want:
            bad.append("%s (backend object): %d, %s" % (key, r.status,
                       "%d bytes not the backend's" % len(r.body) if r.status == 200 else r.code()))
    r = srv.req("GET", "/%s" % B, query="list-type=2", timeout=60)
    if r.status == 200:
        for k in [x.split(b"</Key>")[0].decode() for x in r.body.split(b"<Key>")[1:]]:
            if k not in ledger.versions and k not in preloaded:
                bad.append("%s: listed, never written" % k)
    report.extend(bad)


def one_cut(binary, n, scen, ignore):
    name, flags, backend, preload, workload = scen
    rng = random.Random(SEED * 1000003 + n)
    root = tempfile.mkdtemp(prefix="s3c-pc.", dir=os.environ.get("TMPDIR", "/tmp"))
    mnt, out, store = (os.path.join(root, d) for d in ("mnt", "out", "store"))
    os.makedirs(os.path.join(store, B))
    lz = None
    srv = srv2 = None
    report = []
    try:
        lz = Lazy(binary, mnt, env={"LAZYFS_IGNORE": ignore} if ignore else None)
        os.makedirs(os.path.join(mnt, "cache"))
        fsync_dir(mnt)
        preloaded = preload(store, rng) if preload else {}
        down = backend == "down"
        srv = gateway(t, os.path.join(mnt, "cache"), store, flags, down)
        srv.start()
        srv.preloaded = preloaded
        ledger = Ledger()
        stop = threading.Event()
        errs = []

        def run():
            try:
                workload(srv, rng_w, ledger, stop)
            except Exception as e:  # noqa: BLE001 - the cut breaks requests in flight
                if not stop.is_set():
                    errs.append(repr(e))
        rng_w = random.Random(rng.random())
        th = threading.Thread(target=run, daemon=True)
        th.start()
        cut_at = rng.uniform(0.2, 5.0 if workload is wl_wb_mpu else 2.5)
        time.sleep(cut_at)
        kill(srv)  # the power goes: the process first, then what the disk did not keep
        stop.set()
        th.join(30)
        lz.dump(out)
        lz.close()
        lz = None
        acked = sum(1 for k, a in ledger.acked.items() if a >= 0)
        srv2 = gateway(t, os.path.join(out, "cache"), store, flags, down, token=srv.token,
                       keys=(srv.ak, srv.sk))
        if not os.path.isdir(os.path.join(out, "cache")):
            report.append("the cache directory itself did not survive")
            os.makedirs(os.path.join(out, "cache"))
        srv2.start()
        verify(srv2, ledger, preloaded, report)
        if not down and "--write-mode" in flags:
            # drained after the restart: the backend ends with the acknowledged versions
            r = admin(srv2, "POST", "/_/flush", b'{"timeout_s":60}')
            if r.status != 200:
                report.append("flush after the restart: %d %s" % (r.status, r.body[:200]))
            for key in sorted(ledger.versions):
                allowed, was_acked = ledger.allowed(key)
                p = os.path.join(store, B, key)
                have = E.sha(open(p, "rb").read()) if os.path.exists(p) else None
                if was_acked and have not in allowed:
                    report.append("%s: acknowledged, %s in the backend after the flush"
                                  % (key, "another version" if have else "nothing"))
        kill(srv2)
        line = "cut %3d %-48s at %.2f s: %d keys acknowledged%s" % (
            n, name, cut_at, acked, "" if not report else ": " + "; ".join(report[:3]))
        return line, report
    finally:
        for s in (srv, srv2):
            if s:
                kill(s)
        if lz:
            lz.close()
        if os.environ.get("E2E_KEEP") == "1" and report:
            print("kept " + root)
        else:
            shutil.rmtree(root, ignore_errors=True)


def short_cache_file():
    """A cache file shorter than its index says (what a cut leaves where a gateway or a file
    system did not sync) ends its GET at once, short, instead of stalling it (libmicrohttpd's
    sendfile waited for --idle-timeout; libmicrohttpd's patch 05), and the log says so. After a
    restart on the short file, a GET answers at once and never with bytes that are not the
    object's."""
    srv = E.Server(t, extra=["--idle-timeout", "60s", "--revalidate-after", "never"])
    os.makedirs(os.path.join(srv.store, B))
    try:
        srv.start()
        data = os.urandom(3 * MiB)
        E.eq("PUT", put(srv, "short", data, None).status, 200)
        E.eq("GET (a hit)", srv.req("GET", "/%s/short" % B).body, data)
        files = [os.path.join(dp, f) for dp, _, fs in os.walk(os.path.join(srv.cache, "data")) for f in fs]
        E.eq("data files", len(files), 1)
        os.truncate(files[0], MiB)
        t0 = time.time()
        try:
            r = srv.req("GET", "/%s/short" % B, timeout=20)
            got = len(r.body) if r.status == 200 else -1
        except Exception:  # noqa: BLE001 - a short body is an error to the client
            got = None
        took = time.time() - t0
        if took > 10:
            raise E.Fail("the GET of a truncated cache file took %.1f s" % took)
        if got == len(data):
            raise E.Fail("3 MiB served from a 1 MiB file")
        if "Failed to send the response body" not in open(srv.log, errors="replace").read():
            raise E.Fail("the cut answer is not in the log: " + srv.log_tail(5))
        # a power cut: the gateway starts again on the short file
        srv.stop()
        srv.start()
        t0 = time.time()
        try:
            r = srv.req("GET", "/%s/short" % B, timeout=20)
            got = len(r.body) if r.status == 200 else -1
        except Exception:  # noqa: BLE001 - short again
            got = None
        if time.time() - t0 > 10:
            raise E.Fail("the GET after a restart took %.1f s" % (time.time() - t0))
        if got is not None and got != -1 and r.body != data:
            raise E.Fail("after a restart the GET served %d bytes that are not the object's" % got)
    finally:
        srv.stop()
        srv.cleanup()


def main():
    t.check("a cache file shorter than its index ends its GET at once", short_cache_file)
    why = fuse_usable()
    tmp = tempfile.mkdtemp(prefix="s3c-pcbin.")
    binary = None if why else lazyfs_bin(tmp)
    if not why and not binary:
        why = "lazyfs does not build (libfuse3-dev)"
    if why:
        t.skip("power cuts at %d points" % CUTS, why)
        shutil.rmtree(tmp, ignore_errors=True)
        return t.finish()
    ignore = os.environ.get("LAZYFS_IGNORE", "tmp/stage-" if EXPECT_FAIL else "")
    failed = []
    by_scen = {}
    for n in range(CUTS):
        scen = SCENARIOS[n % len(SCENARIOS)]
        line, report = one_cut(binary, n, scen, ignore)
        print("       | " + line)
        by_scen.setdefault(scen[0], []).append(report)
        if report:
            failed.append((n, scen[0], report))
    shutil.rmtree(tmp, ignore_errors=True)
    if EXPECT_FAIL:
        t.record("with the fsync of data files ignored (%r), some of %d cuts lose an acknowledged "
                 "write" % (ignore, CUTS), bool(failed), "no cut found the missing fsync")
        return t.finish()
    for name, reports in by_scen.items():
        bad = [r for r in reports if r]
        t.record("%s: %d cuts, every acknowledged write intact" % (name, len(reports)), not bad,
                 "; ".join(bad[0][:5]) if bad else "")
    return t.finish()


sys.exit(main())
