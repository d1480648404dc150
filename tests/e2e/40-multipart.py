"""40-multipart: multipart upload through boto3 client calls — Create, UploadPart,
ListParts (+pagination), UploadPartCopy (whole and ranged), ListMultipartUploads,
Complete (ETag -N, bytes), Complete twice, Abort, EntityTooSmall, InvalidPartOrder (also for
a part number listed twice, as S3 answers it), InvalidPart, NoSuchUpload; failed completes leave no object. Raw Complete XML in the
shapes real clients send (unquoted ETags, &quot;, &#34;, any child order, prolog).
Write-through keeps what it made in the cache: an object from Complete (boto3 upload_fileobj) or
CopyObject is fetched back by a warm-up job, and the first GET after it is a hit."""
import hashlib
import io
import json
import os
import sys
import time
import urllib.request

import e2elib as E

t = E.Suite("40-multipart.py")
srv = E.Server(t).start()
s3 = srv.boto3()
B = "mpb"
MiB = 1024 * 1024
P1 = os.urandom(5 * MiB)
P2 = os.urandom(5 * MiB + 17)
P3 = os.urandom(MiB + 5)
SRC = os.urandom(7 * MiB)
E.setup_or_die(t, srv, lambda: (s3.create_bucket(Bucket=B),
                                s3.put_object(Bucket=B, Key="src/object.bin", Body=SRC)))


def md5q(b):
    return '"%s"' % hashlib.md5(b).hexdigest()


def multipart_etag(parts):
    return '"%s-%d"' % (hashlib.md5(b"".join(hashlib.md5(p).digest() for p in parts)).hexdigest(), len(parts))


def head_status(key):
    try:
        s3.head_object(Bucket=B, Key=key)
        return 200
    except Exception as e:  # noqa: BLE001
        return getattr(e, "response", {}).get("ResponseMetadata", {}).get("HTTPStatusCode")


state = {}


def create_upload_list():
    up = s3.create_multipart_upload(Bucket=B, Key="big/obj.bin", ContentType="application/x-mp",
                                    Metadata={"kind": "multipart"})["UploadId"]
    state["up"] = up
    etags = []
    for n, data in ((1, P1), (2, P2), (3, P3)):
        r = s3.upload_part(Bucket=B, Key="big/obj.bin", UploadId=up, PartNumber=n, Body=data)
        E.eq("UploadPart %d ETag" % n, r["ETag"], md5q(data))
        etags.append(r["ETag"])
    state["etags"] = etags
    lp = s3.list_parts(Bucket=B, Key="big/obj.bin", UploadId=up)
    got = [(p["PartNumber"], p["ETag"], p["Size"]) for p in lp["Parts"]]
    E.eq("ListParts", got, [(1, etags[0], len(P1)), (2, etags[1], len(P2)), (3, etags[2], len(P3))])
    E.eq("ListParts IsTruncated", lp["IsTruncated"], False)
    E.eq("ListParts UploadId", lp["UploadId"], up)


def list_parts_paged():
    up = state["up"]
    lp = s3.list_parts(Bucket=B, Key="big/obj.bin", UploadId=up, MaxParts=2)
    E.eq("page 1 parts", [p["PartNumber"] for p in lp["Parts"]], [1, 2])
    E.eq("page 1 IsTruncated", lp["IsTruncated"], True)
    E.eq("page 1 NextPartNumberMarker", lp["NextPartNumberMarker"], 2)
    lp = s3.list_parts(Bucket=B, Key="big/obj.bin", UploadId=up, MaxParts=2, PartNumberMarker=2)
    E.eq("page 2 parts", [p["PartNumber"] for p in lp["Parts"]], [3])
    E.eq("page 2 IsTruncated", lp["IsTruncated"], False)


def list_uploads():
    other = s3.create_multipart_upload(Bucket=B, Key="other/x.bin")["UploadId"]
    state["other"] = other
    r = s3.list_multipart_uploads(Bucket=B)
    got = sorted((u["Key"], u["UploadId"]) for u in r.get("Uploads", []))
    E.eq("ListMultipartUploads", got, sorted([("big/obj.bin", state["up"]), ("other/x.bin", other)]))
    r = s3.list_multipart_uploads(Bucket=B, Prefix="other/")
    E.eq("ListMultipartUploads Prefix=other/", [u["Key"] for u in r.get("Uploads", [])], ["other/x.bin"])


def upload_part_copy():
    other = state["other"]
    r = s3.upload_part_copy(Bucket=B, Key="other/x.bin", UploadId=other, PartNumber=1,
                            CopySource={"Bucket": B, "Key": "src/object.bin"})
    E.eq("UploadPartCopy whole ETag", r["CopyPartResult"]["ETag"], md5q(SRC))
    r = s3.upload_part_copy(Bucket=B, Key="other/x.bin", UploadId=other, PartNumber=2,
                            CopySource={"Bucket": B, "Key": "src/object.bin"},
                            CopySourceRange="bytes=1000-1999")
    E.eq("UploadPartCopy ranged ETag", r["CopyPartResult"]["ETag"], md5q(SRC[1000:2000]))
    lp = s3.list_parts(Bucket=B, Key="other/x.bin", UploadId=other)
    E.eq("ListParts sizes after copies", [(p["PartNumber"], p["Size"]) for p in lp["Parts"]],
         [(1, len(SRC)), (2, 1000)])
    parts = [{"PartNumber": 1, "ETag": md5q(SRC)}, {"PartNumber": 2, "ETag": md5q(SRC[1000:2000])}]
    r = s3.complete_multipart_upload(Bucket=B, Key="other/x.bin", UploadId=other,
                                     MultipartUpload={"Parts": parts})
    want = SRC + SRC[1000:2000]
    body = s3.get_object(Bucket=B, Key="other/x.bin")["Body"].read()
    E.same_bytes("object from copied parts", body, want)
    # a copy range past the source end is refused
    up = s3.create_multipart_upload(Bucket=B, Key="other/bad.bin")["UploadId"]
    E.expect_client_error("UploadPartCopy range past the end", s3.upload_part_copy, 416, "InvalidRange",
                          Bucket=B, Key="other/bad.bin", UploadId=up, PartNumber=1,
                          CopySource={"Bucket": B, "Key": "src/object.bin"},
                          CopySourceRange="bytes=%d-%d" % (len(SRC), len(SRC) + 10))
    s3.abort_multipart_upload(Bucket=B, Key="other/bad.bin", UploadId=up)


def complete():
    up, etags = state["up"], state["etags"]
    if head_status("big/obj.bin") != 404:
        raise E.Fail("object visible before Complete")
    parts = [{"PartNumber": n + 1, "ETag": e} for n, e in enumerate(etags)]
    r = s3.complete_multipart_upload(Bucket=B, Key="big/obj.bin", UploadId=up, MultipartUpload={"Parts": parts})
    E.eq("Complete ETag", r["ETag"], multipart_etag([P1, P2, P3]))
    g = s3.get_object(Bucket=B, Key="big/obj.bin")
    E.same_bytes("completed object", g["Body"].read(), P1 + P2 + P3)
    E.eq("ContentType from Create", g["ContentType"], "application/x-mp")
    E.eq("Metadata from Create", g["Metadata"], {"kind": "multipart"})
    E.eq("HEAD ETag", s3.head_object(Bucket=B, Key="big/obj.bin")["ETag"], multipart_etag([P1, P2, P3]))
    with open(os.path.join(srv.store, B, "big", "obj.bin"), "rb") as f:
        E.eq("store file sha256", E.sha(f.read()), E.sha(P1 + P2 + P3))
    r = s3.list_multipart_uploads(Bucket=B)
    E.eq("no uploads left", [u["Key"] for u in r.get("Uploads", [])], [])
    # (s3-tests) completing the same upload again succeeds
    r = s3.complete_multipart_upload(Bucket=B, Key="big/obj.bin", UploadId=up, MultipartUpload={"Parts": parts})
    E.eq("second Complete ETag", r["ETag"], multipart_etag([P1, P2, P3]))
    E.same_bytes("object after a second Complete", s3.get_object(Bucket=B, Key="big/obj.bin")["Body"].read(),
                 P1 + P2 + P3)


def subset_of_parts():
    up = s3.create_multipart_upload(Bucket=B, Key="subset.bin")["UploadId"]
    e1 = s3.upload_part(Bucket=B, Key="subset.bin", UploadId=up, PartNumber=1, Body=P1)["ETag"]
    s3.upload_part(Bucket=B, Key="subset.bin", UploadId=up, PartNumber=2, Body=P2)
    e5 = s3.upload_part(Bucket=B, Key="subset.bin", UploadId=up, PartNumber=5, Body=P3)["ETag"]
    # re-upload part 1 with other bytes: the last upload wins
    e1b = s3.upload_part(Bucket=B, Key="subset.bin", UploadId=up, PartNumber=1, Body=P2)["ETag"]
    if e1b == e1:
        raise E.Fail("re-uploaded part has the same ETag")
    # both uploads of the resent part listed (s3-tests test_multipart_resend_first_finishes_last):
    # not ascending, refused as S3 refuses it; the stale one alone is not the part any more
    E.expect_client_error("Complete listing part 1 twice", s3.complete_multipart_upload, 400,
                          "InvalidPartOrder", Bucket=B, Key="subset.bin", UploadId=up,
                          MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": e1},
                                                     {"PartNumber": 1, "ETag": e1b},
                                                     {"PartNumber": 5, "ETag": e5}]})
    E.expect_client_error("Complete with the replaced part's ETag", s3.complete_multipart_upload,
                          400, "InvalidPart", Bucket=B, Key="subset.bin", UploadId=up,
                          MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": e1},
                                                     {"PartNumber": 5, "ETag": e5}]})
    s3.complete_multipart_upload(Bucket=B, Key="subset.bin", UploadId=up, MultipartUpload={"Parts": [
        {"PartNumber": 1, "ETag": e1b}, {"PartNumber": 5, "ETag": e5}]})
    E.same_bytes("parts 1 (re-uploaded) + 5, skipping 2", s3.get_object(Bucket=B, Key="subset.bin")["Body"].read(),
                 P2 + P3)


def abort():
    up = s3.create_multipart_upload(Bucket=B, Key="aborted.bin")["UploadId"]
    s3.upload_part(Bucket=B, Key="aborted.bin", UploadId=up, PartNumber=1, Body=P3)
    r = s3.abort_multipart_upload(Bucket=B, Key="aborted.bin", UploadId=up)
    E.eq("Abort status", r["ResponseMetadata"]["HTTPStatusCode"], 204)
    ups = [u["UploadId"] for u in s3.list_multipart_uploads(Bucket=B).get("Uploads", [])]
    if up in ups:
        raise E.Fail("aborted upload still listed")
    E.expect_client_error("UploadPart after Abort", s3.upload_part, 404, "NoSuchUpload",
                          Bucket=B, Key="aborted.bin", UploadId=up, PartNumber=2, Body=b"x")
    E.expect_client_error("ListParts after Abort", s3.list_parts, 404, "NoSuchUpload",
                          Bucket=B, Key="aborted.bin", UploadId=up)
    E.expect_client_error("Complete after Abort", s3.complete_multipart_upload, 404, "NoSuchUpload",
                          Bucket=B, Key="aborted.bin", UploadId=up,
                          MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": md5q(P3)}]})
    E.eq("no object after Abort", head_status("aborted.bin"), 404)


def entity_too_small():
    up = s3.create_multipart_upload(Bucket=B, Key="small.bin")["UploadId"]
    a = os.urandom(100 * 1024)
    e1 = s3.upload_part(Bucket=B, Key="small.bin", UploadId=up, PartNumber=1, Body=a)["ETag"]
    e2 = s3.upload_part(Bucket=B, Key="small.bin", UploadId=up, PartNumber=2, Body=a)["ETag"]
    E.expect_client_error("Complete with a 100 KiB non-last part", s3.complete_multipart_upload, 400,
                          "EntityTooSmall", Bucket=B, Key="small.bin", UploadId=up,
                          MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": e1}, {"PartNumber": 2, "ETag": e2}]})
    E.eq("no object after EntityTooSmall", head_status("small.bin"), 404)
    # a single small part is fine (the last part may be small)
    s3.complete_multipart_upload(Bucket=B, Key="small.bin", UploadId=up,
                                 MultipartUpload={"Parts": [{"PartNumber": 2, "ETag": e2}]})
    E.same_bytes("single small part", s3.get_object(Bucket=B, Key="small.bin")["Body"].read(), a)


def invalid_part_order_and_part():
    up = s3.create_multipart_upload(Bucket=B, Key="order.bin")["UploadId"]
    e1 = s3.upload_part(Bucket=B, Key="order.bin", UploadId=up, PartNumber=1, Body=P1)["ETag"]
    e2 = s3.upload_part(Bucket=B, Key="order.bin", UploadId=up, PartNumber=2, Body=P3)["ETag"]
    E.expect_client_error("Complete with parts 2,1", s3.complete_multipart_upload, 400, "InvalidPartOrder",
                          Bucket=B, Key="order.bin", UploadId=up,
                          MultipartUpload={"Parts": [{"PartNumber": 2, "ETag": e2}, {"PartNumber": 1, "ETag": e1}]})
    E.expect_client_error("Complete with a wrong ETag", s3.complete_multipart_upload, 400, "InvalidPart",
                          Bucket=B, Key="order.bin", UploadId=up,
                          MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": md5q(b"nope")},
                                                     {"PartNumber": 2, "ETag": e2}]})
    E.expect_client_error("Complete with a part never uploaded", s3.complete_multipart_upload, 400,
                          "InvalidPart", Bucket=B, Key="order.bin", UploadId=up,
                          MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": e1},
                                                     {"PartNumber": 7, "ETag": e2}]})
    E.eq("no object after the failed Completes", head_status("order.bin"), 404)
    # the upload is still usable after those errors
    s3.complete_multipart_upload(Bucket=B, Key="order.bin", UploadId=up, MultipartUpload={"Parts": [
        {"PartNumber": 1, "ETag": e1}, {"PartNumber": 2, "ETag": e2}]})
    E.same_bytes("completed after errors", s3.get_object(Bucket=B, Key="order.bin")["Body"].read(), P1 + P3)


def no_such_upload():
    E.expect_client_error("UploadPart to a made-up upload id", s3.upload_part, 404, "NoSuchUpload",
                          Bucket=B, Key="x.bin", UploadId="no-such-upload-id", PartNumber=1, Body=b"x")
    E.expect_client_error("Complete a made-up upload id", s3.complete_multipart_upload, 404, "NoSuchUpload",
                          Bucket=B, Key="x.bin", UploadId="no-such-upload-id",
                          MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": md5q(b"x")}]})
    up = s3.create_multipart_upload(Bucket=B, Key="pn.bin")["UploadId"]
    for pn in ("0", "10001", "abc"):
        r = srv.req("PUT", "/%s/pn.bin" % B, query="partNumber=%s&uploadId=%s" % (pn, up), body=b"x")
        E.expect_error("UploadPart partNumber=%s" % pn, r, 400, "InvalidArgument")
    s3.abort_multipart_upload(Bucket=B, Key="pn.bin", UploadId=up)


def raw_complete_shapes():
    """The Complete XML variants clients send (CLIENTS.md)."""
    shapes = {
        "awscli": '<CompleteMultipartUpload xmlns="http://s3.amazonaws.com/doc/2006-03-01/">%s</CompleteMultipartUpload>',
        "js": '<?xml version="1.0" encoding="UTF-8"?><CompleteMultipartUpload xmlns="http://s3.amazonaws.com/doc/2006-03-01/">%s</CompleteMultipartUpload>',
        "s3cmd": "<CompleteMultipartUpload>%s</CompleteMultipartUpload>",
        "rclone": '<CompleteMultipartUpload xmlns="http://s3.amazonaws.com/doc/2006-03-01/">%s</CompleteMultipartUpload>',
    }
    part = {
        "awscli": lambda n, e: "<Part><ETag>\"%s\"</ETag><PartNumber>%d</PartNumber></Part>" % (e, n),
        "js": lambda n, e: "<Part><ETag>&quot;%s&quot;</ETag><PartNumber>%d</PartNumber></Part>" % (e, n),
        "s3cmd": lambda n, e: "<Part><PartNumber>%d</PartNumber><ETag>%s</ETag></Part>" % (n, e),
        "rclone": lambda n, e: ("<Part><PartNumber>%d</PartNumber><ETag>&#34;%s&#34;</ETag></Part>" % (n, e)
                                if n % 2 else "<Part><ETag>&#34;%s&#34;</ETag><PartNumber>%d</PartNumber></Part>" % (e, n)),
    }
    for name in shapes:
        key = "shape-%s.bin" % name
        up = s3.create_multipart_upload(Bucket=B, Key=key)["UploadId"]
        s3.upload_part(Bucket=B, Key=key, UploadId=up, PartNumber=1, Body=P1)
        s3.upload_part(Bucket=B, Key=key, UploadId=up, PartNumber=2, Body=P3)
        xml = shapes[name] % "".join(part[name](n, hashlib.md5(d).hexdigest()) for n, d in ((1, P1), (2, P3)))
        r = srv.req("POST", "/%s/%s" % (B, key), query="uploadId=" + up, body=xml.encode())
        if r.status != 200 or b"<CompleteMultipartUploadResult" not in r.body:
            raise E.Fail("%s-style Complete: got %s %r" % (name, r.status, r.body[:300]))
        E.same_bytes("%s-style completed object" % name,
                     s3.get_object(Bucket=B, Key=key)["Body"].read(), P1 + P3)
    # ?uploads= (JS) as well as ?uploads
    r = srv.req("POST", "/%s/js-init.bin" % B, query="uploads=")
    E.eq("POST ?uploads=", r.status, 200)
    if b"<UploadId>" not in r.body:
        raise E.Fail("no UploadId: %r" % r.body[:300])


def warm_jobs_done(nbytes):
    """The finished warm-up jobs that fetched one object of @nbytes."""
    rq = urllib.request.Request(srv.endpoint + "/_/warm",
                                headers={"Authorization": "Bearer " + srv.token})
    with urllib.request.urlopen(rq, timeout=10) as r:
        jobs = json.load(r)["jobs"]
    return [j for j in jobs if j["bucket"] == B and j["state"] == "done"
            and j["objects_total"] == 1 and j["bytes_done"] == nbytes]


def wait_warmed(what, nbytes, count):
    deadline = time.time() + 30
    while len(warm_jobs_done(nbytes)) < count:
        if time.time() > deadline:
            raise E.Fail("%s: no warm-up job fetched it back within 30 s" % what)
        time.sleep(0.1)


def first_get_hit(what, key, body):
    r = s3.get_object(Bucket=B, Key=key)
    E.same_bytes(what, r["Body"].read(), body)
    E.eq("x-cache of the first GET of " + what, r["ResponseMetadata"]["HTTPHeaders"].get("x-cache"),
         "hit")


def fresh_objects_cached():
    from boto3.s3.transfer import TransferConfig
    body = os.urandom(11 * MiB + 3)
    cfg = TransferConfig(multipart_threshold=5 * MiB, multipart_chunksize=5 * MiB)
    s3.upload_fileobj(io.BytesIO(body), B, "fresh/ckpt.pt", Config=cfg)
    E.eq("ETag of the upload", s3.head_object(Bucket=B, Key="fresh/ckpt.pt")["ETag"][-3:], '-3"')
    wait_warmed("the completed object", len(body), 1)
    first_get_hit("the completed object", "fresh/ckpt.pt", body)
    s3.copy_object(Bucket=B, Key="fresh/copy.pt", CopySource={"Bucket": B, "Key": "fresh/ckpt.pt"})
    wait_warmed("the copy", len(body), 2)
    first_get_hit("the copy", "fresh/copy.pt", body)


t.check("Create, UploadPart x3 (ETags = MD5), ListParts", create_upload_list)
t.check("ListParts pagination (MaxParts, PartNumberMarker)", list_parts_paged)
t.check("ListMultipartUploads (all, Prefix)", list_uploads)
t.check("UploadPartCopy whole and ranged, then Complete", upload_part_copy)
t.check("Complete: ETag -3, bytes, metadata; Complete twice", complete)
t.check("Complete a subset of parts, re-uploaded part wins; listed twice: InvalidPartOrder",
        subset_of_parts)
t.check("Abort: 204, unlisted, then NoSuchUpload", abort)
t.check("EntityTooSmall for a small non-last part", entity_too_small)
t.check("InvalidPartOrder, InvalidPart; no object; upload still usable", invalid_part_order_and_part)
t.check("NoSuchUpload for made-up ids; bad partNumber 400", no_such_upload)
t.check("Complete XML shapes of awscli, JS, s3cmd, rclone", raw_complete_shapes)
t.check("write-through: Complete's and CopyObject's objects are fetched back, first GET a hit",
        fresh_objects_cached)
srv.stop()
srv.cleanup()
sys.exit(t.finish())
