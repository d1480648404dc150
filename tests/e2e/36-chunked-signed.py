"""36-chunked-signed: aws-chunked uploads built by hand (no client sends signed ones over
http) — STREAMING-AWS4-HMAC-SHA256-PAYLOAD and -TRAILER with crc32, with Content-Length
and with HTTP Transfer-Encoding: chunked; STREAMING-UNSIGNED-PAYLOAD-TRAILER (the JS SDK);
tampered chunk data / chunk signature / trailer signature -> 403 and nothing stored;
wrong trailer crc32 -> 400 BadDigest; Content-Encoding handling (gzip,aws-chunked -> gzip)."""
import os
import sys

import e2elib as E

t = E.Suite("36-chunked-signed.py")


def self_test():
    # AWS's worked example (sigv4-streaming): our encoder must reproduce its signatures,
    # otherwise every other result in this file means nothing.
    sk = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
    h = {"host": "s3.amazonaws.com", "x-amz-storage-class": "REDUCED_REDUNDANCY",
         "content-encoding": "aws-chunked", "x-amz-decoded-content-length": "66560",
         "content-length": "66824"}
    seed, scope, d = E.sign_headers("PUT", "/examplebucket/chunkObject.txt", "", h,
                                    "STREAMING-AWS4-HMAC-SHA256-PAYLOAD", "AKIAIOSFODNN7EXAMPLE", sk,
                                    amz_date="20130524T000000Z")
    E.eq("seed signature", seed, "4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9")
    body = E.aws_chunked_body([b"a" * 65536, b"a" * 1024], sk, d, scope, seed)
    E.eq("encoded length", len(body), 66824)
    for sig in (b"ad80c730a21e5b8d04586a2213dd63b9a0e99e0e2307b0ade35a65485a288648",
                b"0055627c9e194cb4542bae2aa5492e3c1575bbb81b612b7d234b86a503ef5497",
                b"b6c6ea8a5354eaf15b3cb7646744f4275b71ea724fed81ceb9323e279d449df9"):
        if sig not in body:
            raise E.Fail("chunk signature %s missing from the encoding" % sig.decode())


t.check("encoder reproduces AWS's worked example", self_test)

srv = E.Server(t).start()
B = "chunk"
os.makedirs(os.path.join(srv.store, B))
DATA = os.urandom(200 * 1024 + 333)
CHUNKS = [DATA[i:i + 65536] for i in range(0, len(DATA), 65536)]


def stored(key):
    p = os.path.join(srv.store, B, key)
    return open(p, "rb").read() if os.path.exists(p) else None


def put_signed(key, trailer=False, tamper=None, te=False, content_encoding="aws-chunked",
               crc=None, chunks=CHUNKS, data=DATA):
    """Builds and sends one signed aws-chunked PUT. Returns the response."""
    amz_date = E.amz_now()
    mode = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD" + ("-TRAILER" if trailer else "")
    hdrs = {"host": "127.0.0.1:%d" % srv.port, "content-encoding": content_encoding,
            "x-amz-decoded-content-length": str(len(data))}
    if trailer:
        hdrs["x-amz-trailer"] = "x-amz-checksum-crc32"
    # the encoded length is needed before signing when sent with Content-Length: encode twice
    seed_probe, scope, _ = E.sign_headers("PUT", "/%s/%s" % (B, key), "", dict(hdrs), mode, srv.ak, srv.sk,
                                          amz_date=amz_date)
    tr = ("x-amz-checksum-crc32", crc or E.crc32_b64(data)) if trailer else None
    probe = E.aws_chunked_body(chunks, srv.sk, amz_date, scope, seed_probe, trailer=tr)
    if not te:
        hdrs["content-length"] = str(len(probe))
    seed, scope, _ = E.sign_headers("PUT", "/%s/%s" % (B, key), "", hdrs, mode, srv.ak, srv.sk,
                                    amz_date=amz_date)
    body = E.aws_chunked_body(chunks, srv.sk, amz_date, scope, seed, trailer=tr, tamper=tamper)
    send = {k: v for k, v in hdrs.items() if k != "host"}
    return E.request(srv.endpoint, "PUT", "/%s/%s" % (B, key), headers=send, body=body,
                     anon=True, te_chunked=te, no_content_length=te)


def get_back(key, want):
    r = srv.req("GET", "/%s/%s" % (B, key))
    E.eq("GET %s status" % key, r.status, 200)
    E.same_bytes("GET %s body" % key, r.body, want)
    return r


def ok_plain():
    r = put_signed("plain.bin")
    E.eq("status", r.status, 200)
    E.same_bytes("stored bytes", stored("plain.bin"), DATA)
    E.eq("ETag is the MD5 of the decoded bytes", r.h("etag"),
         '"%s"' % __import__("hashlib").md5(DATA).hexdigest())
    get_back("plain.bin", DATA)


def ok_plain_te():
    r = put_signed("plain-te.bin", te=True)
    E.eq("status", r.status, 200)
    E.same_bytes("stored bytes", stored("plain-te.bin"), DATA)


def ok_trailer():
    r = put_signed("trailer.bin", trailer=True)
    E.eq("status", r.status, 200)
    E.same_bytes("stored bytes", stored("trailer.bin"), DATA)
    get_back("trailer.bin", DATA)


def ok_trailer_te():
    r = put_signed("trailer-te.bin", trailer=True, te=True)
    E.eq("status", r.status, 200)
    E.same_bytes("stored bytes", stored("trailer-te.bin"), DATA)


def ok_one_chunk_and_empty():
    small = b"tiny body"
    r = put_signed("tiny.bin", chunks=[small], data=small)
    E.eq("one chunk status", r.status, 200)
    E.same_bytes("one chunk stored", stored("tiny.bin"), small)
    r = put_signed("empty.bin", chunks=[], data=b"")
    E.eq("empty body status", r.status, 200)
    E.eq("empty body stored", stored("empty.bin"), b"")


def bad_data():
    r = put_signed("tampered-data.bin", tamper="data")
    E.expect_error("tampered chunk data", r, 403, "SignatureDoesNotMatch")
    E.eq("nothing stored", stored("tampered-data.bin"), None)
    r = srv.req("HEAD", "/%s/tampered-data.bin" % B)
    E.eq("HEAD after the refused upload", r.status, 404)


def bad_chunk_sig():
    r = put_signed("tampered-sig.bin", tamper="sig")
    E.expect_error("tampered chunk signature", r, 403, "SignatureDoesNotMatch")
    E.eq("nothing stored", stored("tampered-sig.bin"), None)


def bad_trailer_sig():
    r = put_signed("tampered-trailer.bin", trailer=True, tamper="trailer-sig")
    E.expect_error("tampered trailer signature", r, 403, "SignatureDoesNotMatch")
    E.eq("nothing stored", stored("tampered-trailer.bin"), None)


def bad_trailer_crc():
    r = put_signed("bad-crc.bin", trailer=True, crc=E.crc32_b64(b"something else"))
    E.expect_error("wrong trailing x-amz-checksum-crc32", r, 400, "BadDigest")
    E.eq("nothing stored", stored("bad-crc.bin"), None)


def overwrite_refused_keeps_old():
    old = b"old object"
    r = srv.req("PUT", "/%s/keep.bin" % B, body=old)
    E.eq("plain PUT", r.status, 200)
    r = put_signed("keep.bin", tamper="data")
    E.eq("tampered overwrite status", r.status, 403)
    E.same_bytes("old object intact", stored("keep.bin"), old)


def unsigned_trailer():
    # what @aws-sdk/client-s3 sends for a stream body
    hdrs = {"content-encoding": "aws-chunked", "x-amz-decoded-content-length": str(len(DATA)),
            "x-amz-trailer": "x-amz-checksum-crc32", "x-amz-sdk-checksum-algorithm": "CRC32"}
    body = E.unsigned_chunked_body(CHUNKS, ("x-amz-checksum-crc32", E.crc32_b64(DATA)))
    r = srv.req("PUT", "/%s/unsigned-trailer.bin" % B, headers=hdrs, body=body,
                payload="STREAMING-UNSIGNED-PAYLOAD-TRAILER", te_chunked=True, no_content_length=True)
    E.eq("status", r.status, 200)
    E.same_bytes("stored bytes", stored("unsigned-trailer.bin"), DATA)
    body = E.unsigned_chunked_body(CHUNKS, ("x-amz-checksum-crc32", E.crc32_b64(b"nope")))
    r = srv.req("PUT", "/%s/unsigned-trailer-bad.bin" % B, headers=hdrs, body=body,
                payload="STREAMING-UNSIGNED-PAYLOAD-TRAILER", te_chunked=True, no_content_length=True)
    E.expect_error("unsigned trailer with a wrong crc32", r, 400, "BadDigest")
    E.eq("nothing stored", stored("unsigned-trailer-bad.bin"), None)


def content_encoding():
    r = put_signed("ce-gzip.bin", content_encoding="gzip,aws-chunked")
    E.eq("status", r.status, 200)
    h = srv.req("HEAD", "/%s/ce-gzip.bin" % B)
    E.eq("stored Content-Encoding of 'gzip,aws-chunked'", h.h("content-encoding"), "gzip")
    h = srv.req("HEAD", "/%s/plain.bin" % B)
    E.eq("stored Content-Encoding of 'aws-chunked'", h.h("content-encoding"), None)
    E.eq("Content-Length is the decoded length", h.h("content-length"), str(len(DATA)))


t.check("signed PAYLOAD with Content-Length: 200, bytes, ETag", ok_plain)
t.check("signed PAYLOAD over Transfer-Encoding: chunked", ok_plain_te)
t.check("signed PAYLOAD-TRAILER with crc32", ok_trailer)
t.check("signed PAYLOAD-TRAILER over Transfer-Encoding: chunked", ok_trailer_te)
t.check("one chunk, and an empty body", ok_one_chunk_and_empty)
t.check("tampered chunk data: 403 SignatureDoesNotMatch, nothing stored", bad_data)
t.check("tampered chunk signature: 403, nothing stored", bad_chunk_sig)
t.check("tampered trailer signature: 403, nothing stored", bad_trailer_sig)
t.check("wrong trailing crc32: 400 BadDigest, nothing stored", bad_trailer_crc)
t.check("refused overwrite keeps the old object", overwrite_refused_keeps_old)
t.check("STREAMING-UNSIGNED-PAYLOAD-TRAILER (JS SDK shape), good and bad crc", unsigned_trailer)
t.check("Content-Encoding: aws-chunked stripped, gzip kept", content_encoding)
srv.stop()
srv.cleanup()
sys.exit(t.finish())
