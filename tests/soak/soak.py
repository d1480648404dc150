"""tests/soak/soak.py (make soak; not part of make test): SOAK_CLIENTS boto3 threads (default
6) run a mixed load against one s3cached for SOAK_SECONDS (default 600): PUTs (small, large,
multipart), whole and ranged GETs, HEADs, listings, deletes, plus random disconnects (a GET
dropped mid-body, a PUT reset mid-body). The cache is smaller than the working set, so
eviction runs all along. Each client owns its keys, so every answer can be checked at once:
GET bytes by SHA-256 against the last acknowledged PUT, 404 after a DELETE, listings equal to
the acknowledged set. At the end every acknowledged object is read back and compared, and the
server's descriptors and RSS are reported first/last and must be flat. With the ASan build
(SOAK_ASAN=1 via make) a sanitizer report or a leak at exit fails the run.
Last line: "soak: N passed, N failed".
"""
import collections
import hashlib
import io
import os
import random
import socket
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "e2e"))
import e2elib as E  # noqa: E402

SECONDS = int(os.environ.get("SOAK_SECONDS", "600"))
CLIENTS = int(os.environ.get("SOAK_CLIENTS", "6"))
KEYS = int(os.environ.get("SOAK_KEYS", "40"))  # per client
SEED = int(os.environ.get("SOAK_SEED", str(int(time.time()))))
B = "soak"
MIB = 1 << 20
t = E.Suite("soak")
srv = E.Server(t, extra=["--cache-size", "64M", "--block-size", "1M", "--revalidate-after", "5s",
                         "--idle-timeout", "20s"])
os.makedirs(os.path.join(srv.store, B))
E.setup_or_die(t, srv, srv.start)
STOP = time.time() + SECONDS
PAYLOAD = os.urandom(16 * MIB)  # bodies are slices of this, at random offsets
print("soak: %d clients x %d keys for %d s, seed %d, server pid %d" % (CLIENTS, KEYS, SECONDS, SEED,
                                                                      srv.proc.pid))
sys.stdout.flush()


def body_of(rng, size):
    off = rng.randrange(0, len(PAYLOAD) - size)
    return PAYLOAD[off:off + size]


def pick_size(rng):
    r = rng.random()
    if r < 0.6:
        return rng.randrange(1, 64 * 1024)
    if r < 0.92:
        return rng.randrange(64 * 1024, 3 * MIB)
    if r < 0.97:
        return rng.randrange(3 * MIB, 8 * MIB)
    return rng.randrange(9 * MIB, 12 * MIB)  # multipart


def sha(b):
    return hashlib.sha256(b).hexdigest()


class Client(threading.Thread):
    def __init__(self, i):
        super().__init__(daemon=True)
        self.i = i
        self.rng = random.Random(SEED * 1000 + i)
        self.want = {}      # key -> bytes of the last acknowledged PUT (absent: no object)
        self.unknown = set()  # keys whose state an unexpected error left unknown
        self.ops = collections.Counter()
        self.errors = []
        import boto3.s3.transfer
        # made here, in the main thread: boto3's default session is not thread-safe
        self.s3 = srv.boto3(retries={"total_max_attempts": 1}, max_pool_connections=4)
        self.tc = boto3.s3.transfer.TransferConfig(multipart_threshold=8 * MIB,
                                                  multipart_chunksize=5 * MIB, max_concurrency=2)

    def key(self):
        return "c%d/k%03d" % (self.i, self.rng.randrange(KEYS))

    def err(self, what):
        self.ops["error"] += 1
        if len(self.errors) < 10:
            self.errors.append("%.0fs %s" % (time.time() - (STOP - SECONDS), what))

    def run(self):
        ops = [(self.put, 30), (self.get, 35), (self.get_range, 10), (self.head, 5),
               (self.list, 6), (self.delete, 6), (self.cut_get, 4), (self.cut_put, 4)]
        total = sum(w for _, w in ops)
        while time.time() < STOP:
            r = self.rng.randrange(total)
            for fn, w in ops:
                if r < w:
                    break
                r -= w
            try:
                fn()
            except Exception as e:  # noqa: BLE001 - reported, the run goes on
                self.err("%s: %s: %s" % (fn.__name__, type(e).__name__, str(e)[:200]))
        self.s3.close()

    def put(self):
        k = self.key()
        data = body_of(self.rng, pick_size(self.rng))
        try:
            if len(data) > 8 * MIB:
                self.s3.upload_fileobj(io.BytesIO(data), B, k, Config=self.tc)
                self.ops["put-multipart"] += 1
            else:
                self.s3.put_object(Bucket=B, Key=k, Body=data)
                self.ops["put"] += 1
        except Exception:
            self.unknown.add(k)
            raise
        self.want[k] = data
        self.unknown.discard(k)

    def check_get(self, k, got, status, off=0, end=None):
        if k in self.unknown:
            return
        want = self.want.get(k)
        if want is None:
            if status != 404:
                self.err("GET %s: expected 404 (deleted or never written), got %s" % (k, status))
            return
        if status not in (200, 206):
            self.err("GET %s: status %s" % (k, status))
            return
        exp = want[off:end]
        if sha(got) != sha(exp):
            self.err("GET %s [%d:%s]: WRONG BYTES (%d bytes, want %d)" % (k, off, end, len(got), len(exp)))

    def get(self):
        k = self.key()
        try:
            got = self.s3.get_object(Bucket=B, Key=k)["Body"].read()
            self.check_get(k, got, 200)
        except self.s3.exceptions.NoSuchKey:
            self.check_get(k, b"", 404)
        self.ops["get"] += 1

    def get_range(self):
        k = self.key()
        want = self.want.get(k)
        if not want or k in self.unknown:
            return self.get()
        a = self.rng.randrange(len(want))
        b = min(len(want), a + self.rng.randrange(1, 2 * MIB))
        got = self.s3.get_object(Bucket=B, Key=k, Range="bytes=%d-%d" % (a, b - 1))["Body"].read()
        self.check_get(k, got, 206, a, b)
        self.ops["get-range"] += 1

    def head(self):
        k = self.key()
        try:
            h = self.s3.head_object(Bucket=B, Key=k)
            if k not in self.unknown and (k not in self.want or h["ContentLength"] != len(self.want[k])):
                self.err("HEAD %s: length %s, want %s" % (k, h["ContentLength"],
                                                         len(self.want.get(k, b"")) if k in self.want else "404"))
        except self.s3.exceptions.ClientError as e:
            if e.response["Error"]["Code"] not in ("404", "NoSuchKey") or (k in self.want and k not in self.unknown):
                self.err("HEAD %s: %s" % (k, e))
        self.ops["head"] += 1

    def list(self):
        got = set()
        for page in self.s3.get_paginator("list_objects_v2").paginate(
                Bucket=B, Prefix="c%d/" % self.i, PaginationConfig={"PageSize": 17}):
            got.update(o["Key"] for o in page.get("Contents", []))
        want = set(self.want)
        diff = (got ^ want) - self.unknown
        if diff:
            self.err("LIST c%d/: differs on %s" % (self.i, sorted(diff)[:5]))
        self.ops["list"] += 1

    def delete(self):
        k = self.key()
        try:
            self.s3.delete_object(Bucket=B, Key=k)
        except Exception:
            self.unknown.add(k)
            raise
        self.want.pop(k, None)
        self.unknown.discard(k)
        self.ops["delete"] += 1

    def cut_get(self):
        """A GET read for a while, then the connection dropped (RST)."""
        k = self.key()
        hdrs = {"host": "127.0.0.1:%d" % srv.port}
        E.sign_headers("GET", "/%s/%s" % (B, k), "", hdrs, E.EMPTY_SHA, srv.ak, srv.sk)
        s = socket.create_connection(("127.0.0.1", srv.port), timeout=30)
        s.sendall(("GET /%s/%s HTTP/1.1\r\n" % (B, k) + "".join("%s: %s\r\n" % kv for kv in hdrs.items())
                   + "\r\n").encode())
        s.recv(self.rng.randrange(1, 200000))
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        s.close()
        self.ops["get-cut"] += 1

    def cut_put(self):
        """A PUT that sends part of its body, then resets: the key must stay as it was."""
        k = self.key()
        data = body_of(self.rng, self.rng.randrange(64 * 1024, 4 * MIB))
        E.request(srv.endpoint, "PUT", "/%s/%s" % (B, k), body=data, ak=srv.ak, sk=srv.sk,
                  payload="unsigned", send_bytes=self.rng.randrange(1, len(data)),
                  close_after_send=True, timeout=30)
        self.ops["put-cut"] += 1


def fd_targets():
    d = "/proc/%d/fd" % srv.proc.pid
    out = []
    for fd in os.listdir(d):
        try:
            out.append(os.readlink(os.path.join(d, fd)))
        except OSError:
            pass
    return out


def cached_files(targets):
    """Descriptors on live cache data files: the in-memory versions of cached objects hold them
    (one each at most), so they come and go with what is cached, not with time."""
    return sum(1 for t in targets if "/cache/data/" in t and not t.endswith("(deleted)"))


def proc_sample():
    pid = srv.proc.pid
    targets = fd_targets()
    fds = len(targets) - cached_files(targets)
    rss = 0
    with open("/proc/%d/status" % pid) as f:
        for ln in f:
            if ln.startswith("VmRSS:"):
                rss = int(ln.split()[1]) * 1024
    return fds, rss


clients = [Client(i) for i in range(CLIENTS)]
samples = []
t0 = time.time()
for c in clients:
    c.start()
next_report = t0
while any(c.is_alive() for c in clients):
    if srv.proc.poll() is not None:
        break
    now = time.time()
    if now >= next_report:
        fds, rss = proc_sample()
        samples.append((now - t0, fds, rss))
        ops = sum((c.ops for c in clients), collections.Counter())
        print("  %5.0fs  fds %4d  rss %6.1f MiB  ops %d  errors %d" % (now - t0, fds, rss / MIB,
              sum(v for k, v in ops.items() if k != "error"), ops["error"]))
        sys.stdout.flush()
        next_report = now + max(10, SECONDS / 20)
    time.sleep(0.5)
for c in clients:
    c.join(60)
ops = sum((c.ops for c in clients), collections.Counter())
print("soak: ran %.0f s: %s" % (time.time() - t0, dict(sorted(ops.items()))))

t.record("server stayed up", srv.proc.poll() is None,
         "the server died (status %s); log tail:\n%s" % (srv.proc.poll(), srv.log_tail(15)))


def no_unexpected_errors():
    errs = [e for c in clients for e in c.errors]
    if errs:
        raise E.Fail("%d unexpected errors, first ones:\n%s" % (ops["error"], "\n".join(errs[:15])))


t.check("every request answered as expected during the run", no_unexpected_errors)


def all_intact():
    s3 = srv.boto3(retries={"total_max_attempts": 1})
    n = bad = unknown = 0
    for c in clients:
        for j in range(KEYS):
            k = "c%d/k%03d" % (c.i, j)
            if k in c.unknown:
                unknown += 1
                continue
            n += 1
            want = c.want.get(k)
            try:
                got = s3.get_object(Bucket=B, Key=k)["Body"].read()
            except s3.exceptions.NoSuchKey:
                got = None
            stored = os.path.join(srv.store, B, k)
            on_disk = open(stored, "rb").read() if os.path.exists(stored) else None
            if (want is None) != (got is None) or (want is not None and sha(got) != sha(want)) \
                    or (want is None) != (on_disk is None) or (want is not None and sha(on_disk) != sha(want)):
                bad += 1
                if bad <= 5:
                    print("       | %s: want %s, gateway %s, backend %s" % (
                        k, want and sha(want)[:12], got and sha(got)[:12], on_disk and sha(on_disk)[:12]))
    s3.close()
    print("       | %d keys checked (%d with an object), %d lost or corrupt, %d unknown after an error"
          % (n, sum(len(c.want) for c in clients), bad, unknown))
    if bad:
        raise E.Fail("%d objects lost or corrupt" % bad)


t.check("every acknowledged object reads back correct (SHA-256), deleted ones are gone",
        all_intact)


def held_at_idle():
    """What the server's descriptors point at: deleted files, staged files, sockets."""
    d = "/proc/%d/fd" % srv.proc.pid
    held = collections.Counter()
    for fd in os.listdir(d):
        try:
            tgt = os.readlink(os.path.join(d, fd))
        except OSError:
            continue
        if tgt.endswith("(deleted)"):
            held["deleted"] += 1
        elif "/cache/tmp/" in tgt:
            held["staged"] += 1
        elif tgt.startswith("socket:"):
            held["socket"] += 1
    return held


def idle(held):
    return not held["deleted"] and not held["staged"] and held["socket"] <= 1


def flat():
    # the clients closed their connections when they ended: the server is idle once it has
    # closed its ends and let go of what they held, waited for (at most 30 s, past the 20 s
    # --idle-timeout) rather than guessed with a sleep
    held = E.wait_until(lambda: (lambda h: h if idle(h) else None)(held_at_idle()), timeout=30,
                        every=0.2) or held_at_idle()
    fds, rss = proc_sample()
    samples.append((time.time() - t0, fds, rss))
    warm = samples[min(len(samples) - 1, max(1, len(samples) // 4))]  # after the caches filled
    first, last = samples[0], samples[-1]
    peak_rss = max(s[2] for s in samples)
    print("       | descriptors (but those on cache data files): first %d, after warm-up %d, "
          "last %d (idle); RSS: first %.1f MiB, after warm-up %.1f MiB, peak %.1f MiB, last %.1f MiB"
          % (first[1], warm[1], last[1], first[2] / MIB, warm[2] / MIB, peak_rss / MIB, last[2] / MIB))
    cs = srv.stats()["cache"]
    print("       | cache: %s" % {k: cs[k] for k in ("hits", "misses", "coalesced", "bypassed",
                                                     "evictions", "revalidations", "used_bytes",
                                                     "objects")})
    if last[1] > warm[1] + 16:
        raise E.Fail("descriptors grew from %d to %d" % (warm[1], last[1]))
    files = cached_files(fd_targets())
    print("       | descriptors on cache data files at idle: %d (cache.objects %d)"
          % (files, cs["objects"]))
    if files > cs["objects"]:
        raise E.Fail("%d descriptors on cache data files for %d cached objects"
                     % (files, cs["objects"]))
    if last[2] > warm[2] * 1.5 + 64 * MIB:
        raise E.Fail("RSS grew from %.1f to %.1f MiB" % (warm[2] / MIB, last[2] / MIB))
    if not idle(held):
        raise E.Fail("descriptors held at idle: %s" % dict(held))


t.check("descriptors and RSS flat; nothing staged, deleted or connected left open", flat)


def sanitizers():
    log = open(srv.log, errors="replace").read()
    for marker in ("AddressSanitizer", "runtime error:", "LeakSanitizer", "assertion"):
        if marker in log:
            i = log.index(marker)
            raise E.Fail("%s in the server log:\n%s" % (marker, log[max(0, i - 200):i + 1500]))


srv.stop()  # exit status 0 checked (an ASan build exits 86 on a leak)
t.check("no sanitizer report or assertion in the server log", sanitizers)
srv.cleanup()
raise SystemExit(t.finish())
