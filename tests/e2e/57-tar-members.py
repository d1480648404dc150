#!/usr/bin/python3
"""57-tar-members: reading one member of a tar shard, GET /bucket/shard.tar?member=NAME, with
real clients: boto3 (the member parameter added before signing, as examples/ does), curl
--aws-sigv4, a SigV4 presigned URL. Every member of a pax shard (long names, UTF-8, a member
past 8 GiB is the unit tests' job) and a GNU shard is compared by hash; headers, Range,
conditionals, HEAD, 404s naming the member, the index built once per shard version (a changed
shard never serves its old offsets), hostile tars (a clean 400, the server alive), .tar.gz
(501), SigV2 refused, tampering a presigned member refused, and member bytes charged to the
client."""
import hashlib
import io
import json
import os
import re
import subprocess
import sys
import tarfile
import urllib.error
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2elib as E  # noqa: E402

t = E.Suite("57-tar-members")
srv = E.Server(t, extra=["--revalidate-after", "0"])
srv.start()
B = "shards"
os.makedirs(os.path.join(srv.store, B))


def sample(i, ext):
    h = hashlib.sha256(b"%d.%s" % (i, ext.encode())).digest()
    n = {"jpg": 3000 + 97 * i, "cls": 3, "json": 40}[ext]
    return (h * (n // 32 + 1))[:n]


def make_shard(path, fmt, n=40, extra=()):
    """A WebDataset-style shard: sample-NNNNN.{jpg,cls,json}, plus @extra (name, bytes)."""
    members = {}
    with tarfile.open(path, "w", format=fmt) as tf:
        for i in range(n):
            for ext in ("jpg", "cls", "json"):
                name = "sample-%05d.%s" % (i, ext)
                members[name] = sample(i, ext)
        for name, data in extra:
            members[name] = data
        for name, data in members.items():
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            ti.mtime = 1700000000
            tf.addfile(ti, io.BytesIO(data))
    return members


LONG = "dir-" + "d" * 120 + "/sample-long-name-" + "x" * 80 + ".jpg"
UTF = "échantillon-ü-€.txt"
PAX = make_shard(os.path.join(srv.store, B, "pax.tar"), tarfile.PAX_FORMAT,
                 extra=[(LONG, b"long name" * 50), (UTF, b"utf-8 name"), ("empty.bin", b"")])
GNU = make_shard(os.path.join(srv.store, B, "gnu.tar"), tarfile.GNU_FORMAT,
                 extra=[(LONG, b"gnu long name" * 7)])

s3 = srv.boto3()


def member_get(key, member, **kw):
    """boto3 GetObject of @member of @key: the query parameter is added before SigV4 signs the
    URL, so the signature covers it like any other."""
    def hook(request, **_):
        u = urllib.parse.urlsplit(request.url)
        q = (u.query + "&" if u.query else "") + "member=" + urllib.parse.quote(member, safe="-_.~")
        request.url = urllib.parse.urlunsplit((u.scheme, u.netloc, u.path, q, u.fragment))

    ev = "before-sign.s3.GetObject"
    s3.meta.events.register(ev, hook)
    try:
        return s3.get_object(Bucket=B, Key=key, **kw)
    finally:
        s3.meta.events.unregister(ev, hook)


def metric(name):
    rq = urllib.request.Request(srv.endpoint + "/_/metrics",
                                headers={"Authorization": "Bearer " + srv.token})
    with urllib.request.urlopen(rq, timeout=10) as r:
        text = r.read().decode()
    m = re.search(r"^%s (\S+)$" % name, text, re.M)
    return int(float(m.group(1))) if m else None


def q(member):
    return "member=" + E.uri_encode(member)


# --- every member, by hash ----------------------------------------------------------------

def all_members_boto3(key, members):
    for name, data in members.items():
        r = member_get(key, name)
        body = r["Body"].read()
        E.eq("%s %s bytes" % (key, name[:40]), E.sha(body), E.sha(data))
        E.eq("%s %s ContentLength" % (key, name[:40]), r["ContentLength"], len(data))


t.check("boto3: every member of a pax shard (long and UTF-8 names) by hash",
        all_members_boto3, "pax.tar", PAX)
t.check("boto3: every member of a GNU long-name shard by hash", all_members_boto3, "gnu.tar", GNU)


def index_built_once():
    E.eq("index builds after two shards read member by member", metric(
        "s3cached_member_index_builds_total"), 2)
    E.eq("member reads counted", metric("s3cached_member_reads_total"), len(PAX) + len(GNU))
    r = srv.req("GET", "/%s/pax.tar" % B, query=q("sample-00003.jpg"))
    E.eq("a second read is a hit", r.h("x-cache"), "hit")


t.check("the index is built once per shard; later reads are hits", index_built_once)


# --- headers, Range, conditionals, HEAD -----------------------------------------------------

def headers():
    r = srv.req("GET", "/%s/pax.tar" % B, query=q("sample-00007.jpg"))
    E.eq("status", r.status, 200)
    E.eq("Content-Type from .jpg", r.h("content-type"), "image/jpeg")
    E.eq("Content-Length", int(r.h("content-length")), len(PAX["sample-00007.jpg"]))
    shard = srv.req("HEAD", "/%s/pax.tar" % B)
    et, set_ = r.h("etag"), shard.h("etag")
    if not et or et == set_:
        raise E.Fail("member ETag %r must exist and differ from the shard's %r" % (et, set_))
    r2 = srv.req("GET", "/%s/pax.tar" % B, query=q("sample-00008.jpg"))
    if r2.h("etag") == et:
        raise E.Fail("two members share an ETag")
    E.eq("same member, same ETag", srv.req("GET", "/%s/pax.tar" % B,
                                           query=q("sample-00007.jpg")).h("etag"), et)
    E.eq(".cls is text/plain", srv.req("GET", "/%s/pax.tar" % B, query=q("sample-00001.cls")).h(
        "content-type"), "text/plain")
    E.eq("no x-amz-meta/checksum of the shard", [k for k in r.headers if k.startswith("x-amz-meta")
                                                 or k.startswith("x-amz-checksum")], [])


t.check("headers: Content-Type by extension, own length, derived ETag", headers)


def ranges():
    data = PAX["sample-00011.jpg"]
    r = srv.req("GET", "/%s/pax.tar" % B, query=q("sample-00011.jpg"),
                headers={"Range": "bytes=10-19"})
    E.eq("206", r.status, 206)
    E.eq("range bytes", r.body, data[10:20])
    E.eq("Content-Range within the member", r.h("content-range"), "bytes 10-19/%d" % len(data))
    r = srv.req("GET", "/%s/pax.tar" % B, query=q("sample-00011.jpg"),
                headers={"Range": "bytes=-5"})
    E.eq("suffix range", r.body, data[-5:])
    r = srv.req("GET", "/%s/pax.tar" % B, query=q("sample-00011.jpg"),
                headers={"Range": "bytes=%d-" % len(data)})
    E.expect_error("a range past the member's end", r, 416, "InvalidRange")
    b = member_get("pax.tar", "sample-00012.jpg", Range="bytes=100-199")["Body"].read()
    E.eq("boto3 Range within the member", b, PAX["sample-00012.jpg"][100:200])


t.check("Range within the member (206, Content-Range, 416 past its end)", ranges)


def conditionals():
    path = "/%s/pax.tar" % B
    m = srv.req("GET", path, query=q("sample-00002.jpg"))
    shard_etag = srv.req("HEAD", path).h("etag")
    for what, et in (("member", m.h("etag")), ("shard", shard_etag)):
        r = srv.req("GET", path, query=q("sample-00002.jpg"), headers={"If-None-Match": et})
        E.eq("If-None-Match the %s ETag -> 304" % what, r.status, 304)
        r = srv.req("GET", path, query=q("sample-00002.jpg"), headers={"If-Match": et})
        E.eq("If-Match the %s ETag -> 200" % what, r.status, 200)
    r = srv.req("GET", path, query=q("sample-00002.jpg"), headers={"If-Match": '"0123"'})
    E.expect_error("If-Match another ETag", r, 412, "PreconditionFailed")
    r = srv.req("GET", path, query=q("sample-00002.jpg"),
                headers={"If-Modified-Since": "Sun, 01 Jan 2040 00:00:00 GMT"})
    E.eq("If-Modified-Since in the future -> 304", r.status, 304)


t.check("conditionals against the shard's ETag or the member's", conditionals)


def head():
    r = srv.req("HEAD", "/%s/pax.tar" % B, query=q(LONG))
    E.eq("HEAD status", r.status, 200)
    E.eq("HEAD Content-Length", int(r.h("content-length")), len(PAX[LONG]))
    r = srv.req("GET", "/%s/pax.tar" % B, query=q("empty.bin"))
    E.eq("an empty member", (r.status, r.body), (200, b""))


t.check("HEAD of a member; an empty member", head)


def not_found():
    r = srv.req("GET", "/%s/pax.tar" % B, query=q("sample-99999.jpg"))
    E.expect_error("no such member", r, 404, "NoSuchKey")
    if b"sample-99999.jpg" not in r.body:
        raise E.Fail("the 404 must name the member: %r" % r.body)
    r = srv.req("GET", "/%s/nope.tar" % B, query=q("a.jpg"))
    E.expect_error("no such shard", r, 404, "NoSuchKey")
    r = srv.req("GET", "/%s/pax.tar" % B, query="member=")
    E.expect_error("an empty member name", r, 400, "InvalidArgument")
    r = srv.req("GET", "/%s/pax.tar" % B, query=q("sample-00001.jpg") + "&partNumber=1")
    E.expect_error("member and partNumber", r, 400, "InvalidRequest")
    try:
        member_get("pax.tar", "sample-77777.jpg")
        raise E.Fail("boto3 read a member that does not exist")
    except s3.exceptions.NoSuchKey:
        pass


t.check("404 NoSuchKey names a missing member; bad parameters 400", not_found)


# --- curl --aws-sigv4, presigned URLs, SigV2 -------------------------------------------------

def curl_sigv4():
    out = os.path.join(srv.tmp, "curl.out")
    name = "sample-00021.jpg"
    p = subprocess.run(["curl", "-sS", "--aws-sigv4", "aws:amz:%s:s3" % E.REGION, "--user",
                        "%s:%s" % (srv.ak, srv.sk), "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD",
                        "-o", out, "-w", "%{http_code}",
                        "%s/%s/pax.tar?member=%s" % (srv.endpoint, B, name)],
                       capture_output=True, timeout=60)
    E.eq("curl status", p.stdout.decode(), "200")
    E.eq("curl bytes", E.sha(open(out, "rb").read()), E.sha(PAX[name]))
    p = subprocess.run(["curl", "-sS", "--aws-sigv4", "aws:amz:%s:s3" % E.REGION, "--user",
                        "%s:%s" % (srv.ak, srv.sk), "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD",
                        "-H", "Range: bytes=0-99", "-o", out, "-w", "%{http_code}",
                        "%s/%s/gnu.tar?member=%s" % (srv.endpoint, B, E.uri_encode(LONG))],
                       capture_output=True, timeout=60)
    E.eq("curl Range status", p.stdout.decode(), "206")
    E.eq("curl Range bytes", open(out, "rb").read(), GNU[LONG][:100])


t.check("curl --aws-sigv4: a member, and a Range of a GNU long-named one", curl_sigv4)


def presigned():
    name = "sample-00005.json"
    url = E.presign(srv.endpoint, "GET", "/%s/pax.tar" % B, srv.ak, srv.sk, query=q(name))
    with urllib.request.urlopen(url, timeout=30) as r:
        E.eq("presigned member bytes", r.read(), PAX[name])
    bad = url.replace(q(name), q("sample-00006.json"))
    try:
        urllib.request.urlopen(bad, timeout=30)
        raise E.Fail("a presigned URL served another member than the one it signed")
    except urllib.error.HTTPError as e:
        E.eq("tampered member -> 403", e.code, 403)
        if b"SignatureDoesNotMatch" not in e.read():
            raise E.Fail("expected SignatureDoesNotMatch")


t.check("a SigV4 presigned URL covers the member; another member is refused", presigned)


def sigv2_refused():
    import base64
    import email.utils
    import hmac
    date = email.utils.formatdate(usegmt=True)
    path = "/%s/pax.tar" % B
    sts = "GET\n\n\n%s\n%s" % (date, path)
    sig = base64.b64encode(hmac.new(srv.sk.encode(), sts.encode(), hashlib.sha1).digest()).decode()
    r = E.request(srv.endpoint, "GET", path, query=q("sample-00001.jpg"), anon=True,
                  headers={"date": date, "authorization": "AWS %s:%s" % (srv.ak, sig)})
    E.expect_error("SigV2 with member", r, 403, "AccessDenied")
    if b"member" not in r.body:
        raise E.Fail("the refusal must name the parameter: %r" % r.body)


t.check("SigV2 does not sign ?member: refused with AccessDenied naming it", sigv2_refused)


# --- versions: a changed shard is indexed anew ------------------------------------------------

def changed_shard():
    path = os.path.join(srv.store, B, "change.tar")
    old = make_shard(path, tarfile.PAX_FORMAT, n=5)
    E.eq("old bytes", member_get("change.tar", "sample-00003.jpg")["Body"].read(),
         old["sample-00003.jpg"])
    builds = metric("s3cached_member_index_builds_total")
    # the same names at other offsets: a bigger first member shifts every later one
    new = make_shard(path + ".new", tarfile.PAX_FORMAT, n=6,
                     extra=[("sample-00000.jpg", b"N" * 70000)])
    os.rename(path + ".new", path)
    got = member_get("change.tar", "sample-00003.jpg")["Body"].read()
    E.eq("the new version's bytes (never the old offsets)", E.sha(got), E.sha(new["sample-00003.jpg"]))
    E.eq("the new version got its own index", metric("s3cached_member_index_builds_total"),
         builds + 1)
    E.eq("its first member", member_get("change.tar", "sample-00000.jpg")["Body"].read(),
         b"N" * 70000)
    # overwritten through the gateway
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        ti = tarfile.TarInfo("sample-00003.jpg")
        ti.size = 11
        tf.addfile(ti, io.BytesIO(b"put through"))
    s3.put_object(Bucket=B, Key="change.tar", Body=buf.getvalue())
    E.eq("after a PUT", member_get("change.tar", "sample-00003.jpg")["Body"].read(), b"put through")


t.check("a shard changed on the backend, or by a PUT, is read with its new index", changed_shard)


def concurrent_cold_reads():
    """16 member reads of a cold shard at once, five times over (a new shard each round): all
    right, and one index build per shard (a read finding another build running waits for it;
    the fill-time build does not run beside one)."""
    import concurrent.futures
    for rnd in range(5):
        key = "race-%d.tar" % rnd
        members = make_shard(os.path.join(srv.store, B, key), tarfile.PAX_FORMAT, n=60)
        names = sorted(members)[:16]
        builds = metric("s3cached_member_index_builds_total")

        def one(name):
            r = srv.req("GET", "/%s/%s" % (B, key), query=q(name))
            return r.status, r.body

        with concurrent.futures.ThreadPoolExecutor(16) as ex:
            got = list(ex.map(one, names))
        for name, (st, body) in zip(names, got):
            E.eq("round %d %s status" % (rnd, name), st, 200)
            if body != members[name]:
                raise E.Fail("round %d %s: wrong bytes" % (rnd, name))
        E.eq("round %d: index builds" % rnd, E.wait_until(
            lambda: metric("s3cached_member_index_builds_total") - builds >= 1 and
            metric("s3cached_member_index_builds_total") - builds, timeout=5), 1)


t.check("16 concurrent member reads of a cold shard, 5 rounds: right bytes, one build each",
        concurrent_cold_reads)


def warmed_shard():
    """A warm-up (written around the page cache) indexes a .tar when it is whole, reading its
    headers around the page cache too: the first member read builds nothing."""
    path = os.path.join(srv.store, B, "warmed.tar")
    members = make_shard(path, tarfile.PAX_FORMAT, n=30)
    builds = metric("s3cached_member_index_builds_total")
    rq = urllib.request.Request(srv.endpoint + "/_/warm", method="POST",
                                data=json.dumps({"bucket": B, "keys": ["warmed.tar"]}).encode(),
                                headers={"Authorization": "Bearer " + srv.token})
    with urllib.request.urlopen(rq, timeout=30) as r:
        E.eq("POST /_/warm", r.status, 202)
    got = E.wait_until(lambda: metric("s3cached_member_index_builds_total") == builds + 1,
                       timeout=30)
    E.eq("the warm-up indexed the shard", got, True)
    for name in ("sample-00000.jpg", "sample-00029.json"):
        E.eq("member %s" % name, member_get("warmed.tar", name)["Body"].read(), members[name])
    E.eq("no build at the first member read", metric("s3cached_member_index_builds_total"),
         builds + 1)


t.check("a warm-up indexes the shards it makes whole; member reads then build nothing",
        warmed_shard)


def changed_between_index_and_read():
    """A shard indexed from its header blocks only (members of 4 blocks), then changed on the
    backend before a member's blocks were fetched: the fill sees another object than the
    version it fills, and the read fails (503, or a body cut short after the old bytes already
    cached) rather than sending the new file's bytes at the old index's offsets; a later read
    gets the new version, with its own index."""
    # --readahead 0: the member's blocks must not be fetched before the shard changes (with
    # read-ahead the index walk caches all of m3, and the whole old member is then served:
    # consistent, but not what this check is about)
    g = E.Server(t, extra=["--block-size", "64K", "--readahead", "0"]).start()
    try:
        os.makedirs(os.path.join(g.store, B))
        path = os.path.join(g.store, B, "big.tar")

        def shard(seed, first):
            with tarfile.open(path + ".tmp", "w", format=tarfile.USTAR_FORMAT) as tf:
                for i in range(6):
                    n = first if i == 0 else 256 << 10
                    data = hashlib.sha256(b"%d-%d" % (seed, i)).digest() * (n // 32)
                    ti = tarfile.TarInfo("m%d.bin" % i)
                    ti.size = len(data)
                    tf.addfile(ti, io.BytesIO(data))
            os.rename(path + ".tmp", path)
            with tarfile.open(path) as tf:
                return {m.name: tf.extractfile(m).read() for m in tf.getmembers()}
        old = shard(1, 256 << 10)
        c = g.boto3()
        r = c.head_object(Bucket=B, Key="big.tar")
        E.eq("size", r["ContentLength"], os.path.getsize(path))
        rr = g.req("HEAD", "/%s/big.tar" % B, query=q("m0.bin"))  # builds the index
        E.eq("HEAD of a member builds the index", rr.status, 200)
        E.eq("content length", int(rr.h("content-length")), len(old["m0.bin"]))
        new = shard(2, 200 << 10)  # every later member moves
        r = g.req("GET", "/%s/big.tar" % B, query=q("m3.bin"))
        # the bytes already cached (the part of m3 in the block that holds its header) may go
        # out before the fill finds the change: then the response is cut short there, as any
        # GET whose fill fails, and what was sent is the old version's
        if r.status == 200:
            if not old["m3.bin"].startswith(r.body) or len(r.body) >= len(old["m3.bin"]):
                raise E.Fail("served %d bytes that are not a cut-short prefix of the old member"
                             % len(r.body))
        else:
            E.expect_error("changed under the read", r, 503, "ServiceUnavailable")
        got = E.wait_until(lambda: (lambda x: x.status == 200 and x.body == new["m3.bin"])(
            g.req("GET", "/%s/big.tar" % B, query=q("m3.bin"))), timeout=20, every=0.5)
        E.eq("later reads: the new version's member", got, True)
    finally:
        g.stop()
        g.cleanup()


t.check("a shard changed between its index and a member's read: never the new bytes at the "
        "old offsets", changed_between_index_and_read)


# --- bad input --------------------------------------------------------------------------------

def hostile():
    d = os.path.join(srv.store, B)
    good = io.BytesIO()
    with tarfile.open(fileobj=good, mode="w", format=tarfile.USTAR_FORMAT) as tf:
        for i in range(3):
            ti = tarfile.TarInfo("m%d.bin" % i)
            ti.size = 5000
            tf.addfile(ti, io.BytesIO(bytes([i]) * 5000))
    g = good.getvalue()
    cases = {
        "junk.tar": os.urandom(20000),
        "cut.tar": g[:512 + 1000],                                   # a size past the end
        "sum.tar": g[:512 * 11 + 3] + b"\x55" + g[512 * 11 + 4:],     # m1: a bad header checksum
    }
    # a pax record claiming a 100 MB length
    ti = tarfile.TarInfo("x")
    ti.type = tarfile.XHDTYPE
    rec = b"99999999 path=aaa\n"
    ti.size = len(rec)
    cases["pax-huge.tar"] = ti.tobuf(tarfile.USTAR_FORMAT) + rec + b"\0" * (512 - len(rec)) + g
    for k, v in cases.items():
        with open(os.path.join(d, k), "wb") as f:
            f.write(v)
    for k in cases:
        r = srv.req("GET", "/%s/%s" % (B, k), query=q("m1.bin"))
        E.expect_error("member of %s" % k, r, 400, "InvalidArchive")
        if k.encode() not in r.body:
            raise E.Fail("the error names the shard: %r" % r.body)
    # a name with ".." is never indexed (tar's own member name, not a path here)
    evil = io.BytesIO()
    with tarfile.open(fileobj=evil, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for name in ("../etc/passwd", "ok.txt", "/abs.txt"):
            ti = tarfile.TarInfo(name)
            ti.size = 2
            tf.addfile(ti, io.BytesIO(b"hi"))
    with open(os.path.join(d, "evil.tar"), "wb") as f:
        f.write(evil.getvalue())
    for name in ("../etc/passwd", "/abs.txt"):
        r = srv.req("GET", "/%s/evil.tar" % B, query=q(name))
        E.expect_error("unsafe name %s" % name, r, 404, "NoSuchKey")
    E.eq("a safe name beside them", srv.req("GET", "/%s/evil.tar" % B, query=q("ok.txt")).body, b"hi")
    r = srv.req("GET", "/%s/pax.tar" % B)
    E.eq("the server still serves whole shards", E.sha(r.body),
         E.sha(open(os.path.join(d, "pax.tar"), "rb").read()))


t.check("hostile tars: 400 InvalidArchive naming the shard; '..' names never served", hostile)


def targz():
    with open(os.path.join(srv.store, B, "c.tar.gz"), "wb") as f:
        f.write(b"\x1f\x8b" + os.urandom(100))
    r = srv.req("GET", "/%s/c.tar.gz" % B, query=q("a.jpg"))
    E.expect_error(".tar.gz member", r, 501, "NotImplemented")


t.check(".tar.gz: 501 NotImplemented (no random access into gzip)", targz)


# --- accounting -------------------------------------------------------------------------------

def accounting():
    def row(st=None):
        for c in (st or srv.stats())["clients"]:
            if c["client"] == srv.ak:
                return c
        return None
    # sampled once the previous check's last answer is charged (a clean-clone run charged its
    # 375 bytes after a sample taken right away)
    before = row(srv.settled_stats())["bytes_out"]
    name = "sample-00039.jpg"
    member_get("pax.tar", name)["Body"].read()
    want = before + len(PAX[name])
    got = E.wait_until(lambda: row()["bytes_out"] >= want and row()["bytes_out"], timeout=5)
    E.eq("member bytes charged to the client", got, want)
    st = srv.stats()
    if "shards" not in st or st["shards"]["member_reads"] < len(PAX):
        raise E.Fail("/_/stats shards: %r" % st.get("shards"))


t.check("member bytes count per client; /_/stats has the shard counters", accounting)

srv.stop()
srv.cleanup()
sys.exit(t.finish())
