#!/usr/bin/python3
"""58-batches: ordered batches, POST /?batch with a signed JSON list of items, answered with one
TAR stream in exactly that order (read with Python's tarfile). Items from two buckets, whole
objects, tar members, ranges; strict mode (the first bad item fails the request before any
byte, naming it) and continue_on_error (marked empty entries, __batch_status__.json); the caps
(items, body size) and malformed bodies; the body bound to the signature (UNSIGNED-PAYLOAD and
a changed body refused); curl --aws-sigv4; counters and per-client bytes; and a cold batch over
the S3 backend, whose origin sends each block of the shard once."""
import hashlib
import io
import json
import os
import random
import subprocess
import sys
import tarfile
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2elib as E  # noqa: E402

t = E.Suite("58-batches")
srv = E.Server(t, extra=["--batch-max-items", "300", "--batch-max-body", "64K"])
srv.start()
B1, B2 = "batch-one", "batch-two"
for b in (B1, B2):
    os.makedirs(os.path.join(srv.store, b))


def blob(name, n):
    h = hashlib.sha256(name.encode()).digest()
    return (h * (n // 32 + 1))[:n]


def make_shard(bucket, key, n, size=3000):
    members = {}
    with tarfile.open(os.path.join(srv.store, bucket, key), "w", format=tarfile.PAX_FORMAT) as tf:
        for i in range(n):
            for ext in ("jpg", "cls"):
                name = "sample-%05d.%s" % (i, ext)
                data = blob(key + name, size + 37 * i if ext == "jpg" else 2)
                members[name] = data
                ti = tarfile.TarInfo(name)
                ti.size = len(data)
                tf.addfile(ti, io.BytesIO(data))
    return members


SH1 = make_shard(B1, "shard-0.tar", 60)
SH2 = make_shard(B2, "shard-1.tar", 40)
OBJS = {}
os.makedirs(os.path.join(srv.store, B1, "obj"))
for i in range(20):
    k = "obj/%02d.bin" % i
    OBJS[k] = blob(k, 1000 + 500 * i)
    with open(os.path.join(srv.store, B1, "obj", "%02d.bin" % i), "wb") as f:
        f.write(OBJS[k])


def batch(items, cont=None, query="batch", path="/", server=None, **kw):
    doc = {"items": items}
    if cont is not None:
        doc["continue_on_error"] = cont
    body = kw.pop("body", None) or json.dumps(doc).encode()
    s = server or srv
    return s.req("POST", path, query=query, body=body, **kw)


def entries(r):
    """The tar stream's entries: [(name, bytes, pax_headers)], and the status document."""
    out, status = [], None
    with tarfile.open(fileobj=io.BytesIO(r.body), mode="r|") as tf:
        for ti in tf:
            data = tf.extractfile(ti).read() if ti.size else b""
            if ti.name == "__batch_status__.json":
                status = json.loads(data)
            else:
                out.append((ti.name, data, dict(ti.pax_headers)))
    return out, status


def want_of(it):
    if it.get("member"):
        data = (SH1 if it["key"] == "shard-0.tar" else SH2)[it["member"]]
    else:
        data = OBJS[it["key"]]
    rg = it.get("range")
    if rg:
        a, b = rg[len("bytes="):].split("-")
        data = data[int(a):int(b) + 1]
    name = "%s/%s%s" % (it["bucket"], it["key"], "/" + it["member"] if it.get("member") else "")
    return name, data


def all_items():
    items = [{"bucket": B1, "key": "shard-0.tar", "member": m} for m in SH1]
    items += [{"bucket": B2, "key": "shard-1.tar", "member": m} for m in SH2]
    items += [{"bucket": B1, "key": k} for k in OBJS]
    items += [{"bucket": B1, "key": "obj/07.bin", "range": "bytes=10-99"},
              {"bucket": B2, "key": "shard-1.tar", "member": "sample-00003.jpg",
               "range": "bytes=5-9"}]
    return items


def ordered():
    items = all_items()
    rnd = random.Random(58)
    for round_ in range(3):  # cold, then hits, then another order
        rnd.shuffle(items)
        r = batch(items)
        E.eq("status (round %d)" % round_, r.status, 200)
        E.eq("content-type", r.h("content-type"), "application/x-tar")
        E.eq("Content-Length is the body", int(r.h("content-length")), len(r.body))
        got, status = entries(r)
        E.eq("entries", len(got), len(items))
        E.eq("no status member in strict mode", status, None)
        for i, (it, (name, data, pax)) in enumerate(zip(items, got)):
            wn, wd = want_of(it)
            E.eq("entry %d name" % i, name, wn)
            if data != wd:
                raise E.Fail("entry %d (%s): %d bytes, want %d (sha %s vs %s)" % (
                    i, name, len(data), len(wd), E.sha(data)[:12], E.sha(wd)[:12]))
        E.eq("x-s3cached-batch-items", r.h("x-s3cached-batch-items"), str(len(items)))


t.check("items from two buckets (members, objects, ranges) come back in exactly their order",
        ordered)


def bucket_level():
    r = batch([{"key": "obj/01.bin"}, {"key": "shard-0.tar", "member": "sample-00001.cls"},
               {"bucket": B2, "key": "shard-1.tar", "member": "sample-00002.cls"}],
              path="/" + B1)
    E.eq("status", r.status, 200)
    got, _ = entries(r)
    E.eq("names", [g[0] for g in got], ["%s/obj/01.bin" % B1,
                                        "%s/shard-0.tar/sample-00001.cls" % B1,
                                        "%s/shard-1.tar/sample-00002.cls" % B2])
    E.eq("bytes", got[0][1], OBJS["obj/01.bin"])


t.check("POST /bucket?batch: the bucket is the items' default", bucket_level)


def strict():
    cases = [
        ([{"bucket": B1, "key": "obj/01.bin"}, {"bucket": B1, "key": "nope.bin"}],
         404, "NoSuchKey", "Item 1 (%s/nope.bin)" % B1),
        ([{"bucket": B1, "key": "shard-0.tar", "member": "nope.jpg"}], 404, "NoSuchKey",
         "has no member nope.jpg"),
        ([{"bucket": "no-such-bucket-x", "key": "a"}], 404, "NoSuchBucket", "Item 0"),
        ([{"bucket": B1, "key": "obj/01.bin", "range": "bytes=99999-"}], 416, "InvalidRange",
         "Item 0"),
    ]
    for items, status, code, needle in cases:
        r = batch(items)
        E.expect_error("strict %s" % code, r, status, code)
        if needle.encode() not in r.body:
            raise E.Fail("the error must name the item (%r): %r" % (needle, r.body[:400]))


t.check("strict: the first bad item fails the request with its S3 error, naming it", strict)


def cont():
    with open(os.path.join(srv.store, B1, "junk.tar"), "wb") as f:
        f.write(os.urandom(5000))
    items = [{"bucket": B1, "key": "obj/02.bin"},
             {"bucket": B1, "key": "nope.bin"},
             {"bucket": B1, "key": "shard-0.tar", "member": "nope.jpg"},
             {"bucket": B1, "key": "junk.tar", "member": "a.jpg"},
             {"bucket": "no-such-bucket-x", "key": "a"},
             {"bucket": B1, "key": "shard-0.tar", "member": "sample-00009.jpg"}]
    r = batch(items, cont=True)
    E.eq("status", r.status, 200)
    E.eq("x-s3cached-batch-errors", r.h("x-s3cached-batch-errors"), "4")
    got, status = entries(r)
    E.eq("entries", len(got), len(items))
    E.eq("first item intact", got[0][1], OBJS["obj/02.bin"])
    E.eq("last item intact", got[5][1], SH1["sample-00009.jpg"])
    want = [None, ("404", "NoSuchKey"), ("404", "NoSuchKey"), ("400", "InvalidArchive"),
            ("404", "NoSuchBucket"), None]
    for i, w in enumerate(want):
        pax = got[i][2]
        if w is None:
            E.eq("item %d unmarked" % i, "S3CACHED.status" in pax, False)
            continue
        E.eq("item %d marked" % i, (pax.get("S3CACHED.status"), pax.get("S3CACHED.code")), w)
        E.eq("item %d empty" % i, got[i][1], b"")
        row = status["items"][i]
        E.eq("status row %d" % i, (str(row["status"]), row["code"]), w)
    E.eq("status rows", len(status["items"]), len(items))
    E.eq("ok row", status["items"][0]["status"], 200)


t.check("continue_on_error: marked empty entries with pax status, __batch_status__.json", cont)


def bad_bodies():
    r = batch([{"bucket": B1, "key": "obj/00.bin"}] * 301)
    E.expect_error("301 items (cap 300)", r, 400, "InvalidRequest")
    if b"at most 300" not in r.body:
        raise E.Fail(r.body)
    big = json.dumps({"items": [{"bucket": B1, "key": "k" * 900}] * 80}).encode()
    r = batch(None, body=big)
    E.expect_error("a body over --batch-max-body", r, 400, "MaxMessageLengthExceeded")
    for what, body in (("not JSON", b"{items: ["), ("no items", b"{}"),
                       ("empty items", b'{"items": []}'),
                       ("unknown field", b'{"items": [{"key": "a"}], "x": 1}'),
                       ("item field", b'{"items": [{"bucket": "%s", "key": "a", "size": 1}]}'
                        % B1.encode()),
                       ("item not an object", b'{"items": [1]}'),
                       ("no bucket at service level", b'{"items": [{"key": "a"}]}')):
        r = batch(None, body=body)
        E.expect_error(what, r, 400, "InvalidRequest")
    r = srv.req("POST", "/", query="batch", body=b"")
    E.expect_error("no body", r, 400, "MissingRequestBodyError")


t.check("caps (items, body size) and malformed bodies: 400 with S3 codes", bad_bodies)


def signed_body():
    body = json.dumps({"items": [{"bucket": B1, "key": "obj/01.bin"}]}).encode()
    r = srv.req("POST", "/", query="batch", body=body, payload="unsigned")
    E.expect_error("UNSIGNED-PAYLOAD", r, 400, "InvalidRequest")
    other = json.dumps({"items": [{"bucket": B1, "key": "obj/02.bin"}]}).encode()
    r = srv.req("POST", "/", query="batch", body=other, payload=E.sha(body))
    E.expect_error("a body other than the signed one", r, 400, "XAmzContentSHA256Mismatch")
    url = E.presign(srv.endpoint, "POST", "/", srv.ak, srv.sk, query="batch")
    rq = urllib.request.Request(url, data=body, method="POST")
    try:
        urllib.request.urlopen(rq, timeout=30)
        raise E.Fail("a presigned batch (unsigned body) was served")
    except urllib.error.HTTPError as e:
        E.eq("presigned batch refused", e.code, 400)


t.check("the signature covers the body: unsigned or changed bodies refused", signed_body)


def curl_sigv4():
    # "?batch=": curl 7.88 signs a bare "?batch" as "batch" in its canonical query, where SigV4
    # (and the gateway) has "batch=": the explicit "=" gives both the same string.
    items = [{"bucket": B2, "key": "shard-1.tar", "member": "sample-00011.jpg"},
             {"bucket": B1, "key": "obj/03.bin"}]
    bf = os.path.join(srv.tmp, "batch.json")
    with open(bf, "w") as f:
        json.dump({"items": items}, f)
    out = os.path.join(srv.tmp, "batch.tar")
    body = open(bf, "rb").read()
    p = subprocess.run(["curl", "-sS", "--aws-sigv4", "aws:amz:%s:s3" % E.REGION, "--user",
                        "%s:%s" % (srv.ak, srv.sk), "-H", "x-amz-content-sha256: " + E.sha(body),
                        "-H", "Content-Type: application/json", "--data-binary", "@" + bf,
                        "-o", out, "-w", "%{http_code}", srv.endpoint + "/?batch="],
                       capture_output=True, timeout=60)
    E.eq("curl status", p.stdout.decode(), "200")
    with tarfile.open(out) as tf:
        E.eq("names", tf.getnames(), ["%s/shard-1.tar/sample-00011.jpg" % B2, "%s/obj/03.bin" % B1])
        E.eq("bytes", tf.extractfile(tf.getmembers()[0]).read(), SH2["sample-00011.jpg"])


t.check("curl --aws-sigv4 --data-binary with the body's SHA-256", curl_sigv4)


def counters():
    def metric(name):
        rq = urllib.request.Request(srv.endpoint + "/_/metrics",
                                    headers={"Authorization": "Bearer " + srv.token})
        import re
        with urllib.request.urlopen(rq, timeout=10) as r:
            m = re.search(r"^%s (\S+)$" % name, r.read().decode(), re.M)
        return int(float(m.group(1)))

    def sent():
        for c in srv.settled_stats()["clients"]:
            if c["client"] == srv.ak:
                return c["bytes_out"]
        return 0
    b0, i0, e0 = (metric("s3cached_batches_total"), metric("s3cached_batch_items_total"),
                  metric("s3cached_batch_item_errors_total"))
    s0 = sent()
    r = batch([{"bucket": B1, "key": "obj/04.bin"}, {"bucket": B1, "key": "gone"}], cont=True)
    E.eq("status", r.status, 200)
    E.eq("batches +1", metric("s3cached_batches_total"), b0 + 1)
    E.eq("items +2", metric("s3cached_batch_items_total"), i0 + 2)
    E.eq("item errors +1", metric("s3cached_batch_item_errors_total"), e0 + 1)
    want = s0 + len(r.body)
    got = E.wait_until(lambda: sent() >= want and sent(), timeout=5)
    E.eq("batch bytes charged to the client", got, want)


t.check("metrics count batches, items, failed items; bytes count per client", counters)


def cold_over_s3():
    """A gateway over an S3 upstream (another s3cached): a batch of every member of a cold
    shard, in random order, with 64 KiB blocks: the origin sends each block once."""
    up = E.Server(t).start()
    os.makedirs(os.path.join(up.store, "origin"))
    members = {}
    with tarfile.open(os.path.join(up.store, "origin", "cold.tar"), "w",
                      format=tarfile.PAX_FORMAT) as tf:
        for i in range(150):
            name = "s-%04d.jpg" % i
            members[name] = blob(name, 20000 + i)
            ti = tarfile.TarInfo(name)
            ti.size = len(members[name])
            tf.addfile(ti, io.BytesIO(members[name]))
    size = os.path.getsize(os.path.join(up.store, "origin", "cold.tar"))
    gw = E.Server(t, extra=["--backend", up.endpoint, "--backend-access-key", up.ak,
                            "--backend-secret-key", up.sk, "--block-size", "64K",
                            "--readahead", "256K"]).start()
    try:
        names = list(members)
        random.Random(7).shuffle(names)
        items = [{"bucket": "origin", "key": "cold.tar", "member": n} for n in names]
        r = batch(items, server=gw)
        E.eq("status", r.status, 200)
        got, _ = entries(r)
        for (name, data, _), n in zip(got, names):
            if data != members[n]:
                raise E.Fail("%s: wrong bytes" % name)

        def sent_to_gw():
            for c in up.settled_stats()["clients"]:
                if c["client"] == up.ak:
                    return c["bytes_out"]
            return None
        # every byte of the shard once (HEADs carry no body); a second batch sends nothing
        E.eq("origin bytes for one cold batch", E.wait_until(
            lambda: sent_to_gw() == size and sent_to_gw(), timeout=5), size)
        r = batch(items[:50], server=gw)
        E.eq("second batch", r.status, 200)
        E.eq("origin bytes after a warm batch", sent_to_gw(), size)
    finally:
        gw.stop()
        gw.cleanup()
        up.stop()
        up.cleanup()


t.check("a cold batch over the S3 backend: the origin sends each block once", cold_over_s3)

srv.stop()
srv.cleanup()
sys.exit(t.finish())
