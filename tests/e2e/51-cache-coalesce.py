"""51-cache-coalesce: the backend is asked for each byte once. 32 concurrent cold GETs of one
64 MiB object: backend.bytes_read == the object size, 32 correct bodies (SHA-256), x-cache one
miss and 31 coalesced (and the stats agree). A cold 1 MiB range of a 256 MiB (sparse) object
reads only its block(s) plus read-ahead: with --block-size 8M --readahead 16M <= 24 MiB
(<= 32 MiB when it straddles a block boundary), with --readahead 0 <= 8 MiB (16 MiB). boto3
download_file (parallel ranged GETs) of a cold 100 MiB object, and `aws s3 cp` down of another: backend.bytes_read == the object size, file
intact. Readers that drop their connection mid-fill do not disturb the others. Streaming: over a
throttled upstream (a fake S3 in this process trickling ~40 MiB/s), coalesced readers get their
first bytes long before the fill ends (time-to-first-byte / total time is measured), and the
upstream is asked once."""
import concurrent.futures as cf
import hashlib
import http.client
import email.utils
import http.server
import os
import socket
import socketserver
import subprocess
import sys
import threading
import time

import e2elib as E

MiB = 1 << 20
B = "coal"
t = E.Suite("51-cache-coalesce.py")


def write_obj(srv, key, size, sparse=False):
    """Writes store/B/key; returns its SHA-256. Random 1 MiB pattern repeated with a counter."""
    path = os.path.join(srv.store, B, key)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    h = hashlib.sha256()
    with open(path, "wb") as f:
        if sparse:
            f.truncate(size)
            return None
        base = os.urandom(MiB)
        left, i = size, 0
        while left:
            piece = (i.to_bytes(8, "big") + base[8:])[:min(left, MiB)]
            f.write(piece)
            h.update(piece)
            left -= len(piece)
            i += 1
    return h.hexdigest()


def sget(srv, key, rng=None, barrier=None, timeout=120):
    """A signed GET that streams the body into SHA-256: (status, headers, sha, length)."""
    path = "/%s/%s" % (B, key)
    hdrs = {"host": "127.0.0.1:%d" % srv.port}
    if rng:
        hdrs["range"] = "bytes=%d-%d" % rng
    E.sign_headers("GET", path, "", hdrs, E.EMPTY_SHA, srv.ak, srv.sk)
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=timeout)
    try:
        conn.connect()
        if barrier is not None:
            barrier.wait(30)
        conn.request("GET", path, headers=hdrs)
        r = conn.getresponse()
        h = hashlib.sha256()
        n = 0
        while True:
            blk = r.read(1 << 20)
            if not blk:
                break
            h.update(blk)
            n += len(blk)
        return r.status, {k.lower(): v for k, v in r.getheaders()}, h.hexdigest(), n
    finally:
        conn.close()


def be(srv):
    return srv.stats()["backend"]


def settle(srv, quiet=0.3, limit=10, until=None):
    """backend counters once no fetch is landing bytes (a response can end before the rest of its
    block has landed): stable over @quiet seconds. @until(backend): first wait (at most 30 s)
    until it holds, i.e. until what the test knows must arrive has arrived, so that @quiet only
    has to catch bytes beyond it."""
    import time
    if until is not None:
        E.wait_until(lambda: until(be(srv)))
    end = time.time() + limit
    last = be(srv)
    while time.time() < end:
        time.sleep(quiet)
        cur = be(srv)
        if cur == last:
            return cur
        last = cur
    return last


# --- one server with the defaults (8M blocks, 16M read-ahead) ------------------------------
srv = E.Server(t, extra=["--cache-size", "1G", "--block-size", "8M", "--readahead", "16M"]).start()
SUM = {}


def setup():
    os.makedirs(os.path.join(srv.store, B))
    SUM["c64"] = write_obj(srv, "c64", 64 * MiB)
    SUM["d100"] = write_obj(srv, "d100", 100 * MiB + 12345)
    SUM["a100"] = write_obj(srv, "a100", 100 * MiB + 777)
    SUM["drop"] = write_obj(srv, "drop", 48 * MiB + 5)
    write_obj(srv, "sparse", 256 * MiB, sparse=True)


E.setup_or_die(t, srv, setup)


def coalesce32():
    s0 = srv.stats()
    bar = threading.Barrier(32)
    with cf.ThreadPoolExecutor(32) as ex:
        rs = list(ex.map(lambda _: sget(srv, "c64", barrier=bar), range(32)))
    # the server counts a GET when it has finished with it, which can be just after its client
    # read the last byte: wait for the 32 to be counted before comparing
    E.wait_until(lambda: sum(srv.stats()["cache"][k] - s0["cache"][k]
                             for k in ("hits", "misses", "coalesced")) >= 32)
    s1 = srv.stats()
    bad = [(st, n) for st, _, sh, n in rs if st != 200 or sh != SUM["c64"] or n != 64 * MiB]
    if bad:
        raise E.Fail("%d of 32 bodies wrong (status, length): %r" % (len(bad), bad[:5]))
    hows = [h.get("x-cache") for _, h, _, _ in rs]
    cnt = {k: hows.count(k) for k in set(hows)}
    E.eq("backend.bytes_read for 32 cold GETs of 64 MiB",
         s1["backend"]["bytes_read"] - s0["backend"]["bytes_read"], 64 * MiB)
    # one metadata lookup + one fetch run (8 blocks of 8 MiB, runs of up to 16 blocks)
    E.eq("backend.requests for 32 cold GETs of 64 MiB",
         s1["backend"]["requests"] - s0["backend"]["requests"], 2)
    E.eq("x-cache counts", cnt, {"miss": 1, "coalesced": 31})
    E.eq("cache.misses delta", s1["cache"]["misses"] - s0["cache"]["misses"], 1)
    E.eq("cache.coalesced delta", s1["cache"]["coalesced"] - s0["cache"]["coalesced"], 31)
    E.eq("cache.hits delta", s1["cache"]["hits"] - s0["cache"]["hits"], 0)
    st, h, sh, n = sget(srv, "c64")
    E.eq("then a hit", h.get("x-cache"), "hit")
    E.eq("hit body", sh, SUM["c64"])
    E.eq("backend.bytes_read after the hit", be(srv)["bytes_read"], s1["backend"]["bytes_read"])


def cold_range(cases):
    """@cases: (offset, limit): a cold 1 MiB range at offset may pull at most limit bytes."""
    zero = hashlib.sha256(bytes(MiB)).hexdigest()
    seen = []
    for a, limit in cases:
        b0 = settle(srv, quiet=1.0)
        st, h, sh, n = sget(srv, "sparse", rng=(a, a + MiB - 1))
        E.eq("status of bytes=%d-" % a, st, 206)
        E.eq("length", n, MiB)
        E.eq("body (zeros)", sh, zero)
        got = settle(srv, quiet=1.0)["bytes_read"] - b0["bytes_read"]
        seen.append("%.1f MiB" % (got / MiB))
        if got > limit:
            raise E.Fail("a cold 1 MiB range at %d pulled %d bytes (%.1f MiB) from the backend; limit %d MiB"
                         % (a, got, got / MiB, limit // MiB))
        if got < MiB:
            raise E.Fail("a cold 1 MiB range at %d read only %d backend bytes" % (a, got))
    print("       # backend bytes per cold 1 MiB range: %s" % ", ".join(seen))


def cold_range_default():
    # inside one block (one block + read-ahead), and straddling a block boundary (two blocks +
    # read-ahead); far apart so read-ahead windows do not overlap
    cold_range([(100 * MiB + 4096, 8 * MiB + 16 * MiB), (200 * MiB - MiB // 2, 2 * 8 * MiB + 16 * MiB)])


def boto3_download():
    import boto3.s3.transfer
    s3 = srv.boto3()
    dst = os.path.join(srv.tmp, "dl.bin")
    b0 = be(srv)
    cfg = boto3.s3.transfer.TransferConfig(multipart_threshold=8 * MiB, multipart_chunksize=8 * MiB,
                                           max_concurrency=10)
    s3.download_file(B, "d100", dst, Config=cfg)
    b1 = be(srv)
    E.eq("downloaded file", E.sha_file(dst), SUM["d100"])
    os.unlink(dst)
    E.eq("backend.bytes_read for download_file of a cold 100 MiB object",
         b1["bytes_read"] - b0["bytes_read"], 100 * MiB + 12345)
    s3.download_file(B, "d100", dst, Config=cfg)
    E.eq("second download", E.sha_file(dst), SUM["d100"])
    os.unlink(dst)
    E.eq("backend.bytes_read for a second (warm) download", be(srv)["bytes_read"], b1["bytes_read"])


def awscli_download():
    dst = os.path.join(srv.tmp, "aws.bin")
    env = dict(os.environ, AWS_ACCESS_KEY_ID=srv.ak, AWS_SECRET_ACCESS_KEY=srv.sk,
               AWS_DEFAULT_REGION=E.REGION, AWS_CONFIG_FILE="/dev/null",
               AWS_SHARED_CREDENTIALS_FILE="/dev/null")
    aws = ["timeout", "120", "/usr/bin/aws", "--endpoint-url", srv.endpoint]
    b0 = be(srv)
    subprocess.run(aws + ["s3", "cp", "s3://%s/a100" % B, dst], env=env, check=True,
                   stdout=subprocess.DEVNULL)
    b1 = settle(srv, until=lambda b: b["bytes_read"] - b0["bytes_read"] >= 100 * MiB + 777)
    E.eq("aws s3 cp download", E.sha_file(dst), SUM["a100"])
    os.unlink(dst)
    E.eq("backend.bytes_read for aws s3 cp of a cold 100 MiB object",
         b1["bytes_read"] - b0["bytes_read"], 100 * MiB + 777)


def readers_drop_midway():
    """8 cold readers; 4 hang up after 1 MiB. The rest get the whole object, fetched once."""
    path = "/%s/drop" % B
    size = 48 * MiB + 5
    b0 = be(srv)
    bar = threading.Barrier(8)

    def quitter():
        hdrs = {"host": "127.0.0.1:%d" % srv.port}
        E.sign_headers("GET", path, "", hdrs, E.EMPTY_SHA, srv.ak, srv.sk)
        s = socket.create_connection(("127.0.0.1", srv.port), timeout=30)
        try:
            bar.wait(30)
            s.sendall(("GET %s HTTP/1.1\r\n" % path + "".join("%s: %s\r\n" % kv for kv in hdrs.items())
                       + "\r\n").encode())
            got = 0
            while got < MiB:
                d = s.recv(65536)
                if not d:
                    break
                got += len(d)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        finally:
            s.close()
        return None

    with cf.ThreadPoolExecutor(8) as ex:
        fs = [ex.submit(quitter) if i % 2 else ex.submit(sget, srv, "drop", None, bar)
              for i in range(8)]
        rs = [f.result() for f in fs]
    for r in rs:
        if r is not None:
            st, h, sh, n = r
            E.eq("a staying reader's body", (st, n, sh), (200, size, SUM["drop"]))
    b1 = settle(srv, until=lambda b: b["bytes_read"] - b0["bytes_read"] >= size)
    E.eq("backend.bytes_read", b1["bytes_read"] - b0["bytes_read"], size)
    st, h, sh, n = sget(srv, "drop")
    E.eq("then a hit", (h.get("x-cache"), sh), ("hit", SUM["drop"]))
    E.eq("/_/health after the hang-ups", urllib_health(srv), "ok")


def urllib_health(srv):
    import urllib.request
    with urllib.request.urlopen(srv.endpoint + "/_/health", timeout=5) as r:
        return r.read().decode().strip()[:2]


t.check("32 concurrent cold GETs of 64 MiB: each byte fetched once, 1 miss + 31 coalesced", coalesce32)
t.check("a cold 1 MiB range (--block-size 8M --readahead 16M) reads <= 24 MiB, 32 across a boundary", cold_range_default)
t.check("boto3 download_file of a cold 100 MiB object reads each byte once", boto3_download)
t.check("aws s3 cp of a cold 100 MiB object reads each byte once", awscli_download)
t.check("readers hanging up mid-fill: the others whole, each byte fetched once", readers_drop_midway)
srv.stop()
srv.cleanup()

# --- read-ahead off ---------------------------------------------------------------------------
srv = E.Server(t, extra=["--cache-size", "1G", "--block-size", "8M", "--readahead", "0"]).start()
E.setup_or_die(t, srv, lambda: write_obj(srv, "sparse", 256 * MiB, sparse=True))
t.check("a cold 1 MiB range with --readahead 0 reads its block(s) only: <= 8 MiB, 16 across a boundary",
        cold_range, [(100 * MiB + 4096, 8 * MiB), (200 * MiB - MiB // 2, 16 * MiB), (37 * MiB, 8 * MiB)])
srv.stop()
srv.cleanup()


# --- streaming over a throttled upstream -------------------------------------------------------
class Slow:
    def __init__(self, rate):
        self.rate = rate            # bytes per second
        self.objects = {}
        self.log = []               # (method, path, bytes sent)
        self.mu = threading.Lock()


def slow_handler(up):
    class H(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def _serve(self, method):
            path = self.path.split("?", 1)[0].lstrip("/")
            body = up.objects.get(path)
            if "/" not in path or body is None:
                st = 200 if "/" not in path else 404
                self.send_response(st)
                self.send_header("Content-Length", "0")
                self.end_headers()
                with up.mu:
                    up.log.append((method, path, 0))
                return
            a, b, st = 0, len(body) - 1, 200
            rng = self.headers.get("Range")
            if rng and method == "GET":
                lo, _, hi = rng[6:].partition("-")
                a = int(lo)
                b = min(int(hi), len(body) - 1) if hi else len(body) - 1
                st = 206
            self.send_response(st)
            self.send_header("Content-Length", str(b - a + 1))
            self.send_header("ETag", '"%s"' % hashlib.md5(body).hexdigest())
            self.send_header("Last-Modified", email.utils.formatdate(1700000000, usegmt=True))
            if st == 206:
                self.send_header("Content-Range", "bytes %d-%d/%d" % (a, b, len(body)))
            self.end_headers()
            sent = 0
            if method == "GET":
                step = 128 * 1024
                t0 = time.time()
                for i in range(a, b + 1, step):
                    piece = body[i:min(i + step, b + 1)]
                    self.wfile.write(piece)
                    sent += len(piece)
                    ahead = t0 + sent / up.rate - time.time()
                    if ahead > 0:
                        time.sleep(ahead)
            with up.mu:
                up.log.append((method, path, sent))

        def do_HEAD(self):
            self._serve("HEAD")

        def do_GET(self):
            self._serve("GET")
    return H


class ThreadingHTTP(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def streaming():
    size = 32 * MiB
    # 16 MiB/s: a 2 s fill, so the 0.25 bound leaves 0.5 s for a coalesced reader's first byte
    # (tens of ms measured, ASan and a loaded CPU included) while a reader that waited for the
    # fill would see a ratio near 1
    up = Slow(16 * MiB)
    body = os.urandom(size)
    up.objects[B + "/slow"] = body
    want = hashlib.sha256(body).hexdigest()
    hs = ThreadingHTTP(("127.0.0.1", 0), slow_handler(up))
    th = threading.Thread(target=hs.serve_forever, daemon=True)
    th.start()
    # one stream (--fetch-parallel 1): the fill is one upstream GET that the readers share
    # (ranged GETs ahead of them would shorten the fill this bound is measured against)
    gw = E.Server(t, extra=["--backend", "http://127.0.0.1:%d" % hs.server_address[1],
                            "--block-size", "8M", "--cache-size", "256M",
                            "--revalidate-after", "never", "--fetch-parallel", "1"]).start()
    try:
        n = 8
        bar = threading.Barrier(n)

        def reader(i):
            path = "/%s/slow" % B
            hdrs = {"host": "127.0.0.1:%d" % gw.port}
            E.sign_headers("GET", path, "", hdrs, E.EMPTY_SHA, gw.ak, gw.sk)
            conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=60)
            try:
                conn.connect()
                bar.wait(30)
                if i:
                    time.sleep(0.05)   # the first reader starts the fill; the others join it
                t0 = time.time()
                conn.request("GET", path, headers=hdrs)
                r = conn.getresponse()
                h = hashlib.sha256()
                first = None
                while True:
                    blk = r.read(64 * 1024)
                    if not blk:
                        break
                    if first is None:
                        first = time.time() - t0
                    h.update(blk)
                return r.getheader("x-cache"), h.hexdigest(), first, time.time() - t0
            finally:
                conn.close()

        with cf.ThreadPoolExecutor(n) as ex:
            rs = list(ex.map(reader, range(n)))
        for how, sh, ttfb, total in rs:
            E.eq("body", sh, want)
        hows = sorted(r[0] for r in rs)
        E.eq("x-cache", hows, ["coalesced"] * (n - 1) + ["miss"])
        fill = max(r[3] for r in rs)
        worst = max(r[2] for r in rs if r[0] == "coalesced")
        ratio = worst / fill
        print("       # fill %.2f s; time to first byte: miss %.3f s, coalesced worst %.3f s (ratio %.3f)"
              % (fill, [r[2] for r in rs if r[0] == "miss"][0], worst, ratio))
        if fill < 0.5:
            raise E.Fail("the throttled fill took only %.2f s: cannot tell streaming from buffering" % fill)
        if ratio > 0.25:
            raise E.Fail("coalesced readers waited %.2f s of a %.2f s fill for their first byte"
                         % (worst, fill))
        deadline = time.time() + 5  # the fake logs a GET after its last write: wait for it
        while (sum(x[2] for x in up.log if x[0] == "GET") < size and time.time() < deadline):
            time.sleep(0.05)
        gets = [x for x in up.log if x[0] == "GET"]
        # one stream: the lookup's GET of the first block (--cold-get), then one run for the
        # rest (the read-ahead's), each byte sent once
        E.eq("upstream GETs (the lookup's first block, one fetch run)", len(gets), 2)
        E.eq("upstream bytes sent", sum(x[2] for x in gets), size)
    finally:
        gw.stop()
        gw.cleanup()
        hs.shutdown()
        hs.server_close()


t.check("throttled upstream: coalesced readers stream before the fill ends, one upstream GET",
        streaming)
sys.exit(t.finish())
