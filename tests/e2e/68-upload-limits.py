"""68-upload-limits: bodies of unknown length (HTTP chunked: curl -T - from a pipe, boto3
put_object of a non-seekable stream) are held to the same limits as declared ones, reserved as
their bytes arrive. Write-back (--dirty-limit 16M, --cache-size 64M, upstream down: nothing
drains): a chunked PUT larger than the dirty limit gets 400 EntityTooLarge, one past the room
left 503 SlowDown (curl and boto3), a chunked UploadPart too; each refusal leaves nothing (no
staged file, dirty and staged counts as before) and bodies that fit are stored byte for byte;
a stored part counts in staged and used bytes until its upload is aborted or completed.
Write-through (--cache-size 32M): a chunked PUT or part larger than the cache gets 400
EntityTooLarge, nothing stored; the staged copy of a PUT in flight counts in /_/stats
cache.used_bytes and cache.staged_bytes as it arrives (declared length or chunked: what
arrived, at most twice that; e2e 69 shows a trickling declared body evicts nothing), so a second chunked PUT that does not fit beside it gets 503
SlowDown while the first, resumed, is stored whole."""
import hashlib
import io
import os
import socket
import subprocess
import sys
import time

import e2elib as E

MiB = 1 << 20
B = "upl"
t = E.Suite("68-upload-limits.py")


class Stream(io.RawIOBase):
    """A non-seekable file: botocore sends it with Transfer-Encoding: chunked."""

    def __init__(self, data):
        self.d = io.BytesIO(data)

    def readable(self):
        return True

    def readinto(self, b):
        x = self.d.read(len(b))
        b[:len(x)] = x
        return len(x)

    def seekable(self):
        return False


def streaming_boto3(srv):
    """boto3 that sends a non-seekable body as it comes: no payload hash, no Content-MD5 (both
    would read the stream ahead), so the length is unknown until its end."""
    from botocore.utils import conditionally_calculate_md5
    s3 = srv.boto3(s3={"addressing_style": "path", "payload_signing_enabled": False},
                   retries={"max_attempts": 0})  # a retry would rewind the stream
    for op in ("PutObject", "UploadPart"):
        s3.meta.events.unregister("before-call.s3.%s" % op, conditionally_calculate_md5)
    return s3


def curl_chunked(srv, path, data, query=""):
    """PUT @data with curl from a pipe, Transfer-Encoding: chunked. (status, body)."""
    url = "%s%s%s" % (srv.endpoint, path, "?" + query if query else "")
    p = subprocess.run(["curl", "-s", "-o", "-", "-w", "\n%{http_code}", "--aws-sigv4",
                        "aws:amz:%s:s3" % E.REGION, "--user", "%s:%s" % (srv.ak, srv.sk),
                        "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD",
                        "-H", "Transfer-Encoding: chunked", "-T", "-", url],
                       input=data, capture_output=True, timeout=120)
    out = p.stdout
    body, _, status = out.rpartition(b"\n")
    return int(status or 0), body


def xml_code(body):
    b = body.decode("utf-8", "replace")
    if "<Code>" not in b:
        return None
    return b.split("<Code>", 1)[1].split("</Code>", 1)[0]


def expect_curl(what, got, status, code):
    st, body = got
    if st != status or xml_code(body) != code:
        raise E.Fail("%s: expected %d %s, got %d %r" % (what, status, code, st, body[:300]))


def state(srv, settled=True):
    """What the cache holds: used and staged bytes, dirty and drain-staged bytes, and the
    staged files of the cache directory (@settled: once no request is in flight)."""
    st = srv.settled_stats() if settled else srv.stats()
    c, d = st["cache"], st["drain"]
    return {"used": c["used_bytes"], "staged": c.get("staged_bytes"), "dirty": c["dirty_bytes"],
            "drain_staged": d["staged_bytes"], "tmp": sorted(os.listdir(os.path.join(srv.cache, "tmp")))}


def same_state(what, srv, before, settled=True):
    """After a refusal: the same counts as @before, no staged file (given a moment: the
    server lets go of the request after the client has its answer)."""
    got = E.wait_until(lambda: (lambda s: s if s == before else None)(state(srv, settled)),
                       timeout=5)
    if got is None:
        raise E.Fail("%s: the cache holds %r, before it %r" % (what, state(srv, settled), before))


def idle(srv, what):
    s = state(srv)
    if s["staged"] or s["drain_staged"] or s["tmp"]:
        raise E.Fail("%s: staged bytes or files left: %r" % (what, s))
    return s


# ------------------------------------------------------------------ write-back

def write_back():
    up = E.Server(t, port=E.free_port())
    os.makedirs(os.path.join(up.store, B))
    up.start()
    gw = E.Server(t, extra=["--backend", "http://127.0.0.1:%d" % up.port,
                            "--backend-access-key", up.ak, "--backend-secret-key", up.sk,
                            "--backend-timeout", "3s", "--write-mode", "back",
                            "--dirty-limit", "16M", "--cache-size", "64M",
                            "--revalidate-after", "0"])
    try:
        gw.start()
        up.stop()  # a backend that takes nothing: what is written stays dirty
        s3 = gw.boto3()
        s3s = streaming_boto3(gw)
        kept = {}

        def over_limit():
            before = idle(gw, "at start")
            expect_curl("curl chunked PUT of 17 MiB (dirty limit 16 MiB)",
                        curl_chunked(gw, "/%s/big" % B, os.urandom(17 * MiB)), 400, "EntityTooLarge")
            same_state("after the refused 17 MiB PUT", gw, before)

        def within_then_slowdown():
            for i in range(2):
                data = os.urandom(6 * MiB + i)
                st, body = curl_chunked(gw, "/%s/ok%d" % (B, i), data)
                E.eq("curl chunked PUT %d of 6 MiB" % (i + 1), st, 200)
                kept["ok%d" % i] = data
            before = idle(gw, "after two PUTs")
            E.eq("dirty bytes after two 6 MiB PUTs", before["dirty"], 12 * MiB + 1)
            expect_curl("third curl chunked PUT of 6 MiB (12 of 16 MiB dirty)",
                        curl_chunked(gw, "/%s/third" % B, os.urandom(6 * MiB)), 503, "SlowDown")
            same_state("after the refused third PUT", gw, before)
            E.expect_client_error("boto3 put_object of a 6 MiB stream", s3s.put_object, 503,
                                  "SlowDown", Bucket=B, Key="third", Body=Stream(os.urandom(6 * MiB)))
            same_state("after the refused boto3 PUT", gw, before)
            data = os.urandom(MiB + 7)
            s3s.put_object(Bucket=B, Key="small", Body=Stream(data))
            kept["small"] = data
            for k, v in kept.items():
                E.same_bytes("GET " + k, s3.get_object(Bucket=B, Key=k)["Body"].read(), v)

        def parts():
            uid = s3.create_multipart_upload(Bucket=B, Key="mp")["UploadId"]
            before = idle(gw, "before the parts")
            q = "partNumber=1&uploadId=%s" % uid
            expect_curl("curl chunked UploadPart of 6 MiB (13 of 16 MiB dirty)",
                        curl_chunked(gw, "/%s/mp" % B, os.urandom(6 * MiB), q), 503, "SlowDown")
            same_state("after the refused part", gw, before)
            E.expect_client_error("boto3 upload_part of a 6 MiB stream", s3s.upload_part, 503,
                                  "SlowDown", Bucket=B, Key="mp", UploadId=uid, PartNumber=1,
                                  Body=Stream(os.urandom(6 * MiB)))
            same_state("after the refused boto3 part", gw, before)
            data = os.urandom(2 * MiB)
            st, body = curl_chunked(gw, "/%s/mp" % B, data, q)
            E.eq("curl chunked UploadPart of 2 MiB", st, 200)
            s = state(gw)
            E.eq("drain staged bytes: the part held", s["drain_staged"], before["drain_staged"] + 2 * MiB)
            E.eq("cache staged bytes: the part held", s["staged"], 2 * MiB)
            if s["used"] < before["used"] + 2 * MiB:
                raise E.Fail("used_bytes %d: the held part is not counted (%d before)"
                             % (s["used"], before["used"]))
            etag = s3.list_parts(Bucket=B, Key="mp", UploadId=uid)["Parts"][0]["ETag"]
            E.eq("part ETag", etag.strip('"'), hashlib.md5(data).hexdigest())
            s3.abort_multipart_upload(Bucket=B, Key="mp", UploadId=uid)
            same_state("after the abort", gw, before)
            # a part refused before its body (no such upload) holds nothing while the gateway
            # reads the body it will not store
            p = Paused(gw, "mp", data, 64 * 1024, False, q)
            try:
                time.sleep(0.5)
                same_state("while the body of a part to an aborted upload arrives", gw, before,
                           settled=False)
                r = p.resume()
                p = None
                E.expect_error("part to an aborted upload", r, 404, "NoSuchUpload")
            finally:
                if p:
                    p.s.close()
            # a completed upload: its parts' staged bytes become the object's
            uid = s3.create_multipart_upload(Bucket=B, Key="mp2")["UploadId"]
            st, _ = curl_chunked(gw, "/%s/mp2" % B, data, "partNumber=1&uploadId=%s" % uid)
            E.eq("curl chunked UploadPart of 2 MiB", st, 200)
            etag = s3.list_parts(Bucket=B, Key="mp2", UploadId=uid)["Parts"][0]["ETag"]
            s3.complete_multipart_upload(Bucket=B, Key="mp2", UploadId=uid, MultipartUpload={
                "Parts": [{"PartNumber": 1, "ETag": etag}]})
            E.same_bytes("GET mp2", s3.get_object(Bucket=B, Key="mp2")["Body"].read(), data)
            s = idle(gw, "after the Complete")
            E.eq("dirty bytes after the Complete", s["dirty"], before["dirty"] + 2 * MiB)

        t.check("write-back: a chunked PUT larger than --dirty-limit: 400 EntityTooLarge, "
                "nothing left", over_limit)
        t.check("write-back: chunked PUTs that fit are stored; past the limit 503 SlowDown "
                "(curl, boto3 stream), nothing left", within_then_slowdown)
        t.check("write-back: chunked UploadPart past the limit: 503 SlowDown, nothing left; one "
                "that fits is held until the abort", parts)
    finally:
        gw.stop()
        gw.cleanup()
        up.cleanup()


# ------------------------------------------------------------------ write-through

def signed_head(srv, path, length=None, query=""):
    hdrs = {"host": "127.0.0.1:%d" % srv.port}
    if length is None:
        hdrs["transfer-encoding"] = "chunked"
    else:
        hdrs["content-length"] = str(length)
    signed = [k for k in hdrs if k != "transfer-encoding"] + ["x-amz-date", "x-amz-content-sha256"]
    E.sign_headers("PUT", path, query, hdrs, "UNSIGNED-PAYLOAD", srv.ak, srv.sk, signed=signed)
    return ("PUT %s%s HTTP/1.1\r\n" % (path, "?" + query if query else "")
            + "".join("%s: %s\r\n" % kv for kv in hdrs.items())
            + "connection: close\r\n\r\n").encode()


class Paused:
    """A PUT sent in two steps: its headers and the first @first bytes, then (resume()) the
    rest; chunked when @chunked, else with its Content-Length."""

    def __init__(self, srv, key, data, first, chunked, query=""):
        self.srv, self.data, self.first, self.chunked = srv, data, first, chunked
        self.s = socket.create_connection(("127.0.0.1", srv.port), timeout=60)
        self.s.sendall(signed_head(srv, "/%s/%s" % (B, key), None if chunked else len(data),
                                   query))
        self._send(data[:first])

    def _send(self, data):
        for i in range(0, len(data), 64 * 1024):
            piece = data[i:i + 64 * 1024]
            self.s.sendall((b"%x\r\n" % len(piece) + piece + b"\r\n") if self.chunked else piece)

    def resume(self):
        try:
            self._send(self.data[self.first:])
            if self.chunked:
                self.s.sendall(b"0\r\n\r\n")
            return E._read_response(self.s, "PUT")
        finally:
            self.s.close()


def write_through():
    srv = E.Server(t, extra=["--cache-size", "32M", "--revalidate-after", "never"])
    os.makedirs(os.path.join(srv.store, B))
    try:
        srv.start()
        s3 = srv.boto3()
        s3s = streaming_boto3(srv)

        def over_cache():
            before = idle(srv, "at start")
            expect_curl("curl chunked PUT of 40 MiB (cache 32 MiB)",
                        curl_chunked(srv, "/%s/huge" % B, os.urandom(40 * MiB)), 400, "EntityTooLarge")
            same_state("after the refused 40 MiB PUT", srv, before)
            E.expect_client_error("boto3 put_object of a 40 MiB stream", s3s.put_object, 400,
                                  "EntityTooLarge", Bucket=B, Key="huge", Body=Stream(os.urandom(40 * MiB)))
            same_state("after the refused boto3 PUT", srv, before)
            uid = s3.create_multipart_upload(Bucket=B, Key="mp")["UploadId"]
            expect_curl("curl chunked UploadPart of 40 MiB",
                        curl_chunked(srv, "/%s/mp" % B, os.urandom(40 * MiB),
                                     "partNumber=1&uploadId=%s" % uid), 400, "EntityTooLarge")
            same_state("after the refused part", srv, before)
            data = os.urandom(5 * MiB + 3)
            st, _ = curl_chunked(srv, "/%s/mp" % B, data, "partNumber=1&uploadId=%s" % uid)
            E.eq("curl chunked UploadPart of 5 MiB", st, 200)
            etag = s3.list_parts(Bucket=B, Key="mp", UploadId=uid)["Parts"][0]["ETag"]
            s3.complete_multipart_upload(Bucket=B, Key="mp", UploadId=uid, MultipartUpload={
                "Parts": [{"PartNumber": 1, "ETag": etag}]})
            E.same_bytes("GET mp", s3.get_object(Bucket=B, Key="mp")["Body"].read(), data)
            if os.path.exists(os.path.join(srv.store, B, "huge")):
                raise E.Fail("the refused object was stored")

        def fits():
            for key, size in (("a", 8 * MiB + 1), ("b", 3 * MiB)):
                data = os.urandom(size)
                if key == "a":
                    st, _ = curl_chunked(srv, "/%s/%s" % (B, key), data)
                    E.eq("curl chunked PUT of %d bytes" % size, st, 200)
                else:
                    s3s.put_object(Bucket=B, Key=key, Body=Stream(data))
                with open(os.path.join(srv.store, B, key), "rb") as f:
                    E.same_bytes("backend copy of " + key, f.read(), data)
                E.same_bytes("GET " + key, s3.get_object(Bucket=B, Key=key)["Body"].read(), data)
            idle(srv, "after the PUTs")

        def in_flight(chunked):
            def run():
                data = os.urandom(20 * MiB)
                sent = 10 * MiB
                want = sent  # reserved as it arrives, declared or not
                # an empty cache first: used_bytes is then what the upload holds
                r = E.request(srv.endpoint, "DELETE", "/_/cache/" + B, query="prefix=",
                              headers={"Authorization": "Bearer " + srv.token}, anon=True)
                E.eq("invalidate the bucket", r.status // 100, 2)
                if not E.wait_until(lambda: srv.stats()["cache"]["used_bytes"] == 0, timeout=10):
                    raise E.Fail("used_bytes %d after the invalidation" % srv.stats()["cache"]["used_bytes"])
                p = Paused(srv, "paused", data, sent, chunked)
                try:
                    def sampled():
                        c = srv.stats()["cache"]
                        return c if min(c["used_bytes"], c.get("staged_bytes") or 0) >= want else None
                    c = E.wait_until(sampled, timeout=10)
                    if c is None:
                        c = srv.stats()["cache"]
                        raise E.Fail("mid-upload (%d of %d bytes sent): staged_bytes %r, used_bytes "
                                     "%d, want >= %d" % (sent, len(data), c.get("staged_bytes"),
                                                         c["used_bytes"], want))
                    if c["used_bytes"] < c["staged_bytes"] or c["used_bytes"] > 32 * MiB:
                        raise E.Fail("mid-upload: used_bytes %d, staged_bytes %d (cap 32 MiB)"
                                     % (c["used_bytes"], c["staged_bytes"]))
                    print("       | %s, %d MiB sent: used %.1f MiB, staged %.1f MiB"
                          % ("chunked" if chunked else "declared", sent // MiB,
                             c["used_bytes"] / MiB, c["staged_bytes"] / MiB))
                    # no room beside it: the rest is its own, nothing else can be evicted
                    expect_curl("a second chunked PUT of 24 MiB beside it",
                                curl_chunked(srv, "/%s/second" % B, os.urandom(24 * MiB)), 503, "SlowDown")
                    r = p.resume()
                    p = None
                    E.eq("the paused PUT, resumed", r.status, 200)
                    E.same_bytes("GET paused", s3.get_object(Bucket=B, Key="paused")["Body"].read(), data)
                    if os.path.exists(os.path.join(srv.store, B, "second")):
                        raise E.Fail("the refused object was stored")
                    s = idle(srv, "after the paused PUT")
                    if s["used"] > 32 * MiB:
                        raise E.Fail("used_bytes %d over the cap" % s["used"])
                finally:
                    if p:
                        p.s.close()
            return run

        t.check("write-through: chunked PUTs and parts larger than the cache: 400 "
                "EntityTooLarge, nothing left; a chunked part that fits is stored", over_cache)
        t.check("write-through: chunked PUTs that fit (curl, boto3 stream) are stored byte for "
                "byte", fits)
        t.check("write-through: a chunked PUT in flight counts in used/staged bytes; a second "
                "that does not fit beside it gets 503 SlowDown", in_flight(True))
        t.check("write-through: a declared PUT in flight counts what arrived in used/staged "
                "bytes; a second that does not fit beside it gets 503 SlowDown", in_flight(False))
    finally:
        srv.stop()
        srv.cleanup()


write_back()
write_through()
sys.exit(t.finish())
