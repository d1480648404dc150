"""47-s3-backend-faults.py — the S3 backend (be_s3.c) against a misbehaving upstream: a fake S3
server in this process (http.server + ThreadingMixIn on 127.0.0.1) that can die mid-transfer,
answer 503 SlowDown a few times, answer 503 forever, stall after the headers or never answer,
and 404. Through a gateway started with --backend-timeout 3s it checks: a dead upstream gives
the client a short body or a reset and nothing partial is served later (the next GET fetches
again, x-cache miss, and is byte-exact); 503s are retried (counted by the fake) and then become
a clean 503 ServiceUnavailable XML when the metadata lookup (HEAD) fails, or a cut-short 200
when only the block fetch fails (a miss is streamed: the status went out before the fetch
failed); a stalled upstream gives an error in about the timeout (one timeout, no retries of
it), not a hang; SIGTERM while a GET waits on a silent upstream answers it 503 and exits 0;
404 is NoSuchKey; and the gateway is healthy after all of it. The lines
starting with "." say what the client saw."""
import concurrent.futures as cf
import email.utils
import hashlib
import http.server
import os
import socketserver
import threading
import time

import e2elib as E

MiB = 1 << 20
TIMEOUT_S = 3


class Fake:
    """The upstream's state: objects, per-key fault modes, and a log of what it was asked."""

    def __init__(self):
        self.mu = threading.Lock()
        self.objects = {}     # "bucket/key" -> bytes
        self.modes = {}       # "bucket/key" -> dict(kind=..., methods=..., n=..., after=...)
        self.log = []         # (method, path, status)
        self.release = threading.Event()

    def put(self, path, body):
        with self.mu:
            self.objects[path] = body

    def mode(self, path, kind=None, methods=("HEAD", "GET"), **kw):
        with self.mu:
            if kind is None:
                self.modes.pop(path, None)
            else:
                self.modes[path] = dict(kind=kind, methods=methods, **kw)

    def count(self, path, method=None, status=None):
        with self.mu:
            return sum(1 for m, p, s in self.log if p == path and (method is None or m == method)
                       and (status is None or s == status))

    def note(self, method, path, status):
        with self.mu:
            self.log.append((method, path, status))


def make_handler(fake):
    class H(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def _err(self, status, code, msg, method):
            body = ("<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>%s</Code>"
                    "<Message>%s</Message><RequestId>fake</RequestId></Error>" % (code, msg)).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if method != "HEAD":
                self.wfile.write(body)

        def _serve(self, method):
            path = self.path.split("?", 1)[0].lstrip("/")
            n = int(self.headers.get("Content-Length") or 0)
            if n:
                self.rfile.read(n)
            with fake.mu:
                body = fake.objects.get(path)
                mode = fake.modes.get(path)
                if mode and method not in mode["methods"]:
                    mode = None
                kind = mode["kind"] if mode else None
                if kind == "slowdown":
                    if mode["n"] > 0:
                        mode["n"] -= 1
                    else:
                        kind = None
            if "/" not in path:              # the bucket (HeadBucket): always there
                fake.note(method, path, 200)
                xml = (b'<?xml version="1.0" encoding="UTF-8"?><ListBucketResult><Name>%s</Name>'
                       b'<IsTruncated>false</IsTruncated></ListBucketResult>' % path.encode())
                self.send_response(200)
                self.send_header("Content-Type", "application/xml")
                self.send_header("Content-Length", str(len(xml)))
                self.end_headers()
                if method != "HEAD":
                    self.wfile.write(xml)
                return
            if kind == "never":              # read the request, never answer
                fake.note(method, path, 0)
                fake.release.wait(60)
                self.close_connection = True
                return
            if kind in ("slowdown", "503"):
                st = 503
                fake.note(method, path, st)
                if kind == "slowdown":
                    self._err(503, "SlowDown", "Please reduce your request rate.", method)
                else:
                    self._err(503, "ServiceUnavailable", "Down for the test.", method)
                return
            if body is None:
                fake.note(method, path, 404)
                self._err(404, "NoSuchKey", "The specified key does not exist.", method)
                return
            total = len(body)
            a, b = 0, total - 1
            st = 200
            rng = self.headers.get("Range")
            if rng and method == "GET" and rng.startswith("bytes="):
                lo, _, hi = rng[6:].partition("-")
                if lo:
                    a = int(lo)
                    b = min(int(hi), total - 1) if hi else total - 1
                else:
                    a = max(0, total - int(hi))
                if a >= total:
                    fake.note(method, path, 416)
                    self._err(416, "InvalidRange", "The requested range is not satisfiable", method)
                    return
                st = 206
            fake.note(method, path, st)
            self.send_response(st)
            self.send_header("Content-Length", str(b - a + 1))
            self.send_header("ETag", '"%s"' % hashlib.md5(body).hexdigest())
            self.send_header("Last-Modified", email.utils.formatdate(1700000000, usegmt=True))
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Accept-Ranges", "bytes")
            if st == 206:
                self.send_header("Content-Range", "bytes %d-%d/%d" % (a, b, total))
            self.end_headers()
            if method == "HEAD":
                return
            if kind == "stall":              # headers, then nothing
                self.wfile.flush()
                fake.release.wait(60)
                self.close_connection = True
                return
            chunk = body[a:b + 1]
            if kind == "die":                # a 200/206 that stops after N bytes
                self.wfile.write(chunk[:mode["after"]])
                self.wfile.flush()
                self.close_connection = True
                return
            self.wfile.write(chunk)

        def do_HEAD(self):
            self._serve("HEAD")

        def do_GET(self):
            self._serve("GET")

    return H


class FakeServer(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def get_raw(gw, path, timeout=60):
    """GET through the gateway: (status, headers, body, error text or None). A short body or a
    reset is reported as the error, with what arrived."""
    import socket
    import urllib.parse
    u = urllib.parse.urlsplit(gw.endpoint)
    hdrs = {"host": u.netloc}
    E.sign_headers("GET", path, "", hdrs, E.EMPTY_SHA, gw.ak, gw.sk)
    head = "GET %s HTTP/1.1\r\n" % path + "".join("%s: %s\r\n" % kv for kv in hdrs.items())
    head += "connection: close\r\n\r\n"
    s = socket.create_connection((u.hostname, u.port), timeout=timeout)
    status, h, body = None, {}, b""
    try:
        s.sendall(head.encode())
        f = s.makefile("rb")
        line = f.readline()
        if not line:
            return None, {}, b"", "connection closed before a status line"
        status = int(line.split()[1])
        while True:
            hl = f.readline().decode("latin-1")
            if hl in ("\r\n", "\n", ""):
                break
            k, _, v = hl.partition(":")
            h[k.strip().lower()] = v.strip()
        want = int(h.get("content-length", "-1"))
        while want < 0 or len(body) < want:
            piece = f.read(min(1 << 20, want - len(body)) if want >= 0 else 1 << 20)
            if not piece:
                break
            body += piece
        if want >= 0 and len(body) < want:
            return status, h, body, "short body: %d of %d bytes" % (len(body), want)
        return status, h, body, None
    except (OSError, ValueError) as e:
        return status, h, body, "%s: %s" % (type(e).__name__, e)
    finally:
        s.close()


def main():
    t = E.Suite("47-s3-backend-faults.py")
    fake = Fake()
    srv = FakeServer(("127.0.0.1", 0), make_handler(fake))
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    up = "http://127.0.0.1:%d" % srv.server_address[1]
    gw = E.Server(t, extra=["--backend", up, "--backend-timeout", "%ds" % TIMEOUT_S,
                            "--block-size", "4M", "--revalidate-after", "never"]).start()
    B = "faults"
    ok_body = os.urandom(5 * MiB + 3)
    fake.put(B + "/ok", ok_body)

    def baseline():
        st, h, body, err = get_raw(gw, "/%s/ok" % B)
        E.eq("status", (st, err), (200, None))
        E.same_bytes("body", body, ok_body)
        E.eq("x-cache of the first GET", h.get("x-cache"), "miss")
        n = fake.count(B + "/ok")
        st, h, body, err = get_raw(gw, "/%s/ok" % B)
        E.same_bytes("body of the hit", body, ok_body)
        E.eq("x-cache of the second GET", h.get("x-cache"), "hit")
        E.eq("upstream requests during the hit", fake.count(B + "/ok"), n)

    def not_found():
        r = gw.req("GET", "/%s/nope" % B)
        E.expect_error("GET of a key the upstream does not have", r, 404, "NoSuchKey")
        r = gw.req("HEAD", "/%s/nope" % B)
        E.eq("HEAD of a key the upstream does not have", r.status, 404)

    def dies_midway():
        k = B + "/dies"
        body = os.urandom(24 * MiB + 11)
        fake.put(k, body)
        fake.mode(k, "die", methods=("GET",), after=3 * MiB + 5)
        st, h, got, err = get_raw(gw, "/" + k)
        if err is None and st == 200 and got == body:
            raise E.Fail("the client got the whole object although the upstream died midway")
        if err is None and (st is None or st < 500):
            raise E.Fail("no error for the client: status %s, %d bytes" % (st, len(got)))
        if got and body[:len(got)] != got:
            raise E.Fail("the bytes before the error are wrong")
        print("       . upstream died after 3 MiB: client got %s, %d bytes (%s)"
              % (st, len(got), err or "no error"))
        gets = fake.count(k, "GET")
        fake.mode(k)
        # the failed read's other transfers (the ranged GETs ahead of it) end before the
        # figures the second GET is measured against: their reservations count as used
        c0 = E.wait_until(lambda: (lambda c: c if not c["reserved_bytes"] and
                                   not c.get("fetch_objects") else None)(gw.stats()["cache"]),
                          timeout=20) or gw.stats()["cache"]
        gets = fake.count(k, "GET")
        st, h, got, err = get_raw(gw, "/" + k)
        E.eq("status once the upstream is healthy", (st, err), (200, None))
        E.same_bytes("body once the upstream is healthy (nothing partial was kept)", got, body)
        # a miss, or partial: blocks the failed read's ranged GETs ahead got whole (its last, of
        # 11 bytes; one that started after the upstream was healthy again) are kept
        if h.get("x-cache") not in ("miss", "partial"):
            raise E.Fail("x-cache of the GET after the failure: %r" % h.get("x-cache"))
        if fake.count(k, "GET") <= gets:
            raise E.Fail("the GET after the failure did not fetch from the upstream")
        # The client may have had the bytes from the fill's window, the cache writing behind
        # it. Wait (at most 10 s) until the fill indexed the whole object, or let blocks go
        # because the disk was behind (issue 22: delivered, not cached; seen once beside an
        # ASan suite): only then does the third GET's label say what the fill kept.
        def fill_done():
            c = gw.stats()["cache"]
            # what it fetched is now used; what it found whole already (hit_bytes) was before
            return (c["used_bytes"] - c0["used_bytes"] + c["hit_bytes"] - c0["hit_bytes"]
                    >= len(body) or c["uncached_bytes"] > c0["uncached_bytes"])
        if not E.wait_until(fill_done, timeout=10):
            raise E.Fail("the second GET's fill neither indexed the object nor let blocks go "
                         "in 10 s: %r" % gw.stats()["cache"])
        s1 = gw.settled_stats()
        uncached = s1["cache"]["uncached_bytes"] - c0["uncached_bytes"]
        st, h, got, err = get_raw(gw, "/" + k)
        E.same_bytes("third GET", got, body)
        if uncached:
            print("       . the disk was behind: %d bytes delivered, not cached; third GET: %s"
                  % (uncached, h.get("x-cache")))
        else:
            E.eq("x-cache of the third GET", h.get("x-cache"), "hit")

        # the third GET fetches again exactly the blocks the fill let go of: nothing if it
        # kept them all
        def refetched():
            return gw.settled_stats()["backend"]["bytes_read"] - s1["backend"]["bytes_read"]
        E.wait_until(lambda: refetched() >= uncached, timeout=5)
        E.eq("upstream bytes the third GET fetched (the blocks not cached)", refetched(), uncached)

    def slowdown_then_ok():
        k = B + "/slow"
        body = os.urandom(1 * MiB + 1)
        fake.put(k, body)
        fake.mode(k, "slowdown", n=2)
        st, h, got, err = get_raw(gw, "/" + k)
        E.eq("status after two SlowDowns", (st, err), (200, None))
        E.same_bytes("body after two SlowDowns", got, body)
        E.eq("503s the upstream sent", fake.count(k, status=503), 2)

    def unavailable_forever():
        # HEAD fails too: the gateway has no metadata yet, so the client gets the error XML.
        # HEAD works, GET fails: the gateway streams misses and has sent "200" and the length
        # before the block fetch fails, so the client sees a short body (reported below).
        for label, k, methods in (("HEAD and GET fail", B + "/down", ("HEAD", "GET")),
                                  ("GET fails", B + "/down-get", ("GET",))):
            fake.put(k, os.urandom(100000))
            fake.mode(k, "503", methods=methods)
            t0 = time.time()
            st, h, got, err = get_raw(gw, "/" + k)
            dt = time.time() - t0
            if methods == ("HEAD", "GET"):
                r = E.Resp(st, h, got)
                E.expect_error("%s: 503 forever" % label, r, 503, "ServiceUnavailable")
            elif err is None and (st is None or st < 500):
                raise E.Fail("%s: no error for the client: %s %r" % (label, st, got[:200]))
            n = fake.count(k, status=503)
            if n < 2:
                raise E.Fail("%s: not retried: the upstream saw %d request(s)" % (label, n))
            if n > 8:
                raise E.Fail("%s: %d attempts for one client request" % (label, n))
            if dt > 10:
                raise E.Fail("%s: the error took %.1f s" % (label, dt))
            fake.mode(k)
            print("       . %s: %d upstream attempts, client got %s%s after %.1f s"
                  % (label, n, st, " (%s)" % err if err else "", dt))

    def stalls():
        for label, k, kind, methods in (("headers then nothing", B + "/stall", "stall", ("GET",)),
                                        ("never answers", B + "/never", "never", ("HEAD", "GET"))):
            fake.put(k, os.urandom(2 * MiB))
            fake.mode(k, kind, methods=methods)
            t0 = time.time()
            st, h, got, err = get_raw(gw, "/" + k, timeout=60)
            dt = time.time() - t0
            if err is None and st is not None and st < 500:
                raise E.Fail("%s: status %s without an error" % (label, st))
            if dt > 3 * TIMEOUT_S:
                raise E.Fail("%s: the client waited %.1f s with --backend-timeout %ds "
                             "(upstream requests: %d)" % (label, dt, TIMEOUT_S, fake.count(k)))
            print("       . %s: status %s (%s) after %.1f s, %d upstream request(s)"
                  % (label, st, err or "complete", dt, fake.count(k)))
            fake.mode(k)

    def sigterm_while_stalled():
        """SIGTERM while a GET waits on an upstream that never answers (a long
        --backend-timeout): the GET gets 503 ServiceUnavailable XML at the end of
        --shutdown-timeout and the gateway exits 0 (it used to abort in libmicrohttpd with the
        connection suspended)."""
        gw2 = E.Server(t, extra=["--backend", up, "--backend-timeout", "60s",
                                 "--shutdown-timeout", "1s", "--revalidate-after", "never"]).start()
        k = B + "/term"
        fake.put(k, os.urandom(MiB))
        fake.mode(k, "never", methods=("HEAD", "GET"))
        got = {}
        th = threading.Thread(target=lambda: got.update(r=get_raw(gw2, "/" + k, timeout=30)))
        th.start()
        deadline = time.time() + 30          # SIGTERM once the GET waits on the upstream
        while fake.count(k) < 1:
            if time.time() > deadline:
                raise E.Fail("the GET did not reach the upstream within 30 s")
            time.sleep(0.02)
        t0 = time.time()
        gw2.stop()  # records "server exits 0 on SIGTERM"
        th.join(30)
        dt = time.time() - t0
        fake.mode(k)
        st, h, body, err = got.get("r", (None, None, b"", "no answer"))
        E.eq("status of the GET waiting at shutdown", (st, err), (503, None))
        if b"<Code>ServiceUnavailable</Code>" not in body:
            raise E.Fail("body of the GET waiting at shutdown: %r" % body[:300])
        print("       . answered and stopped %.1f s after SIGTERM" % dt)

    def healthy_after():
        st, h, body, err = get_raw(gw, "/%s/ok" % B)
        E.eq("status", (st, err), (200, None))
        E.same_bytes("body", body, ok_body)
        fresh = os.urandom(300000)
        fake.put(B + "/fresh", fresh)
        with cf.ThreadPoolExecutor(4) as ex:
            for st, h, body, err in ex.map(lambda _: get_raw(gw, "/%s/fresh" % B), range(4)):
                E.eq("status", (st, err), (200, None))
                E.same_bytes("body", body, fresh)

    t.check("baseline: miss then hit, the hit does not reach the upstream", baseline)
    t.check("upstream 404 -> NoSuchKey", not_found)
    t.check("upstream dies mid-transfer: client error, nothing partial kept, refetched whole", dies_midway)
    t.check("503 SlowDown twice then 200: retried, the client sees 200", slowdown_then_ok)
    t.check("503 forever: a few retries, then 503 ServiceUnavailable quickly", unavailable_forever)
    t.check("stalled upstream: error within about --backend-timeout", stalls)
    t.check("SIGTERM while a GET waits on a silent upstream: 503 to the client, exit 0", sigterm_while_stalled)
    fake.release.set()
    t.check("the gateway serves normally after the faults", healthy_after)
    gw.stop()
    gw.cleanup()
    srv.shutdown()
    srv.server_close()
    return t.finish()


if __name__ == "__main__":
    raise SystemExit(main())
