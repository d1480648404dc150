#!/usr/bin/env python3
"""61-cache-slow-disk.py: a miss is never slower than no cache (issue 22).

The upstream is nginx serving a directory path-style behind build/throttle (a 100 MB/s link);
the gateway's cache disk is made ten times slower than that link by the fault shim's slow
rule (every write to CACHE/data/ capped at 10 MB/s, O_DIRECT or not). Shown:
  - four coalesced readers of a cold 96 MiB object get the right bytes at the link's pace
    (within 4x a direct GET across the same link plus 0.5 s; through the disk it would take
    10x: with --fill-window 0, the page-cache path, this check fails), one backend fetch for
    all;
  - the bytes the disk could not take are counted (/_/stats cache.uncached_bytes and _blocks,
    /_/metrics), what was written is marked present, and once the disk is fast again the
    next GET fetches only the blocks that were not cached (the backend's byte counter), and
    the one after it is a hit;
  - a batch of every member of a cold shard in random order gets the right bytes and the
    backend sends the shard once: the member index build's walk keeps what it passed for the
    batch (before, 1.28x: blocks it passed were dropped and fetched again);
  - memory stays bounded: 16 concurrent cold GETs of 1 GiB objects (one sparse file with
    marker pages under 16 names) on the slowed disk keep the gateway's peak RSS (VmHWM) under its RSS before them
    plus --fill-memory plus 64 MiB, and the markers read back right.
Under ASan (the shim cannot sit beside it), or with TMPDIR in memory (tmpfs: no fill window
there), the same cold GETs run without the slow rule: bytes, x-cache and counters are checked,
the timing and memory checks are skipped.
"""
import concurrent.futures as cf
import hashlib
import http.client
import io
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import urllib.request

import e2elib as E

MiB = 1 << 20
B = "slowdisk"
LINK_BPS = 100 * 1000 * 1000
DISK_BPS = LINK_BPS // 10
FILL_WINDOW = os.environ.get("E2E_FILL_WINDOW", "16M")  # 0: the old, coupled path
ASAN = os.environ.get("E2E_ASAN") == "1"
NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if os.access("/usr/sbin/nginx", os.X_OK) else None)

t = E.Suite("61-cache-slow-disk.py")
if not NGINX:
    t.skip("cold fills on a slow cache disk", "nginx not installed (apt-get install nginx)")
    sys.exit(t.finish())

tmp = tempfile.mkdtemp(prefix="s3c-e2e-slowdisk.", dir=os.environ.get("TMPDIR", "/tmp"))
procs = []


def stop(p):
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def cleanup():
    for p in procs:
        stop(p)
    if not os.environ.get("E2E_KEEP"):
        shutil.rmtree(tmp, ignore_errors=True)


import atexit  # noqa: E402
atexit.register(cleanup)


def build(name, src, extra):
    return E.build_helper(name, src, extra, tmp)


def start_nginx(root):
    port = E.free_port()
    pre = os.path.join(tmp, "ngx-%d" % port)
    os.makedirs(os.path.join(pre, "logs"))
    conf = os.path.join(pre, "nginx.conf")
    with open(conf, "w") as f:
        # as root, nginx's workers would read the (private) temp dir as nobody
        f.write(("user root;\n" if os.geteuid() == 0 else "") + """worker_processes 1;
pid %s/nginx.pid;
error_log %s/error.log warn;
events { worker_connections 1024; }
http {
    access_log off;
    sendfile on;
    keepalive_requests 100000;
    client_body_temp_path %s/body;
    proxy_temp_path %s/proxy;
    fastcgi_temp_path %s/fcgi;
    uwsgi_temp_path %s/uwsgi;
    scgi_temp_path %s/scgi;
    server { listen 127.0.0.1:%d; root %s; location / { } }
}
""" % (pre, pre, pre, pre, pre, pre, pre, port, root))
    p = subprocess.Popen([NGINX, "-p", pre, "-c", conf, "-g", "daemon off;"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    procs.append(p)
    ok = E.wait_until(lambda: _answers(port), timeout=10)
    if not ok:
        raise SystemExit("nginx did not start")
    return port


def _answers(port):
    try:
        urllib.request.urlopen("http://127.0.0.1:%d/" % port, timeout=1).read()
        return True
    except urllib.error.HTTPError:
        return True
    except Exception:  # noqa: BLE001 - not up yet
        return False


def start_throttle(bin_, target_port, bps):
    port = E.free_port()
    log = os.path.join(tmp, "throttle-%d.log" % port)
    p = subprocess.Popen([bin_, str(port), str(target_port), str(bps)],
                         stdout=open(log, "wb"), stderr=subprocess.STDOUT)
    procs.append(p)
    if not E.wait_until(lambda: b"ready" in open(log, "rb").read(), timeout=10):
        raise SystemExit("throttle did not start")
    return port


def get(port, path, hdrs=None):
    """GET http://127.0.0.1:port/path: (status, x-cache, sha256, bytes, seconds)."""
    t0 = time.time()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        conn.request("GET", path, headers=hdrs or {})
        r = conn.getresponse()
        h = hashlib.sha256()
        n = 0
        while True:
            blk = r.read(1 << 20)
            if not blk:
                break
            h.update(blk)
            n += len(blk)
        return r.status, r.getheader("x-cache"), h.hexdigest(), n, time.time() - t0
    finally:
        conn.close()


def metric(srv, name):
    rq = urllib.request.Request(srv.endpoint + "/_/metrics",
                                headers={"Authorization": "Bearer " + srv.token})
    for line in urllib.request.urlopen(rq, timeout=10).read().decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


throttle = build("throttle", os.path.join(E.REPO, "bench", "throttle.c"), ["-lpthread"])
store = os.path.join(tmp, "store")
os.makedirs(os.path.join(store, B))
up = start_nginx(store)
link = start_throttle(throttle, up, LINK_BPS)

# --- a cold object across the link, the disk ten times slower -----------------------------
SIZE = 96 * MiB  # 12 blocks of 8 MiB
body = os.urandom(SIZE)
with open(os.path.join(store, B, "cold.bin"), "wb") as f:
    f.write(body)
want = hashlib.sha256(body).hexdigest()
del body

# the shim cannot sit beside ASan; a cache directory in memory has no window (cache/fillwin.c)
# and would take the 16 GiB of rss_bounded from RAM
NO_SLOW_DISK = ("no slow disk under ASan (shim)" if ASAN else
                "the cache directory is in memory (%s): no fill window" % tmp if E.in_memory(tmp)
                else None)
shim = None if NO_SLOW_DISK else E.fault_shim(tmp)
# --fill-memory under the object's size: a run alone may hold the whole pool (window_pool_cap),
# and with 128M the 96 MiB object would wait in memory for the slow disk, none of it dropped
gw = E.Server(t, auth=["--anonymous"],
              extra=["--backend", "http://127.0.0.1:%d" % link, "--block-size", "8M",
                     "--cache-size", "64G", "--fill-window", FILL_WINDOW, "--fill-memory", "32M",
                     "--revalidate-after", "never"],
              env=shim.env if shim else None)
gw.start()
if shim:
    E.setup_or_die(t, gw, lambda: E.eq("slow rule loaded",
                                      shim.rules(gw, "slow:%d:%s/data/" % (DISK_BPS, gw.cache), 1), True))
state = {}


def direct_then_cold():
    st, _, sh, n, t_direct = get(link, "/%s/cold.bin" % B)
    E.eq("direct GET across the link", (st, sh), (200, want))
    s0 = gw.stats()
    n_readers = 4
    bar = threading.Barrier(n_readers)

    def reader(i):
        bar.wait(30)
        return get(gw.port, "/%s/cold.bin" % B)

    with cf.ThreadPoolExecutor(n_readers) as ex:
        rs = list(ex.map(reader, range(n_readers)))
    for st, how, sh, n, secs in rs:
        E.eq("a coalesced reader's status and bytes", (st, sh), (200, want))
    E.eq("x-cache of the readers", sorted(r[1] for r in rs), ["coalesced"] * 3 + ["miss"])
    t_gw = max(r[4] for r in rs)
    state.update(t_direct=t_direct, t_gw=t_gw, s0=s0)
    print("       # direct GET across the link %.2f s; 4 readers through the gateway %.2f s "
          "(ratio %.2f); through a %d MB/s disk it would take %.1f s"
          % (t_direct, t_gw, t_gw / t_direct, DISK_BPS // 1000000, SIZE / DISK_BPS))


t.check("four coalesced readers of a cold object get the right bytes", direct_then_cold)


def paced():
    if "t_gw" not in state:
        raise E.Fail("no timings (the reads failed)")
    if state["t_gw"] > 4 * state["t_direct"] + 0.5:
        raise E.Fail("the readers took %.2f s, a direct GET across the same link %.2f s: "
                     "the slow disk set the pace" % (state["t_gw"], state["t_direct"]))


if shim:
    t.check("delivered at the link's pace, not the slow disk's (within 4x a direct GET)", paced)
else:
    t.skip("delivered at the link's pace, not the slow disk's", NO_SLOW_DISK)


def settled():
    """The gateway's runs ended: every block written or given up."""
    def done():
        c = gw.stats()["cache"]
        s0 = state["s0"]["cache"]
        return (c["fill_bytes"] - s0["fill_bytes"]) + (c["uncached_bytes"] - s0["uncached_bytes"]) >= SIZE
    if not E.wait_until(done, timeout=120):
        raise E.Fail("the fill did not settle within 120 s: %r" % gw.stats()["cache"])
    # ... and nothing moves any more (a reader that joined behind the window's tail may still be
    # fetching and writing blocks the run dropped): the counters below, the metrics read after
    # them and the next test's "missing" are then one state. The slow disk writes a chunk every
    # ~0.1 s, so a fill in progress moves fill_bytes within 0.5 s.
    seen = [None]

    def still():
        s = gw.stats()
        c = s["cache"]
        now = (c["fill_bytes"], c["uncached_bytes"], c["used_bytes"], s["backend"]["bytes_read"])
        same = now == seen[0]
        seen[0] = now
        return same
    if not E.wait_until(still, timeout=60, every=0.5):
        raise E.Fail("the cache counters kept moving for 60 s: %r" % gw.stats()["cache"])


def counted():
    settled()
    s = gw.stats()
    c, b = s["cache"], s["backend"]
    state["s1"] = s
    print("       # backend bytes %d; written %d, not cached %d bytes (%d blocks), window memory %d"
          % (b["bytes_read"] - state["s0"]["backend"]["bytes_read"], c["fill_bytes"],
             c["uncached_bytes"], c["uncached_blocks"], c["fill_window_bytes"]))
    # One fetch for the four readers; a reader that fell behind the window's tail fetches
    # again only blocks that were dropped (their bytes are nowhere else): never more.
    fetched = b["bytes_read"] - state["s0"]["backend"]["bytes_read"]
    if not SIZE <= fetched <= SIZE + c["uncached_bytes"]:
        raise E.Fail("backend bytes %d for a %d-byte object with %d bytes not cached"
                     % (fetched, SIZE, c["uncached_bytes"]))
    if shim and (c["uncached_bytes"] <= 0 or c["uncached_blocks"] <= 0):
        raise E.Fail("the disk was 10x slower than the link, yet nothing was left uncached: %r" % c)
    if c["uncached_bytes"] != c["uncached_blocks"] * 8 * MiB:
        raise E.Fail("uncached bytes are not whole blocks: %r" % c)
    if c["used_bytes"] % (8 * MiB) or c["used_bytes"] > SIZE:
        raise E.Fail("present bytes %d: not whole blocks of the object" % c["used_bytes"])
    E.eq("metric s3cached_cache_uncached_bytes_total",
         metric(gw, "s3cached_cache_uncached_bytes_total"), float(c["uncached_bytes"]))
    E.eq("metric s3cached_cache_uncached_blocks_total",
         metric(gw, "s3cached_cache_uncached_blocks_total"), float(c["uncached_blocks"]))
    E.eq("blocks let go before their readers copied them", c["fill_window_forced_drops"], 0)
    if c["fill_window_bytes"] > 128 * MiB:
        raise E.Fail("window memory %d over --fill-memory" % c["fill_window_bytes"])


t.check("what the disk did not take is counted (stats, metrics); the rest is present", counted)


def refetch_missing():
    if "s1" not in state:
        raise E.Fail("no counters from the cold read")
    if shim:
        E.eq("slow rule lifted", shim.rules(gw, "# fast again", 0), True)
    s1 = state["s1"]
    missing = SIZE - s1["cache"]["used_bytes"]  # the blocks dropped and not fetched since
    st, how, sh, n, _ = get(gw.port, "/%s/cold.bin" % B)
    E.eq("second GET", (st, sh), (200, want))
    s2 = gw.stats()
    print("       # second GET: x-cache %s, backend bytes %d (%d were not cached)"
          % (how, s2["backend"]["bytes_read"] - s1["backend"]["bytes_read"], missing))
    E.eq("x-cache of the second GET", how,
         "miss" if missing == SIZE else "partial" if missing else "hit")
    E.eq("backend bytes of the second GET: the blocks not cached, no more",
         s2["backend"]["bytes_read"] - s1["backend"]["bytes_read"], missing)
    # The disk is fast again, but the cache writer yields the CPU to the readers: on a loaded
    # machine, ranged GETs ahead of the reader (--fetch-parallel) may outrun it and leave a
    # block or two uncached again, counted. Each further GET fetches exactly what is missing,
    # and the blocks are all cached within a few.
    for rnd in range(4):
        if E.wait_until(lambda: gw.stats()["cache"]["used_bytes"] == SIZE, timeout=30):
            break
        if rnd == 3:
            raise E.Fail("the refetched blocks were not all cached: %r" % gw.stats()["cache"])
        s2 = gw.stats()
        missing = SIZE - s2["cache"]["used_bytes"]
        print("       # %d bytes left uncached (%d blocks in all): one more GET"
              % (missing, s2["cache"]["uncached_blocks"]))
        st, how, sh, n, _ = get(gw.port, "/%s/cold.bin" % B)
        E.eq("GET after blocks were left uncached", (st, sh, how), (200, want, "partial"))
        E.eq("backend bytes of that GET: the blocks not cached, no more",
             gw.stats()["backend"]["bytes_read"] - s2["backend"]["bytes_read"], missing)
        s2 = gw.stats()
    st, how, sh, n, _ = get(gw.port, "/%s/cold.bin" % B)
    E.eq("third GET", (st, sh, how), (200, want, "hit"))
    E.eq("backend bytes of the third GET", gw.stats()["backend"]["bytes_read"],
         s2["backend"]["bytes_read"])


t.check("the next GET fetches only the blocks not cached; the one after is a hit",
        refetch_missing)


def boto3_cold_download():
    """A real S3 client on the miss path: boto3's download_file (parallel ranged GETs of 8 MiB,
    unsigned as the gateway is anonymous) of a cold object on the slow disk gets the right
    bytes, the backend sends each byte once (more only for blocks let go uncached), and with
    the slow disk it takes about as long as a direct GET across the link, not the disk's 10x."""
    import botocore
    from boto3.s3.transfer import TransferConfig
    size = 48 * MiB + 12345
    blob = os.urandom(size)
    with open(os.path.join(store, B, "cold2.bin"), "wb") as f:
        f.write(blob)
    want2 = hashlib.sha256(blob).hexdigest()
    del blob
    st, _, sh, _, t_direct = get(link, "/%s/cold2.bin" % B)
    E.eq("direct GET across the link", (st, sh), (200, want2))
    if shim:  # the check before lifted it
        E.eq("slow rule loaded again",
             shim.rules(gw, "slow:%d:%s/data/" % (DISK_BPS, gw.cache), 1), True)
    s0 = gw.stats()
    dst = os.path.join(tmp, "cold2.back")
    t0 = time.time()
    gw.boto3(signature_version=botocore.UNSIGNED).download_file(
        B, "cold2.bin", dst, Config=TransferConfig(multipart_threshold=8 * MiB,
                                                   multipart_chunksize=8 * MiB, max_concurrency=4))
    t_boto = time.time() - t0
    E.eq("boto3 download_file of the cold object", E.sha_file(dst), want2)
    os.unlink(dst)

    def written_or_dropped():
        c, c0 = gw.stats()["cache"], s0["cache"]
        return (c["fill_bytes"] - c0["fill_bytes"]) + (c["uncached_bytes"] - c0["uncached_bytes"]) >= size
    if not E.wait_until(written_or_dropped, timeout=120):
        raise E.Fail("the fills did not settle within 120 s: %r" % gw.stats()["cache"])
    s1 = gw.stats()
    fetched = s1["backend"]["bytes_read"] - s0["backend"]["bytes_read"]
    dropped = s1["cache"]["uncached_bytes"] - s0["cache"]["uncached_bytes"]
    print("       # boto3: %.2f s (direct GET %.2f s); backend bytes %d for %d; not cached %d"
          % (t_boto, t_direct, fetched, size, dropped))
    if not size <= fetched <= size + dropped:
        raise E.Fail("backend bytes %d for a %d-byte object with %d bytes not cached"
                     % (fetched, size, dropped))
    if shim and t_boto > 4 * t_direct + 1:
        raise E.Fail("boto3 took %.2f s, a direct GET %.2f s: the slow disk set the pace"
                     % (t_boto, t_direct))
    if shim:
        E.eq("slow rule lifted", shim.rules(gw, "# fast again", 0), True)


t.check("boto3 download_file of a cold object: right bytes, each byte fetched once"
        + (", at the link's pace" if shim else ""), boto3_cold_download)
gw.stop()
gw.cleanup()


def in_memory_no_window():
    """A cache directory in memory (tmpfs) has no disk to wait for: its cold fills go through
    the page cache, not a window (without it every byte is cached, at the same speed and two
    copies fewer: bench/RESULTS.md). A cold GET caches every byte and the next one is a hit."""
    g = E.Server(t, auth=["--anonymous"],
                 extra=["--backend", "http://127.0.0.1:%d" % link, "--block-size", "8M",
                        "--fill-window", FILL_WINDOW, "--revalidate-after", "never"])
    g.cache = tempfile.mkdtemp(prefix="s3c-e2e-memcache.", dir="/dev/shm")
    try:
        g.start()
        st, how, sh, n, _ = get(g.port, "/%s/cold.bin" % B)
        E.eq("cold GET, cache in memory", (st, sh, how), (200, want, "miss"))
        c = E.wait_until(lambda: (lambda c: c if c["used_bytes"] >= SIZE else None)(
            g.settled_stats()["cache"]), timeout=10) or g.stats()["cache"]
        E.eq("(window memory, its limit, bytes not cached, cached bytes >= size)",
             (c["fill_window_bytes"], c["fill_window_limit_bytes"], c["uncached_bytes"],
              c["used_bytes"] >= SIZE), (0, 0, 0, True))
        b1 = g.stats()["backend"]["bytes_read"]
        st, how, sh, n, _ = get(g.port, "/%s/cold.bin" % B)
        E.eq("second GET", (st, sh, how), (200, want, "hit"))
        E.eq("backend bytes of the second GET", g.stats()["backend"]["bytes_read"], b1)
    finally:
        g.stop()
        g.cleanup()
        shutil.rmtree(g.cache, ignore_errors=True)


def shm_room():
    st = os.statvfs("/dev/shm")
    return st.f_bavail * st.f_frsize


if not E.in_memory("/dev/shm"):
    t.skip("a cache directory in memory fills without a window", "/dev/shm is not tmpfs here")
elif shm_room() < SIZE + 64 * MiB:   # a container's /dev/shm is often 64 MiB
    t.skip("a cache directory in memory fills without a window",
           "/dev/shm has %d MiB free, the object is %d MiB" % (shm_room() >> 20, SIZE >> 20))
else:
    t.check("a cache directory in memory fills without a window, caches everything",
            in_memory_no_window)

# --- a cold batch of a shard's members in random order, the disk ten times slower -----------
NMEM, MSIZE = 256, 112 << 10  # a 29 MiB shard: 4 blocks of 8 MiB


def cold_batch():
    """The member index build walks the cold shard's headers at the link's pace; the batch then
    reads every member, in random order. What the walk passed is not read yet: the window keeps
    it until the disk took it (before, it dropped blocks the walk had passed as 'read', and the
    batch's members in them were fetched again: 1.12-1.36x the shard on a loaded machine)."""
    mem = {}
    with tarfile.open(os.path.join(store, B, "shard.tar"), "w", format=tarfile.PAX_FORMAT) as tf:
        for i in range(NMEM):
            name = "m-%04d.jpg" % i
            mem[name] = os.urandom(MSIZE)
            ti = tarfile.TarInfo(name)
            ti.size = MSIZE
            tf.addfile(ti, io.BytesIO(mem[name]))
    size = os.path.getsize(os.path.join(store, B, "shard.tar"))
    shim3 = E.fault_shim(tmp) if shim else None
    g = E.Server(t, auth=["--anonymous"],
                 extra=["--backend", "http://127.0.0.1:%d" % link, "--block-size", "8M",
                        "--cache-size", "64G", "--fill-window", FILL_WINDOW, "--fill-memory", "128M",
                        "--revalidate-after", "never"], env=shim3.env if shim3 else None)
    g.start()
    try:
        if shim3:
            E.eq("slow rule loaded", shim3.rules(g, "slow:%d:%s/data/" % (DISK_BPS, g.cache), 1), True)
        names = sorted(mem)
        random.Random(3).shuffle(names)
        body = json.dumps({"items": [{"key": "shard.tar", "member": n} for n in names]}).encode()
        conn = http.client.HTTPConnection("127.0.0.1", g.port, timeout=120)
        try:
            conn.request("POST", "/%s?batch" % B, body=body,
                         headers={"Content-Type": "application/json"})
            r = conn.getresponse()
            data = r.read()
        finally:
            conn.close()
        E.eq("batch status", r.status, 200)
        got = []
        with tarfile.open(fileobj=io.BytesIO(data), mode="r|") as tf:
            for ti in tf:
                if ti.name != "__batch_status__.json":
                    got.append((ti.name, tf.extractfile(ti).read()))
        E.eq("entries", [n for n, _ in got], ["%s/shard.tar/%s" % (B, n) for n in names])
        for (name, d), n in zip(got, names):
            if d != mem[n]:
                raise E.Fail("%s: wrong bytes" % name)
        s = g.stats()
        c = s["cache"]
        print("       # backend bytes %d for a %d-byte shard (%.2fx); not cached %d bytes"
              % (s["backend"]["bytes_read"], size, s["backend"]["bytes_read"] / size,
                 c["uncached_bytes"]))
        E.eq("backend bytes for one cold batch: the shard once", s["backend"]["bytes_read"], size)
        E.eq("bytes not cached", c["uncached_bytes"], 0)
    finally:
        g.stop()
        g.cleanup()


t.check("a cold batch of every member in random order on a slow disk: the backend sends the "
        "shard once", cold_batch)

def slow_flushes():
    """A disk whose flushes are slow (every fdatasync of a data file waits 3 s first), not
    its writes: a cold GET of 12 blocks, each fetched by a run of its own that ends with an
    fdatasync, is cached (at most one block dropped: beside the other test files, the writer's
    threads at nice 10 can lose the two cores for a while). The runs
    end on threads of their own; before, the writer's threads ended them, the writes of every
    other run waited behind those fdatasyncs, the 32 MiB of window filled and blocks were
    dropped (3-4 of 12 on 71d5949, idle or beside two busy loops)."""
    shim4 = E.fault_shim(tmp)
    g = E.Server(t, auth=["--anonymous"],
                 extra=["--backend", "http://127.0.0.1:%d" % link, "--block-size", "8M",
                        "--cache-size", "64G", "--fill-window", FILL_WINDOW, "--fill-memory", "32M",
                        "--revalidate-after", "never"], env=shim4.env)
    g.start()
    try:
        E.eq("lag rule loaded", shim4.rules(g, "lag:3000:%s/data/" % g.cache, 1), True)
        st, xc, digest, _, _ = get(g.port, "/%s/cold.bin" % B)
        E.eq("cold GET", (st, xc, digest), (200, "miss", want))
        # every run ended (its reservation returned): its blocks marked present or counted as
        # not cached; 12 fdatasyncs of 3 s on 8 threads
        if not E.wait_until(lambda: g.stats()["cache"]["reserved_bytes"] == 0, timeout=60,
                            every=0.2):
            raise E.Fail("the runs did not end within 60 s")
        c = g.stats()["cache"]
        print("       # fdatasync 3 s late: not cached %d bytes (%d blocks)"
              % (c["uncached_bytes"], c["uncached_blocks"]))
        if c["uncached_blocks"] > 1:
            raise E.Fail("%d of 12 blocks not cached: the runs' fdatasyncs held the writer"
                         % c["uncached_blocks"])
        st, xc, digest, _, _ = get(g.port, "/%s/cold.bin" % B)
        E.eq("then a hit (partial with a block dropped)", (st, xc, digest),
             (200, "hit" if not c["uncached_blocks"] else "partial", want))
    finally:
        g.stop()
        g.cleanup()


if NO_SLOW_DISK:
    t.skip("slow flushes: a cold GET is cached (its runs end off the writer)", NO_SLOW_DISK)
else:
    t.check("slow flushes: a cold GET is cached (its runs end off the writer)", slow_flushes)

# --- memory: 16 concurrent cold 1 GiB GETs on the slowed disk -----------------------------
NOBJ, OSIZE, FILL_MEMORY = 16, 1 << 30, 128 * MiB
markers = {}


def make_sparse():
    """One sparse 1 GiB file with marker pages, under 16 names (hard links: nginx reads one
    file's pages, the gateway sees 16 keys, 16 fills)."""
    first = os.path.join(store, B, "big-00")
    with open(first, "wb") as f:
        f.truncate(OSIZE)
        for k in range(16):
            off = k * 64 * MiB + 12345 + k
            m = os.urandom(4096)
            f.seek(off)
            f.write(m)
            for i in range(NOBJ):
                markers[(i, off)] = m
    for i in range(1, NOBJ):
        os.link(first, os.path.join(store, B, "big-%02d" % i))


def rss_bounded():
    make_sparse()
    shim2 = E.fault_shim(tmp)
    g = E.Server(t, auth=["--anonymous"],
                 extra=["--backend", "http://127.0.0.1:%d" % up, "--block-size", "8M",
                        "--cache-size", "64G", "--fill-memory", str(FILL_MEMORY),
                        "--revalidate-after", "never"], env=shim2.env)
    g.start()
    try:
        E.eq("slow rule loaded", shim2.rules(g, "slow:50000000:%s/data/" % g.cache, 1), True)
        status = open("/proc/%d/status" % g.proc.pid).read()
        base = int([ln for ln in status.splitlines() if ln.startswith("VmRSS:")][0].split()[1]) * 1024
        urls = ["http://127.0.0.1:%d/%s/big-%02d" % (g.port, B, i) for i in range(NOBJ)]
        cps = [subprocess.Popen(["curl", "-s", "--max-time", "300", "-o", "/dev/null", "-w",
                                 "%{http_code} %{size_download}", u], stdout=subprocess.PIPE)
               for u in urls]
        t0, last = time.time(), 0
        while any(p.poll() is None for p in cps) and time.time() - t0 < 200:
            time.sleep(0.5)  # only paces the progress lines below; the wait is bounded
            if os.environ.get("E2E_VERBOSE") and time.time() - last > 10:
                last = time.time()
                gs = g.stats()
                print("       # %3.0f s: backend %.1f GiB, written %.1f GiB, not cached %.1f GiB"
                      % (last - t0, gs["backend"]["bytes_read"] / (1 << 30),
                         gs["cache"]["fill_bytes"] / (1 << 30),
                         gs["cache"]["uncached_bytes"] / (1 << 30)), flush=True)
        for p in cps:
            if p.poll() is None:
                p.kill()
        outs = [p.communicate(timeout=30)[0].decode() for p in cps]
        secs = time.time() - t0
        status = open("/proc/%d/status" % g.proc.pid).read()
        hwm = int([ln for ln in status.splitlines() if ln.startswith("VmHWM:")][0].split()[1]) * 1024
        c = g.stats()["cache"]
        print("       # RSS before %d MiB, peak %d MiB (bound %d MiB); not cached %.1f GiB; "
              "window memory %d MiB" % (base >> 20, hwm >> 20, (base + FILL_MEMORY + 64 * MiB) >> 20,
                                        c["uncached_bytes"] / (1 << 30), c["fill_window_bytes"] >> 20))
        E.eq("16 GETs of 1 GiB", outs, ["200 %d" % OSIZE] * NOBJ)
        state["big_backend"] = g.stats()["backend"]["bytes_read"]
        state["big_forced"] = c.get("fill_window_forced_drops", 0)
        print("       # backend sent %.2f GiB for %d GiB served (%.3fx); the 16 GETs took %.1f s "
              "(%.0f MB/s in all)" % (state["big_backend"] / (1 << 30), NOBJ * OSIZE >> 30,
                                      state["big_backend"] / (NOBJ * OSIZE), secs,
                                      NOBJ * OSIZE / secs / 1e6))
        if hwm > base + FILL_MEMORY + 64 * MiB:
            raise E.Fail("peak RSS %d MiB over the bound %d MiB" % (hwm >> 20, (base + FILL_MEMORY + 64 * MiB) >> 20))
        if c["uncached_bytes"] <= 0:
            raise E.Fail("the 50 MB/s disk took all of 16 GiB: not the case this test is about")
        for (i, off), m in sorted(markers.items()):
            st, _, sh, n, _ = get(g.port, "/%s/big-%02d" % (B, i),
                                  {"Range": "bytes=%d-%d" % (off - 7, off + len(m) + 6)})
            if (st, sh) != (206, hashlib.sha256(b"\0" * 7 + m + b"\0" * 7).hexdigest()):
                raise E.Fail("big-%02d at %d: status %s, wrong bytes" % (i, off, st))
    finally:
        g.stop()
        g.cleanup()




def fetched_once():
    """Each byte of the 16 GETs came from the backend once: a fill's window drops the bytes
    the disk cannot take, not the bytes its reader still has to read."""
    if "big_backend" not in state:
        raise E.Fail("the 16 GETs did not complete")
    if state["big_forced"]:
        raise E.Fail("%d blocks were let go before their readers copied them"
                     % state["big_forced"])
    if state["big_backend"] > NOBJ * OSIZE * 1.1:
        raise E.Fail("the backend sent %.1f GiB for 16 GiB of GETs: bytes dropped from a window "
                     "before their reader read them were fetched again"
                     % (state["big_backend"] / (1 << 30)))


if NO_SLOW_DISK:
    t.skip("16 cold 1 GiB GETs on a slow disk: peak RSS under RSS + --fill-memory + 64 MiB",
           NO_SLOW_DISK)
    t.skip("16 cold 1 GiB GETs: the backend sends each byte once (at most 1.1x)", NO_SLOW_DISK)
else:
    t.check("16 cold 1 GiB GETs on a slow disk: peak RSS under RSS + --fill-memory + 64 MiB",
            rss_bounded)
    t.check("16 cold 1 GiB GETs: the backend sends each byte once (at most 1.1x)", fetched_once)
sys.exit(t.finish())
