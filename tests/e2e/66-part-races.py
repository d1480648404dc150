"""66-part-races.py — one part number uploaded twice at once, and retries that fail, in
write-back, write-through to the POSIX backend, and write-through to an S3 backend (a second
s3cached on a file backend, as 46 does). Each case runs many times in a loop, bounded in time:
- two UploadParts of one number overlap (each waits for 100 Continue, then the first body is
  held mid-way on its socket until the other one has been answered or has sent as much, so the
  overlap is certain, no timing involved); in turn the first one in finishes last, the second
  one in finishes last, and both are released at once (then the one listed counts as the last).
  ListParts shows the number once, with the ETag of the one that finished last; Complete naming
  the other ETag is InvalidPart; Complete naming the last one succeeds and the object is its
  bytes, byte for byte, between its neighbours. The racing number is the middle of three parts (the common size fixed by part 1)
  or part 1 before any other (the race also fixes the common size);
- after a part was acknowledged, a retry of its number fails (wrong Content-MD5, wrong
  x-amz-checksum-crc32, a tampered aws-chunked signature, a disconnect mid-body): ListParts
  still shows the acknowledged part and Complete gives its bytes;
- an UploadPart still in flight when Complete comes (of a part named, or of a number above)
  changes nothing of the object and gets NoSuchUpload when it ends.
make test runs each loop MIN_ROUNDS times (every race kind and failure kind still met);
make test-full (E2E_FULL=1) the full 30 and 12 rounds."""
import base64
import concurrent.futures as cf
import hashlib
import os
import re
import socket
import sys
import time

import e2elib as E

MiB = 1 << 20
P = 5 * MiB          # the parts' common size: the smallest S3 allows, laid out in place
HOLD = 3 * MiB       # what an overlapped body sends before it waits
B = "races"
MIN_ROUNDS = 4
FULL = os.environ.get("E2E_FULL") == "1"   # make test-full: every round; make test: the minimum
RACE_ITERS = int(os.environ.get("RACE_ITERS", "30" if FULL else str(MIN_ROUNDS)))
RETRY_ITERS = int(os.environ.get("RETRY_ITERS", "12" if FULL else str(MIN_ROUNDS)))  # per kind
RACE_BUDGET_S = 25   # a loop stops early past this (3 race loops, 15 others: at most
RETRY_BUDGET_S = 8   # ~200 s): a slow machine runs fewer rounds, but always MIN_ROUNDS


class Part:
    """One UploadPart on its own connection, its body sent in steps (send(), then finish() or
    cut()), so another request can be run while this one is still in flight. It asks for
    100-continue and sends no byte of the body before it: the server has begun the request."""

    def __init__(self, srv, key, upload_id, number, body, headers=None):
        self.body = body
        self.sent = 0
        path = "/%s/%s" % (B, key)
        query = "partNumber=%d&uploadId=%s" % (number, upload_id)
        hdrs = {"host": "127.0.0.1:%d" % srv.port, "content-length": str(len(self.body)),
                "expect": "100-continue"}
        for k, v in (headers or {}).items():
            hdrs[k.lower()] = v
        E.sign_headers("PUT", path, query, hdrs, hashlib.sha256(body).hexdigest(), srv.ak, srv.sk)
        head = "PUT %s?%s HTTP/1.1\r\n" % (path, query)
        head += "".join("%s: %s\r\n" % kv for kv in hdrs.items()) + "connection: close\r\n\r\n"
        self.sock = socket.create_connection(("127.0.0.1", srv.port), timeout=60)
        self.sock.sendall(head.encode("latin-1"))
        f = self.sock.makefile("rb")
        line = f.readline(65537)
        if not line.startswith(b"HTTP/1.1 100"):   # an early answer: an error, no body wanted
            rest = f.read()
            raise E.Fail("UploadPart #%d: no 100 Continue: %r" % (number, (line + rest)[:300]))
        while f.readline(65537) not in (b"\r\n", b"\n", b""):
            pass

    def send(self, n):
        self.sock.sendall(self.body[self.sent:self.sent + n])
        self.sent = min(len(self.body), self.sent + n)

    def finish(self):
        try:
            self.send(len(self.body) - self.sent)
            return E._read_response(self.sock, "PUT")
        finally:
            self.sock.close()

    def cut(self):
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        self.sock.close()


def etag_of(r, what):
    if r.status != 200:
        raise E.Fail("%s: expected 200, got %r" % (what, r))
    return r.h("etag")


def put_part(srv, key, u, number, body):
    return etag_of(Part(srv, key, u, number, body).finish(), "UploadPart %s #%d" % (key, number))


def b64md5(b):
    return base64.b64encode(hashlib.md5(b).digest()).decode()


def wait_aborted(srv, key, deadline_s=15):
    """Waits until the server logged the end of an aborted request on @key (its access line is
    written once it has finished with it): only then may a check rely on what it left."""
    pat = re.compile(r" access .* PUT \S+ /%s/%s .* aborted$" % (B, re.escape(key)))
    end = time.time() + deadline_s
    while time.time() < end:
        with open(srv.log, errors="replace") as f:
            if any(pat.search(line.rstrip("\n")) for line in f):
                return
        time.sleep(0.05)
    raise E.Fail("no 'aborted' access line for %s within %d s" % (key, deadline_s))


def parts_of(s3, key, u):
    r = s3.list_parts(Bucket=B, Key=key, UploadId=u)
    return [(p["PartNumber"], p["ETag"].strip('"'), p["Size"]) for p in r.get("Parts", [])]


def complete(s3, key, u, etags):
    return s3.complete_multipart_upload(
        Bucket=B, Key=key, UploadId=u,
        MultipartUpload={"Parts": [{"PartNumber": n, "ETag": e} for n, e in etags]})


def loop(t, name, iters, budget_s, fn):
    """Runs fn(i) for i in 0..iters-1, stopping at the first failure, or past @budget_s once
    MIN_ROUNDS ran."""
    t0 = time.time()
    done = 0

    def run():
        nonlocal done
        for i in range(iters):
            if time.time() - t0 > budget_s and done >= MIN_ROUNDS:
                print("       # %s: stopped after %d of %d rounds (time budget)" % (name, done, iters))
                break
            try:
                fn(i)
            except E.Fail as e:
                raise E.Fail("round %d: %s" % (i, e))
            done += 1
        print("       # %d rounds in %.1f s" % (done, time.time() - t0))
    t.check("%s (%d rounds)" % (name, iters), run)


def cases(t, label, gw):
    s3 = gw.boto3()

    def race(i):
        """Two overlapping uploads of one number; the one that finished last is the part."""
        key = "race/%d" % i
        u = s3.create_multipart_upload(Bucket=B, Key=key)["UploadId"]
        number = 2 if (i // 3) % 2 == 0 else 1
        how = ("the first one in finished last", "the second one in finished last",
               "both released at once")[i % 3]
        g1, tail = os.urandom(P), os.urandom(12345 + i)
        a, b = os.urandom(P), os.urandom(P)
        others = []
        if number == 2:
            others = [(1, put_part(gw, key, u, 1, g1)), (3, put_part(gw, key, u, 3, tail))]
        pa = Part(gw, key, u, number, a)
        pa.send(HOLD)
        if i % 3 == 0:      # b goes in after a and is answered while a is held
            eb = put_part(gw, key, u, number, b)
            ea = etag_of(pa.finish(), "held UploadPart")
            order = [b, a]
        else:               # b goes in while a is held
            pb = Part(gw, key, u, number, b)
            pb.send(HOLD)
            if i % 3 == 1:  # a is answered, then b
                ea = etag_of(pa.finish(), "first UploadPart")
                eb = etag_of(pb.finish(), "second UploadPart")
                order = [a, b]
            else:           # the rest of both at once: either may end last
                with cf.ThreadPoolExecutor(2) as ex:
                    fa, fb = ex.submit(pa.finish), ex.submit(pb.finish)
                    ea, eb = etag_of(fa.result(), "UploadPart a"), etag_of(fb.result(), "UploadPart b")
                order = None
        etag = {a: ea, b: eb}
        for body in (a, b):
            E.eq("ETag of an attempt", etag[body], '"%s"' % hashlib.md5(body).hexdigest())
        if order is None:   # the one listed is the one that ended last, whichever it is
            listed = [p for p in parts_of(s3, key, u) if p[0] == number]
            order = [b, a] if listed and '"%s"' % listed[0][1] == ea else [a, b]
        lost, last = order
        if number == 1:
            others = [(2, put_part(gw, key, u, 2, g1)), (3, put_part(gw, key, u, 3, tail))]
        listed = [p for p in parts_of(s3, key, u) if p[0] == number]
        E.eq("ListParts of #%d" % number, listed, [(number, etag[last].strip('"'), P)])
        E.expect_client_error("Complete naming the replaced attempt", complete, 400,
                              "InvalidPart", s3, key, u, sorted(others + [(number, etag[lost])]))
        complete(s3, key, u, sorted(others + [(number, etag[last])]))
        got = s3.get_object(Bucket=B, Key=key)["Body"].read()
        want = g1 + last + tail if number == 2 else last + g1 + tail
        E.same_bytes("object after the race (%s)" % how, got, want)

    def failed_retry(kind):
        def one(i):
            key = "retry-%s/%d" % (kind, i)
            u = s3.create_multipart_upload(Bucket=B, Key=key)["UploadId"]
            g1, g2, tail = os.urandom(P), os.urandom(P), os.urandom(4321 + i)
            etags = [(1, put_part(gw, key, u, 1, g1)), (2, put_part(gw, key, u, 2, g2)),
                     (3, put_part(gw, key, u, 3, tail))]
            x = os.urandom(P)
            if kind == "content-md5":
                r = Part(gw, key, u, 2, x, headers={"content-md5": b64md5(x[:-1])}).finish()
                E.expect_error("retry with a wrong Content-MD5", r, 400, "BadDigest")
            elif kind == "checksum":
                r = Part(gw, key, u, 2, x,
                         headers={"x-amz-checksum-crc32": E.crc32_b64(x[1:])}).finish()
                E.expect_error("retry with a wrong x-amz-checksum-crc32", r, 400, "BadDigest")
            elif kind == "chunk-signature":
                r = chunked_part(gw, key, u, 2, x)
                E.expect_error("retry with a tampered chunk signature", r, 403,
                               "SignatureDoesNotMatch")
            else:
                p = Part(gw, key, u, 2, x)
                p.send(HOLD)
                p.cut()
                wait_aborted(gw, key)
            E.eq("ListParts after the failed retry", parts_of(s3, key, u),
                 [(1, hashlib.md5(g1).hexdigest(), P), (2, hashlib.md5(g2).hexdigest(), P),
                  (3, hashlib.md5(tail).hexdigest(), len(tail))])
            complete(s3, key, u, etags)
            E.same_bytes("object after the failed retry",
                         s3.get_object(Bucket=B, Key=key)["Body"].read(), g1 + g2 + tail)
        return one

    def straggler(i):
        """An attempt still in flight when Complete comes (of a part named, or of one above)
        changes nothing of the object, and finds the upload gone when it ends."""
        key = "straggler/%d" % i
        u = s3.create_multipart_upload(Bucket=B, Key=key)["UploadId"]
        g1, g2, tail = os.urandom(P), os.urandom(P), os.urandom(999 + i)
        etags = [(1, put_part(gw, key, u, 1, g1)), (2, put_part(gw, key, u, 2, g2)),
                 (3, put_part(gw, key, u, 3, tail))]
        late = Part(gw, key, u, 2 if i % 2 == 0 else 5, os.urandom(P))
        late.send(HOLD)
        complete(s3, key, u, etags)
        E.same_bytes("object completed beside an attempt in flight",
                     s3.get_object(Bucket=B, Key=key)["Body"].read(), g1 + g2 + tail)
        E.expect_error("the attempt that ends after Complete", late.finish(), 404,
                       "NoSuchUpload")
        E.same_bytes("object once that attempt ended",
                     s3.get_object(Bucket=B, Key=key)["Body"].read(), g1 + g2 + tail)

    loop(t, "%s: overlapping UploadPart of one number, the last one wins" % label, RACE_ITERS,
         RACE_BUDGET_S, race)
    loop(t, "%s: an UploadPart in flight at Complete changes nothing" % label, RETRY_ITERS,
         RETRY_BUDGET_S, straggler)
    for kind in ("content-md5", "checksum", "chunk-signature", "disconnect"):
        loop(t, "%s: a failed retry (%s) keeps the acknowledged part" % (label, kind),
             RETRY_ITERS, RETRY_BUDGET_S, failed_retry(kind))


def chunked_part(srv, key, u, number, data):
    """UploadPart of @data as signed aws-chunked frames whose first chunk signature is wrong."""
    chunks = [data[i:i + 64 * 1024] for i in range(0, len(data), 64 * 1024)]
    mode = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"
    amz = E.amz_now()
    path, query = "/%s/%s" % (B, key), "partNumber=%d&uploadId=%s" % (number, u)
    hdrs = {"host": "127.0.0.1:%d" % srv.port, "content-encoding": "aws-chunked",
            "x-amz-decoded-content-length": str(len(data))}
    seed, scope, _ = E.sign_headers("PUT", path, query, dict(hdrs), mode, srv.ak, srv.sk,
                                    amz_date=amz)
    hdrs["content-length"] = str(len(E.aws_chunked_body(chunks, srv.sk, amz, scope, seed)))
    seed, scope, _ = E.sign_headers("PUT", path, query, hdrs, mode, srv.ak, srv.sk, amz_date=amz)
    wire = E.aws_chunked_body(chunks, srv.sk, amz, scope, seed, tamper="sig")
    send = {k: v for k, v in hdrs.items() if k != "host"}
    return E.request(srv.endpoint, "PUT", path, query=query, headers=send, body=wire, anon=True)


def main():
    t = E.Suite("66-part-races.py")
    only = os.environ.get("RACE_MODES", "back,through,s3").split(",")
    if "back" in only:
        gw = E.Server(t, extra=["--write-mode", "back", "--cache-size", "4G",
                                "--dirty-limit", "2G"]).start()
        E.setup_or_die(t, gw, lambda: gw.boto3().create_bucket(Bucket=B))
        cases(t, "write-back", gw)
        gw.stop()
        gw.cleanup()
    if "through" in only:
        gw = E.Server(t).start()
        E.setup_or_die(t, gw, lambda: gw.boto3().create_bucket(Bucket=B))
        cases(t, "write-through, POSIX backend", gw)
        gw.stop()
        gw.cleanup()
    if "s3" in only:
        up = E.Server(t).start()
        gw = E.Server(t, extra=["--backend", "http://127.0.0.1:%d" % up.port,
                                "--backend-access-key", up.ak, "--backend-secret-key", up.sk,
                                "--backend-timeout", "10s"]).start()
        E.setup_or_die(t, gw, lambda: gw.boto3().create_bucket(Bucket=B))
        cases(t, "write-through, S3 backend", gw)
        gw.stop()
        gw.cleanup()
        up.stop()
        up.cleanup()
    return t.finish()


if __name__ == "__main__":
    sys.exit(main())
