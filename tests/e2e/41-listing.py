"""41-listing: ListObjects v1 and v2 — prefix, delimiter (CommonPrefixes), max-keys,
continuation tokens / markers, start-after, encoding-type=url (raw XML and boto3's
decoding of keys with spaces, '+', '%' and UTF-8; v1's top-level Prefix as sent, as S3
answers it), empty results, NoSuchBucket."""
import re
import sys
import urllib.parse

import e2elib as E

t = E.Suite("41-listing.py")
srv = E.Server(t).start()
s3 = srv.boto3()
B = "lst"
KEYS = sorted(["a/1", "a/2", "a/b/3", "a/b/4", "b/5", "c", "d", "sp ace/x", "uni/\u00e9t\u00e9.txt",
               "plus+key", "pct%20key", "z/y/x/w"])


def setup():
    s3.create_bucket(Bucket=B)
    for k in KEYS:
        s3.put_object(Bucket=B, Key=k, Body=k.encode())


E.setup_or_die(t, srv, setup)


def v2(**kw):
    return s3.list_objects_v2(Bucket=B, **kw)


def keys_of(r):
    return [o["Key"] for o in r.get("Contents", [])]


def prefixes_of(r):
    return [p["Prefix"] for p in r.get("CommonPrefixes", [])]


def all_keys():
    r = v2()
    E.eq("all keys, in UTF-8 byte order", keys_of(r), sorted(KEYS, key=lambda k: k.encode()))
    E.eq("KeyCount", r["KeyCount"], len(KEYS))
    E.eq("IsTruncated", r["IsTruncated"], False)
    sizes = {o["Key"]: o["Size"] for o in r["Contents"]}
    E.eq("Size of 'plus+key'", sizes.get("plus+key"), len(b"plus+key"))
    for o in r["Contents"]:
        if not re.fullmatch(r'"[0-9a-f]{32}"', o["ETag"]):
            raise E.Fail("ETag of %s: %r" % (o["Key"], o["ETag"]))


def prefix_delimiter():
    r = v2(Prefix="a/", Delimiter="/")
    E.eq("Prefix=a/ Delimiter=/ keys", keys_of(r), ["a/1", "a/2"])
    E.eq("Prefix=a/ Delimiter=/ CommonPrefixes", prefixes_of(r), ["a/b/"])
    r = v2(Delimiter="/")
    E.eq("root keys", keys_of(r), ["c", "d", "pct%20key", "plus+key"])
    E.eq("root CommonPrefixes", prefixes_of(r), ["a/", "b/", "sp ace/", "uni/", "z/"])
    E.eq("KeyCount counts keys and prefixes", r["KeyCount"], 9)
    r = v2(Prefix="z/", Delimiter="/")
    E.eq("nested prefix", prefixes_of(r), ["z/y/"])
    r = v2(Prefix="a/b")
    E.eq("Prefix=a/b (no delimiter)", keys_of(r), ["a/b/3", "a/b/4"])
    r = v2(Prefix="nothing-here/")
    E.eq("empty listing keys", keys_of(r), [])
    E.eq("empty listing KeyCount", r["KeyCount"], 0)
    r = v2(Prefix="sp ace/")
    E.eq("prefix with a space", keys_of(r), ["sp ace/x"])
    r = v2(Prefix="uni/")
    E.eq("prefix then UTF-8 key", keys_of(r), ["uni/\u00e9t\u00e9.txt"])


def v2_pagination():
    seen = []
    token = None
    pages = 0
    while True:
        kw = {"MaxKeys": 3, "Delimiter": "/"}
        if token:
            kw["ContinuationToken"] = token
        r = v2(**kw)
        pages += 1
        seen += keys_of(r) + prefixes_of(r)
        if len(keys_of(r)) + len(prefixes_of(r)) > 3:
            raise E.Fail("page with more than MaxKeys=3 entries: %r" % r)
        if not r["IsTruncated"]:
            break
        token = r.get("NextContinuationToken")
        if not token:
            raise E.Fail("IsTruncated without NextContinuationToken")
        if pages > 10:
            raise E.Fail("pagination does not end")
    # S3 returns Contents and CommonPrefixes as separate lists; compare as a set, no duplicates
    if len(seen) != len(set(seen)):
        raise E.Fail("an entry appears on two pages: %r" % seen)
    E.eq("entries over all pages", sorted(seen),
         sorted(["a/", "b/", "c", "d", "pct%20key", "plus+key", "sp ace/", "uni/", "z/"]))
    E.eq("pages of 3", pages, 3)
    r = v2(MaxKeys=0)
    E.eq("MaxKeys=0 keys", keys_of(r), [])


def start_after():
    r = v2(StartAfter="a/b/3")
    E.eq("StartAfter=a/b/3 first keys", keys_of(r)[:3], ["a/b/4", "b/5", "c"])
    r = v2(StartAfter="zzz")
    E.eq("StartAfter past the end", keys_of(r), [])
    r = v2(StartAfter="a/", Prefix="a/")
    E.eq("StartAfter=a/ Prefix=a/", keys_of(r), ["a/1", "a/2", "a/b/3", "a/b/4"])


def v1():
    r = s3.list_objects(Bucket=B, MaxKeys=4)
    E.eq("v1 page 1", keys_of(r), sorted(KEYS, key=lambda k: k.encode())[:4])
    E.eq("v1 IsTruncated", r["IsTruncated"], True)
    r2 = s3.list_objects(Bucket=B, MaxKeys=4, Marker=keys_of(r)[-1])
    E.eq("v1 page 2 (Marker)", keys_of(r2), sorted(KEYS, key=lambda k: k.encode())[4:8])
    r = s3.list_objects(Bucket=B, Delimiter="/", MaxKeys=2)
    E.eq("v1 Delimiter MaxKeys=2", prefixes_of(r), ["a/", "b/"])
    if not r["IsTruncated"] or r.get("NextMarker") != "b/":
        raise E.Fail("v1 with a delimiter must return NextMarker 'b/' when truncated: %r"
                     % {k: r.get(k) for k in ("IsTruncated", "NextMarker")})
    r = s3.list_objects(Bucket=B, Delimiter="/", Marker="b/")
    E.eq("v1 after NextMarker b/", keys_of(r) + prefixes_of(r),
         ["c", "d", "pct%20key", "plus+key"] + ["sp ace/", "uni/", "z/"])
    r = s3.list_objects(Bucket=B, Prefix="a/", Delimiter="/")
    E.eq("v1 Prefix+Delimiter", (keys_of(r), prefixes_of(r)), (["a/1", "a/2"], ["a/b/"]))


def encoding_type_raw():
    r = srv.req("GET", "/" + B, query="list-type=2&encoding-type=url")
    E.eq("status", r.status, 200)
    body = r.body.decode("utf-8")
    if "<EncodingType>url</EncodingType>" not in body:
        raise E.Fail("no <EncodingType>url</EncodingType> in %s" % body[:400])
    raw = re.findall(r"<Key>([^<]*)</Key>", body)
    if any(c in k for k in raw for c in (" ", "\u00e9", "+")):
        raise E.Fail("keys not URL-encoded: %r" % raw)
    E.eq("decoded keys", sorted(urllib.parse.unquote(k) for k in raw), sorted(KEYS))
    # without encoding-type: keys verbatim (XML-escaped only)
    r = srv.req("GET", "/" + B, query="list-type=2&prefix=uni%2F")
    E.eq("unencoded UTF-8 key", re.findall(r"<Key>([^<]*)</Key>", r.body.decode()), ["uni/\u00e9t\u00e9.txt"])
    # v1, trailing slash after the bucket (s3cmd, JS SDK)
    r = srv.req("GET", "/%s/" % B, query="delimiter=%2F&prefix=a%2F")
    E.eq("v1 with /bucket/ status", r.status, 200)
    E.eq("v1 with /bucket/ keys", re.findall(r"<Key>([^<]*)</Key>", r.body.decode()), ["a/1", "a/2"])
    if b"<Prefix>a/b/</Prefix>" not in r.body:
        raise E.Fail("CommonPrefixes a/b/ missing: %r" % r.body[:500])


def unreadable_prefix():
    """boto3 sends encoding-type=url on every listing; it decodes the top-level Prefix of v2
    and of ListObjectVersions, not of v1, where S3 answers it as sent (s3-tests
    test_bucket_list_prefix_unreadable)."""
    for pfx, want in (("\x0a", []), ("sp ace/", ["sp ace/x"])):
        r = s3.list_objects(Bucket=B, Prefix=pfx)
        E.eq("v1 Prefix %r echoed" % pfx, r.get("Prefix"), pfx)
        E.eq("v1 Prefix %r keys" % pfx, keys_of(r), want)
        r = s3.list_objects(Bucket=B, Prefix=pfx, Delimiter="/")
        E.eq("v1 Prefix %r with a delimiter echoed" % pfx, r.get("Prefix"), pfx)
        r = v2(Prefix=pfx)
        E.eq("v2 Prefix %r echoed" % pfx, r.get("Prefix"), pfx)
        E.eq("v2 Prefix %r keys" % pfx, keys_of(r), want)
        r = s3.list_object_versions(Bucket=B, Prefix=pfx)
        E.eq("versions Prefix %r echoed" % pfx, r.get("Prefix"), pfx)
    # v1 still encodes the keys, the markers and CommonPrefixes' Prefix
    r = s3.list_objects(Bucket=B, Delimiter="/", Marker="pct%20key")
    E.eq("v1 keys after Marker 'pct%20key'", keys_of(r), ["plus+key"])
    E.eq("v1 Marker decoded", r.get("Marker"), "pct%20key")
    E.eq("v1 CommonPrefixes decoded", prefixes_of(r), ["sp ace/", "uni/", "z/"])
    raw = srv.req("GET", "/" + B, query="encoding-type=url&prefix=sp%20ace%2F")
    if b"<Prefix>sp ace/</Prefix>" not in raw.body or b"<Key>sp%20ace/x</Key>" not in raw.body:
        raise E.Fail("v1 raw: want <Prefix>sp ace/</Prefix> and <Key>sp%%20ace/x</Key>: %r"
                     % raw.body[:600])


def missing_bucket():
    E.expect_client_error("list a missing bucket", s3.list_objects_v2, 404, "NoSuchBucket", Bucket="nobkt")


def bad_args():
    r = srv.req("GET", "/" + B, query="list-type=2&max-keys=-1")
    E.expect_error("max-keys=-1", r, 400, "InvalidArgument")


t.check("all keys, sorted, sizes, ETags", all_keys)
t.check("prefix + delimiter: keys and CommonPrefixes", prefix_delimiter)
t.check("v2 pagination with MaxKeys=3 and a delimiter", v2_pagination)
t.check("StartAfter", start_after)
t.check("v1: MaxKeys, Marker, NextMarker with a delimiter", v1)
t.check("encoding-type=url raw XML; /bucket/ trailing slash", encoding_type_raw)
t.check("encoding-type=url: v1 echoes Prefix as sent, v2 and versions encode it",
        unreadable_prefix)
t.check("NoSuchBucket", missing_bucket)
t.check("max-keys=-1: 400 InvalidArgument", bad_args)
srv.stop()
srv.cleanup()
sys.exit(t.finish())
