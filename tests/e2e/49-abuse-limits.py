"""49-abuse-limits: limits that hold under abuse. 1,000 idle connections (and 200 that never
finish their headers) do not stop another client from being served, and the idle ones are
closed at --idle-timeout; a body dribbled a byte at a time is cut (no staged file, nothing
stored) while a slow but steady upload is not; --max-object-size and the part limit (the
smaller of it and 5 GiB) give 400 EntityTooLarge (before the body with Expect: 100-continue,
and mid-stream when the length is unknown), and so does a Complete whose parts add up to more,
before anything is made (write-through, write-back, S3 backend: nothing stored, the upload
still listed and abortable); XML bodies over their cap, DeleteObjects over
1,000 keys and XML with a DOCTYPE or deep nesting give 400 MalformedXML. (Oversized headers: 43-bad-input.sh.)"""
import base64
import hashlib
import os
import resource
import socket
import subprocess
import time

import e2elib as E

t = E.Suite("49-abuse-limits.py")
IDLE_S = 3
MAX_OBJ = 6 << 20
srv = E.Server(t, extra=["--idle-timeout", "%ds" % IDLE_S, "--max-object-size", str(MAX_OBJ)])
B = "abuse"
os.makedirs(os.path.join(srv.store, B))
E.setup_or_die(t, srv, srv.start)
KEEP = os.urandom(100000)


def setup():
    E.eq("PUT keep", srv.req("PUT", "/%s/keep" % B, body=KEEP).status, 200)


E.setup_or_die(t, srv, setup)


def nfds():
    return len(os.listdir("/proc/%d/fd" % srv.proc.pid))


def staged():
    return os.listdir(os.path.join(srv.cache, "tmp"))


def healthy():
    r = srv.req("GET", "/%s/keep" % B, timeout=10)
    E.eq("GET keep", r.status, 200)
    E.same_bytes("GET keep", r.body, KEEP)


def idle_connections():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
    base = nfds()
    socks = []
    try:
        for i in range(1200):
            s = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
            if i >= 1000:  # slowloris: headers that never end
                s.sendall(b"GET /%s/keep HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " % B.encode())
            socks.append(s)
        deadline = time.time() + 10
        while nfds() < base + 1100 and time.time() < deadline:
            time.sleep(0.05)
        held = nfds() - base
        if held < 1100:
            raise E.Fail("the server accepted only %d of 1200 connections" % held)
        worst = 0.0
        for i in range(20):
            t0 = time.time()
            healthy()
            worst = max(worst, time.time() - t0)
        if worst > 2:
            raise E.Fail("with 1,200 idle connections open a GET took %.2f s" % worst)
        # the server closes them after --idle-timeout
        deadline = time.time() + IDLE_S + 10
        closed = 0
        for s in socks:
            s.settimeout(max(0.1, deadline - time.time()))
            try:
                closed += s.recv(1) == b""
            except ConnectionResetError:
                closed += 1
            except socket.timeout:
                pass
        print("       | 1,200 held (%d descriptors), worst GET %.3f s, %d closed by the server "
              "within %d s" % (held, worst, closed, IDLE_S + 10))
        if closed != len(socks):
            raise E.Fail("only %d of %d idle connections were closed after --idle-timeout"
                         % (closed, len(socks)))
    finally:
        for s in socks:
            s.close()
    deadline = time.time() + 5
    while nfds() > base + 2 and time.time() < deadline:
        time.sleep(0.1)
    if nfds() > base + 2:
        raise E.Fail("descriptors: %d before, %d after the idle connections" % (base, nfds()))
    healthy()


t.check("1,000 idle + 200 half-sent-header connections: others are served; all closed at "
        "--idle-timeout", idle_connections)


def signed_put_head(path, length, extra=None):
    hdrs = {"host": "127.0.0.1:%d" % srv.port, "content-length": str(length)}
    hdrs.update(extra or {})
    E.sign_headers("PUT", path, "", hdrs, "UNSIGNED-PAYLOAD", srv.ak, srv.sk)
    return ("PUT %s HTTP/1.1\r\n" % path + "".join("%s: %s\r\n" % kv for kv in hdrs.items())
            + "\r\n").encode()


def slow_body():
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=30)
    s.sendall(signed_put_head("/%s/dribble" % B, 100000))
    t0 = time.time()
    cut = None
    try:
        while time.time() - t0 < IDLE_S + 8:
            s.sendall(b"x")
            time.sleep(0.5)  # never silent for --idle-timeout, but 2 bytes/s
    except (BrokenPipeError, ConnectionResetError):
        cut = time.time() - t0
    s.close()
    if cut is None:
        raise E.Fail("a body at 2 bytes/s was still accepted after %d s" % (IDLE_S + 8))
    print("       | dribbled body cut after %.1f s" % cut)
    if os.path.exists(os.path.join(srv.store, B, "dribble")):
        raise E.Fail("the dribbled object was stored")
    deadline = time.time() + 3
    while staged() and time.time() < deadline:
        time.sleep(0.1)
    if staged():
        raise E.Fail("staged files left: %s" % staged())
    # slow but steady (~16 KB/s for ~5 s) is not a slowloris
    body = os.urandom(80000)
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=30)
    s.sendall(signed_put_head("/%s/steady" % B, len(body)))
    for i in range(0, len(body), 4000):
        s.sendall(body[i:i + 4000])
        time.sleep(0.25)
    r = E._read_response(s, "PUT", 30)
    s.close()
    E.eq("a steady 16 KB/s upload", r.status, 200)
    with open(os.path.join(srv.store, B, "steady"), "rb") as f:
        E.same_bytes("stored steady upload", f.read(), body)
    healthy()


t.check("a body dribbled at 2 bytes/s is cut (nothing stored or staged); a steady 16 KB/s "
        "upload is not", slow_body)


def object_size():
    big = os.urandom(MAX_OBJ + 1)
    r = srv.req("PUT", "/%s/too-big" % B, body=big, payload="unsigned")
    E.expect_error("PUT over --max-object-size", r, 400, "EntityTooLarge")
    # curl sends Expect: 100-continue: the refusal comes before the body
    p = os.path.join(srv.tmp, "big.bin")
    with open(p, "wb") as f:
        f.write(big)
    t0 = time.time()
    out = subprocess.run(["curl", "-s", "-o", "-", "-w", "\n%{http_code} %{size_upload}",
                          "--aws-sigv4", "aws:amz:us-east-1:s3", "--user", "%s:%s" % (srv.ak, srv.sk),
                          "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD", "-T", p,
                          "%s/%s/too-big" % (srv.endpoint, B)],
                         capture_output=True, text=True, timeout=60).stdout
    status, uploaded = out.rsplit("\n", 1)[1].split()
    E.eq("curl PUT over the limit", status, "400")
    if "EntityTooLarge" not in out:
        raise E.Fail("no EntityTooLarge in %r" % out[:300])
    if float(uploaded) >= len(big):
        raise E.Fail("curl sent the whole body (%s bytes) before the refusal" % uploaded)
    # unknown length (HTTP chunked): refused once the stream passes the limit
    r = srv.req("PUT", "/%s/too-big" % B, body=big, payload="unsigned", te_chunked=True,
                no_content_length=True)
    E.expect_error("chunked PUT over --max-object-size", r, 400, "EntityTooLarge")
    print("       | curl refused after %s of %d bytes in %.2f s" % (uploaded, len(big), time.time() - t0))
    if os.path.exists(os.path.join(srv.store, B, "too-big")):
        raise E.Fail("an object over the limit was stored")
    # exactly the limit is fine
    r = srv.req("PUT", "/%s/at-limit" % B, body=big[:MAX_OBJ], payload="unsigned")
    E.eq("PUT of exactly --max-object-size", r.status, 200)
    if staged():
        raise E.Fail("staged files left: %s" % staged())


t.check("PUT over --max-object-size: 400 EntityTooLarge (early with 100-continue, mid-stream "
        "when chunked), nothing stored", object_size)


def part_size():
    r = srv.req("POST", "/%s/mp" % B, query="uploads")
    E.eq("CreateMultipartUpload", r.status, 200)
    up = r.body.split(b"<UploadId>")[1].split(b"</UploadId>")[0].decode()
    r = srv.req("PUT", "/%s/mp" % B, query="partNumber=1&uploadId=" + up,
                body=os.urandom(MAX_OBJ + 1), payload="unsigned")
    E.expect_error("UploadPart over the largest part", r, 400, "EntityTooLarge")
    r = srv.req("PUT", "/%s/mp" % B, query="partNumber=10001&uploadId=" + up, body=b"x")
    E.expect_error("UploadPart number 10001", r, 400, "InvalidArgument")
    E.eq("AbortMultipartUpload", srv.req("DELETE", "/%s/mp" % B, query="uploadId=" + up).status, 204)


t.check("UploadPart over the part limit: 400 EntityTooLarge; part number > 10000: "
        "InvalidArgument", part_size)


def complete_over_limit(gw, store, label):
    """Parts of 5 MiB + 2 MiB, each allowed, complete to 7 MiB > --max-object-size (6 MiB):
    Complete is refused with 400 EntityTooLarge before anything is made, and the upload stays
    listed, listable and abortable."""
    s3 = gw.boto3()
    key = "mp-over/%s.bin" % label
    p1, p2 = os.urandom(5 << 20), os.urandom(2 << 20)
    up = s3.create_multipart_upload(Bucket=B, Key=key)["UploadId"]
    parts = [{"PartNumber": n, "ETag": s3.upload_part(Bucket=B, Key=key, UploadId=up,
                                                       PartNumber=n, Body=body)["ETag"]}
             for n, body in ((1, p1), (2, p2))]
    E.expect_client_error("%s: Complete over --max-object-size" % label,
                          s3.complete_multipart_upload, 400, "EntityTooLarge", Bucket=B, Key=key,
                          UploadId=up, MultipartUpload={"Parts": parts})
    E.expect_client_error("%s: HEAD after the refused Complete" % label, s3.head_object, 404,
                          "404", Bucket=B, Key=key)
    if os.path.exists(os.path.join(store, B, key)):
        raise E.Fail("%s: the refused object reached the backend" % label)
    ups = [(u["Key"], u["UploadId"]) for u in s3.list_multipart_uploads(Bucket=B).get("Uploads", [])]
    if (key, up) not in ups:
        raise E.Fail("%s: the upload is no longer listed: %s" % (label, ups))
    lp = s3.list_parts(Bucket=B, Key=key, UploadId=up)
    E.eq("%s: ListParts after the refused Complete" % label,
         [(x["PartNumber"], x["Size"]) for x in lp["Parts"]], [(1, 5 << 20), (2, 2 << 20)])
    s3.abort_multipart_upload(Bucket=B, Key=key, UploadId=up)
    ups = [u["UploadId"] for u in s3.list_multipart_uploads(Bucket=B).get("Uploads", [])]
    if up in ups:
        raise E.Fail("%s: the upload is still listed after Abort" % label)
    E.expect_client_error("%s: HEAD after Abort" % label, s3.head_object, 404, "404",
                          Bucket=B, Key=key)
    # within the limit (a subset of the parts) Complete works
    up = s3.create_multipart_upload(Bucket=B, Key=key)["UploadId"]
    e1 = s3.upload_part(Bucket=B, Key=key, UploadId=up, PartNumber=1, Body=p1)["ETag"]
    s3.upload_part(Bucket=B, Key=key, UploadId=up, PartNumber=3, Body=p2)
    s3.complete_multipart_upload(Bucket=B, Key=key, UploadId=up,
                                 MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": e1}]})
    E.same_bytes("%s: GET of the part-1-only object" % label,
                 s3.get_object(Bucket=B, Key=key)["Body"].read(), p1)


def complete_size():
    complete_over_limit(srv, srv.store, "write-through")
    wb = E.Server(t, extra=["--write-mode", "back", "--max-object-size", str(MAX_OBJ)])
    os.makedirs(os.path.join(wb.store, B))
    wb.start()
    try:
        complete_over_limit(wb, wb.store, "write-back")
    finally:
        wb.stop()
        wb.cleanup()
    # through an S3 backend (ListParts from the upstream), with no limit on the upstream
    up = E.Server(t, port=E.free_port())
    os.makedirs(os.path.join(up.store, B))
    up.start()
    gw = E.Server(t, extra=["--backend", "http://127.0.0.1:%d" % up.port,
                            "--backend-access-key", up.ak, "--backend-secret-key", up.sk,
                            "--max-object-size", str(MAX_OBJ)])
    gw.start()
    try:
        complete_over_limit(gw, up.store, "s3-backend")
    finally:
        gw.stop()
        gw.cleanup()
        up.stop()
        up.cleanup()
    healthy()


t.check("CompleteMultipartUpload over --max-object-size (write-through, write-back, S3 "
        "backend): 400 EntityTooLarge before the object is made, nothing stored, the upload "
        "still listed and abortable", complete_size)


def xml_caps():
    r = srv.req("POST", "/%s/mp2" % B, query="uploads")
    up = r.body.split(b"<UploadId>")[1].split(b"</UploadId>")[0].decode()
    part = b"<Part><PartNumber>1</PartNumber><ETag>\"0123456789abcdef0123456789abcdef\"</ETag></Part>"
    huge = b"<CompleteMultipartUpload>" + part * (3 * (1 << 20) // len(part)) + b"</CompleteMultipartUpload>"
    r = srv.req("POST", "/%s/mp2" % B, query="uploadId=" + up, body=huge)
    E.expect_error("CompleteMultipartUpload with a 3 MiB body", r, 400, "MalformedXML")
    srv.req("DELETE", "/%s/mp2" % B, query="uploadId=" + up)
    for n, size in ((1001, None), (60000, "3 MiB")):
        xml = b"<Delete>" + b"".join(b"<Object><Key>k%06d</Key></Object>" % i for i in range(n)) + b"</Delete>"
        md5 = base64.b64encode(hashlib.md5(xml).digest()).decode()
        r = srv.req("POST", "/" + B, query="delete", body=xml, headers={"Content-MD5": md5})
        E.expect_error("DeleteObjects with %d keys (%d bytes)" % (n, len(xml)), r, 400, "MalformedXML")
    # the ACL documents: PutObjectAcl's is an ACL (MalformedACLError), PutBucketAcl's XML
    acl = b"<AccessControlPolicy>" + b"<Grant></Grant>" * (3 * (1 << 20) // 15) + b"</AccessControlPolicy>"
    r = srv.req("PUT", "/%s/mp2" % B, query="acl", body=acl)
    E.expect_error("PutObjectAcl with a 3 MiB body", r, 400, "MalformedACLError")
    r = srv.req("PUT", "/" + B, query="acl", body=acl)
    E.expect_error("PutBucketAcl with a 3 MiB body", r, 400, "MalformedXML")
    healthy()


t.check("XML bodies over the 2 MiB cap and DeleteObjects over 1,000 keys: 400 MalformedXML "
        "(MalformedACLError for PutObjectAcl's)",
        xml_caps)


def xml_doctype():
    """A DOCTYPE is refused before any entity is declared: an entity naming "keep" (which a
    reader that took it would delete), billion laughs, an external entity; deep nesting too."""
    lol = b'<!ENTITY l0 "lol">' + b"".join(
        b'<!ENTITY l%d "%s">' % (i, b"&l%d;" % (i - 1) * 10) for i in range(1, 10))
    bodies = [
        b'<!DOCTYPE Delete [<!ENTITY k "keep">]><Delete><Object><Key>&k;</Key></Object></Delete>',
        b"<?xml version=\"1.0\"?><!DOCTYPE Delete [" + lol + b"]><Delete><Object><Key>&l9;"
        b"</Key></Object></Delete>",
        b'<!DOCTYPE Delete [<!ENTITY x SYSTEM "file:///etc/passwd">]><Delete><Object><Key>&x;'
        b"</Key></Object></Delete>",
        b"<Delete><Object><Key>a</Key></Object>" + b"<a>" * 100000 + b"</Delete>",
    ]
    for xml in bodies:
        md5 = base64.b64encode(hashlib.md5(xml).digest()).decode()
        r = srv.req("POST", "/" + B, query="delete", body=xml, headers={"Content-MD5": md5})
        E.expect_error("DeleteObjects %r" % xml[:40], r, 400, "MalformedXML")
    healthy()


t.check("XML with a DOCTYPE (entities, billion laughs, XXE) or 100,000 levels: 400 MalformedXML, "
        "nothing deleted", xml_doctype)
srv.stop()
srv.cleanup()
raise SystemExit(t.finish())
