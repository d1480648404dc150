"""67-drain-order.py — write-back: an upload to the backend that the upstream may already be
applying is never overtaken by a later write of the key. The upstream is a fake S3 server that
reads a PUT's whole body, holds its answer for HOLD_S seconds and only then stores the object,
even when the client has gone away meanwhile (as a real server may finish a PUT whose client
disconnected after the body). A DELETE or an overwrite through the gateway while such a drain
PUT is held must wait for it, not cut it and go ahead: else the held PUT lands after the DELETE
(the object comes back upstream) or after the newer version (the old bytes win)."""
import http.server
import socketserver
import sys
import threading
import time

import e2elib as E

HOLD_S = 3.0  # a key's first PUT: longer than libcurl's once-a-second progress call, when a
              # cut lands


class Fake:
    def __init__(self):
        self.mu = threading.Lock()
        self.objects = {}       # path -> body
        self.held = {}          # path -> number of PUTs holding their answer
        self.seen = set()       # paths a PUT was received for
        self.log = []           # (method, path, what) in the order applied

    def snapshot(self):
        with self.mu:
            return dict(self.objects), dict(self.held), list(self.log)


def make_handler(fake):
    class H(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def _send(self, status, body=b"", headers=()):
            try:
                self.send_response(status)
                for k, v in headers:
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if body and self.command != "HEAD":
                    self.wfile.write(body)
            except OSError:
                pass  # the client went away: what was applied stays applied

        def _path(self):
            return self.path.split("?", 1)[0]

        def do_PUT(self):
            n = int(self.headers.get("Content-Length", "0"))
            body = self.rfile.read(n) if n else b""
            p = self._path()
            if p.count("/") < 2:  # CreateBucket
                return self._send(200)
            with fake.mu:
                fake.held[p] = fake.held.get(p, 0) + 1
                first = p not in fake.seen
                fake.seen.add(p)
            # the fake's own latency, not a test's guess: the first PUT of a key is slow, later
            # ones fast, so a cut first PUT would land after a second one sent after the cut
            time.sleep(HOLD_S if first else 0.2)
            with fake.mu:
                fake.held[p] -= 1
                fake.objects[p] = body
                fake.log.append(("PUT", p, body))
            self._send(200, headers=[("ETag", '"%s"' % E.sha(body)[:32])])

        def do_DELETE(self):
            p = self._path()
            with fake.mu:
                fake.objects.pop(p, None)
                fake.log.append(("DELETE", p, None))
            self._send(204)

        def _read(self):
            p = self._path()
            if p.count("/") < 2 or p.endswith("/"):  # HeadBucket, a listing: an empty bucket
                return self._send(200, b'<?xml version="1.0" encoding="UTF-8"?>'
                                  b'<ListBucketResult><Name>b</Name><KeyCount>0</KeyCount>'
                                  b'<IsTruncated>false</IsTruncated></ListBucketResult>',
                                  [("Content-Type", "application/xml")])
            with fake.mu:
                body = fake.objects.get(p)
            if body is None:
                return self._send(404, b"<Error><Code>NoSuchKey</Code><Message>no</Message></Error>",
                                  [("Content-Type", "application/xml")])
            self._send(200, body, [("ETag", '"%s"' % E.sha(body)[:32]),
                                   ("Last-Modified", "Wed, 25 Nov 2026 12:00:00 GMT")])

        do_GET = _read
        do_HEAD = _read

    return H


class FakeServer(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def main():
    t = E.Suite("67-drain-order.py")
    fake = Fake()
    httpd = FakeServer(("127.0.0.1", 0), make_handler(fake))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    gw = E.Server(t, extra=["--backend", "http://127.0.0.1:%d" % httpd.server_address[1],
                            "--write-mode", "back", "--backend-timeout", "30s",
                            "--revalidate-after", "never"])
    E.setup_or_die(t, gw, gw.start)
    B = "order"
    s3 = gw.boto3()
    s3.create_bucket(Bucket=B)

    def held(p):
        return fake.snapshot()[1].get(p, 0) > 0

    def delete_waits_for_a_held_drain():
        for i in range(3):
            k = "del/%d" % i
            p = "/%s/%s" % (B, k)
            s3.put_object(Bucket=B, Key=k, Body=b"soon gone %d" % i)
            if not E.wait_until(lambda: held(p), timeout=20):
                raise E.Fail("round %d: the drain never sent %s" % (i, k))
            s3.delete_object(Bucket=B, Key=k)           # while the upstream holds the PUT
            E.wait_until(lambda: not held(p), timeout=20)
            objs, _, log = fake.snapshot()
            if p in objs:
                raise E.Fail("round %d: %s is back upstream after its DELETE (order %r)" %
                             (i, k, [(m, x) for m, x, _ in log if x == p]))
            E.expect_client_error("round %d: gone from the gateway" % i, s3.get_object, 404,
                                  "NoSuchKey", Bucket=B, Key=k)

    def overwrite_waits_for_a_held_drain():
        for i in range(3):
            k = "over/%d" % i
            p = "/%s/%s" % (B, k)
            s3.put_object(Bucket=B, Key=k, Body=b"old %d" % i)
            if not E.wait_until(lambda: held(p), timeout=20):
                raise E.Fail("round %d: the drain never sent %s" % (i, k))
            s3.put_object(Bucket=B, Key=k, Body=b"new %d" % i)  # while the old one is held
            E.wait_until(lambda: fake.snapshot()[0].get(p) == b"new %d" % i and not held(p),
                         timeout=30)
            E.wait_until(lambda: not held(p), timeout=20)
            objs, _, log = fake.snapshot()
            E.eq("round %d: upstream bytes once everything landed" % i, objs.get(p),
                 b"new %d" % i)
            E.same_bytes("round %d: the gateway's bytes" % i,
                         s3.get_object(Bucket=B, Key=k)["Body"].read(), b"new %d" % i)

    t.check("a DELETE while the upstream holds the drain's PUT: gone upstream (3 rounds)",
            delete_waits_for_a_held_drain)
    t.check("an overwrite while the upstream holds the drain's PUT: the new bytes win upstream "
            "(3 rounds)", overwrite_waits_for_a_held_drain)
    gw.stop()
    httpd.shutdown()
    gw.cleanup()
    sys.exit(t.finish())


if __name__ == "__main__":
    main()
