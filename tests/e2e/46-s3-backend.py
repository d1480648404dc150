"""46-s3-backend.py — s3cached as a caching proxy for an S3 endpoint: the upstream is a second
s3cached on a file backend (its /_/stats counts what reached it). Through the gateway with
boto3: bucket, put, get, range, head, list with pagination and delimiter, copy, multipart,
delete, all compared by SHA-256; awscli cp of 100 MiB both ways; hits never reach the upstream
(its client and backend counters stay still); 16 concurrent cold GETs reach it as one HEAD and
at most one GET per block; upstream connections are reused (ss); a warm-up writes around the page
cache and its objects are then hits; upstream killed mid-transfer (error
to the client, nothing partial cached, x-cache miss on the refetch); upstream down (cached
objects served, misses fail fast); wrong upstream credentials (403 AccessDenied XML to the
client and a log line naming the upstream's 403). Faults of other kinds: 47-s3-backend-faults."""
import concurrent.futures as cf
import os
import signal
import subprocess
import time

import e2elib as E

MiB = 1 << 20


def upstream_conns(port):
    """Local ports of the TCP connections to 127.0.0.1:@port in any state (TIME-WAIT included,
    so connections closed in the last minute count too)."""
    out = subprocess.run(["ss", "-tanH"], capture_output=True, text=True, check=True).stdout
    ports = set()
    for line in out.splitlines():
        f = line.split()
        if len(f) >= 5 and f[4] == "127.0.0.1:%d" % port and f[3].startswith("127.0.0.1:"):
            ports.add(int(f[3].rsplit(":", 1)[1]))
    return ports


def upstream_backend(up):
    b = up.settled_stats()["backend"]
    return b["requests"], b["bytes_read"]


def upstream_out(up, ak):
    """(bytes, requests) the upstream sent key @ak, once none of its requests is in flight (the
    upstream charges an answer just after the gateway had its last byte)."""
    for c in up.settled_stats(ak)["clients"]:
        if c["client"] == ak:
            return c["bytes_out"], c["requests"]
    return 0, 0


def main():
    t = E.Suite("46-s3-backend.py")
    up = E.Server(t).start()
    # the gateway reaches the upstream through a relay, so upstream_dies_midway can hold a
    # transfer mid-body and kill the upstream then, however fast this machine moves bytes
    relay = E.Relay(up.port)
    gw = E.Server(t, extra=["--backend", "http://127.0.0.1:%d" % relay.port,
                            "--backend-access-key", up.ak, "--backend-secret-key", up.sk,
                            "--backend-timeout", "5s", "--block-size", "4M",
                            "--revalidate-after", "never"]).start()
    s3 = gw.boto3()
    B = "proxied"
    data = {}

    def objects():
        s3.create_bucket(Bucket=B)
        if not os.path.isdir(os.path.join(up.store, B)):
            raise E.Fail("the bucket was not created upstream")
        for i, n in enumerate((0, 1, 100000, 3 * MiB + 7)):
            body = os.urandom(n)
            data["o/%d" % i] = body
            s3.put_object(Bucket=B, Key="o/%d" % i, Body=body, ContentType="text/x-test",
                          Metadata={"tag": "v%d" % i})
            with open(os.path.join(up.store, B, "o", str(i)), "rb") as f:
                E.same_bytes("upstream copy of o/%d" % i, f.read(), body)
        for k, body in data.items():
            r = s3.get_object(Bucket=B, Key=k)
            E.same_bytes("GET %s" % k, r["Body"].read(), body)
        h = s3.head_object(Bucket=B, Key="o/2")
        E.eq("content type", h["ContentType"], "text/x-test")
        E.eq("metadata", h["Metadata"], {"tag": "v2"})
        r = s3.get_object(Bucket=B, Key="o/3", Range="bytes=1000-2999")
        E.same_bytes("range", r["Body"].read(), data["o/3"][1000:3000])

    def listing():
        for i in range(7):
            s3.put_object(Bucket=B, Key="l/d%d/x" % (i % 3), Body=b"x")
            s3.put_object(Bucket=B, Key="l/k%d" % i, Body=b"y")
        keys = []
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=B, Prefix="l/", PaginationConfig={"PageSize": 2}):
            keys += [o["Key"] for o in page.get("Contents", [])]
        E.eq("paginated keys", keys, sorted(set(["l/d%d/x" % (i % 3) for i in range(7)] + ["l/k%d" % i for i in range(7)])))
        r = s3.list_objects_v2(Bucket=B, Prefix="l/", Delimiter="/")
        E.eq("common prefixes", [p["Prefix"] for p in r.get("CommonPrefixes", [])], ["l/d0/", "l/d1/", "l/d2/"])
        E.eq("keys with delimiter", [o["Key"] for o in r["Contents"]], ["l/k%d" % i for i in range(7)])

    def copy_multipart_delete():
        s3.copy_object(Bucket=B, Key="c/copy", CopySource={"Bucket": B, "Key": "o/3"})
        E.same_bytes("copy", s3.get_object(Bucket=B, Key="c/copy")["Body"].read(), data["o/3"])
        src = os.path.join(gw.tmp, "mp.bin")
        with open(src, "wb") as f:
            f.write(os.urandom(21 * MiB))
        import boto3.s3.transfer as tr
        s3.upload_file(src, B, "c/mp", Config=tr.TransferConfig(multipart_threshold=8 * MiB, multipart_chunksize=8 * MiB))
        E.eq("multipart upstream bytes", E.sha_file(os.path.join(up.store, B, "c", "mp")), E.sha_file(src))
        E.eq("multipart through the gateway", E.sha(s3.get_object(Bucket=B, Key="c/mp")["Body"].read()), E.sha_file(src))
        s3.delete_object(Bucket=B, Key="c/copy")
        if os.path.exists(os.path.join(up.store, B, "c", "copy")):
            raise E.Fail("DELETE did not reach the upstream")
        st, code, _, _ = E.client_error(s3.get_object, Bucket=B, Key="c/copy")
        E.eq("GET after DELETE", (st, code), (404, "NoSuchKey"))

    def hits_stay_local():
        s3.get_object(Bucket=B, Key="o/3")["Body"].read()
        before, be_before = upstream_out(up, up.ak), upstream_backend(up)
        for _ in range(5):
            r = s3.get_object(Bucket=B, Key="o/3")
            E.same_bytes("hit", r["Body"].read(), data["o/3"])
            E.eq("x-cache", r["ResponseMetadata"]["HTTPHeaders"].get("x-cache"), "hit")
            r = s3.get_object(Bucket=B, Key="o/3", Range="bytes=100-199")
            E.same_bytes("ranged hit", r["Body"].read(), data["o/3"][100:200])
        E.eq("upstream (bytes, requests) during hits", upstream_out(up, up.ak), before)
        E.eq("upstream backend (requests, bytes_read) during hits", upstream_backend(up), be_before)

    def coalesced16():
        body = os.urandom(12 * MiB)
        with open(os.path.join(up.store, B, "cold16"), "wb") as f:
            f.write(body)
        before, n_before = upstream_out(up, up.ak)
        with cf.ThreadPoolExecutor(16) as ex:
            rs = list(ex.map(lambda _: gw.req("GET", "/%s/cold16" % B, timeout=60), range(16)))
        for r in rs:
            E.eq("status", r.status, 200)
            E.same_bytes("body", r.body, body)
        after, n_after = upstream_out(up, up.ak)
        E.eq("bytes the upstream sent for 16 cold GETs", after - before, len(body))
        # one HEAD (metadata) and at most one ranged GET per block (the reader's own and the
        # ranged GETs ahead of it, --fetch-parallel): 12 MiB of 4 MiB blocks
        if n_after - n_before > 1 + 3:
            raise E.Fail("16 cold GETs made %d upstream requests (want a HEAD and at most a GET "
                         "per block)" % (n_after - n_before))
        hows = sorted(r.h("x-cache") for r in rs)
        # the reader whose lookup started the fetch is a miss, or partial when its first block
        # was already on the SSD by the time it began reading (a slow reader: ASan); the others
        # joined the fetch
        if hows.count("miss") + hows.count("partial") != 1 or hows.count("coalesced") != 15:
            raise E.Fail("x-cache of the 16 readers: %r (want one miss or partial, 15 coalesced)"
                         % hows)

    def upstream_dies_midway():
        body = os.urandom(64 * MiB)
        with open(os.path.join(up.store, B, "dies"), "wb") as f:
            f.write(body)
        try:
            with cf.ThreadPoolExecutor(1) as ex:
                # 8 MiB of the body reach the gateway, then the relay holds the rest: the
                # upstream is killed while the transfer is certainly in flight
                relay.hold_after(8 * MiB)
                fut = ex.submit(lambda: gw.req("GET", "/%s/dies" % B, timeout=60))
                relay.wait_held(30)
                up.proc.send_signal(signal.SIGKILL)
                up.proc.wait()
                up.proc = None
                relay.cut()                  # its connections end as the dead upstream's would
                try:
                    r = fut.result()
                    if r.status == 200 and r.body == body:
                        raise E.Fail("the transfer completed although the upstream was killed")
                    print("       . the client got %s and %d of %d bytes" % (r.status, len(r.body), len(body)))
                except E.Fail:
                    raise
                except Exception as e:  # noqa: BLE001 - a short body or reset is the expected outcome
                    print("       . the client got %s" % type(e).__name__)
            # upstream down: a cached object is still served, a miss fails fast and cleanly
            r = gw.req("GET", "/%s/o/3" % B)
            E.eq("cached object while the upstream is down", r.status, 200)
            t0 = time.time()
            r = gw.req("GET", "/%s/never-seen" % B, timeout=30)
            if r.status < 500 or not r.code():
                raise E.Fail("miss with the upstream down: %s %r" % (r.status, r.body[:300]))
            # be_s3 retries a refused connection 3 times (about 2.1 s of back-off, at most
            # 3.2 s); 15 s is far from both that and the 30 s of a hang
            if time.time() - t0 > 15:
                raise E.Fail("the miss took %.1f s" % (time.time() - t0))
        finally:
            relay.cut()                      # a failed check leaves no hold behind
            if up.proc is None:              # and the upstream running for the next checks
                up.start()
                relay.target = up.port       # the gateway knows the upstream by the relay
        r = gw.req("GET", "/%s/dies" % B, timeout=60)
        E.eq("status after the upstream is back", r.status, 200)
        E.same_bytes("body after the upstream is back (nothing partial was kept)", r.body, body)
        # fetched again: whole blocks that landed before the cut may be kept (partial)
        if r.h("x-cache") not in ("miss", "partial"):
            raise E.Fail("x-cache after the upstream is back (fetched again): %r" % r.h("x-cache"))

    def awscli_100m():
        src = os.path.join(gw.tmp, "aws100.bin")
        with open(src, "wb") as f:
            for _ in range(100):
                f.write(os.urandom(MiB))
        env = dict(os.environ, AWS_ACCESS_KEY_ID=gw.ak, AWS_SECRET_ACCESS_KEY=gw.sk,
                   AWS_DEFAULT_REGION=E.REGION, AWS_CONFIG_FILE="/dev/null",
                   AWS_SHARED_CREDENTIALS_FILE="/dev/null")
        aws = ["timeout", "120", "/usr/bin/aws", "--endpoint-url", gw.endpoint]
        subprocess.run(aws + ["s3", "cp", src, "s3://%s/big/aws100" % B], env=env, check=True,
                       stdout=subprocess.DEVNULL)
        E.eq("upstream bytes of the awscli multipart upload",
             E.sha_file(os.path.join(up.store, B, "big", "aws100")), E.sha_file(src))
        back = src + ".back"
        subprocess.run(aws + ["s3", "cp", "s3://%s/big/aws100" % B, back], env=env, check=True,
                       stdout=subprocess.DEVNULL)
        E.eq("awscli download (parallel ranged GETs)", E.sha_file(back), E.sha_file(src))
        os.unlink(back)
        os.unlink(src)

    def connection_reuse():
        for i in range(40):
            with open(os.path.join(up.store, B, "reuse%02d" % i), "wb") as f:
                f.write(b"r%d" % i)
        before = upstream_conns(up.port)
        for i in range(40):                  # 40 cold GETs: a HEAD and a GET upstream each
            r = gw.req("GET", "/%s/reuse%02d" % (B, i))
            E.eq("status", r.status, 200)
            E.eq("body", r.body, b"r%d" % i)
        after = upstream_conns(up.port)
        new = after - before
        print("       . 40 cold GETs (80 upstream requests) used %d new upstream connection(s); "
              "%d to the upstream in all (ss)" % (len(new), len(after)))
        if not after:
            raise E.Fail("ss shows no connection to the upstream port %d at all" % up.port)
        if len(new) > 8:
            raise E.Fail("%d new upstream connections for 80 sequential upstream requests: "
                         "connections are not reused" % len(new))

    def warm_direct():
        """A warm-up through the S3 backend writes around the page cache (O_DIRECT, staged in
        aligned chunks): sizes around the page, the chunk and the block, a reader joining a
        warm run, then every object a hit with its bytes, and no upstream request."""
        import json
        import urllib.request
        sizes = [0, 1, 4095, 4096, 4097, 4 * MiB - 1, 4 * MiB, 4 * MiB + 1, 9 * MiB + 4095,
                 13 * MiB + 777, 24 * MiB]
        keys = ["w/%02d" % i for i in range(len(sizes))]
        bodies = {}
        for k, n in zip(keys, sizes):
            bodies[k] = os.urandom(n)
            os.makedirs(os.path.join(up.store, B, "w"), exist_ok=True)
            with open(os.path.join(up.store, B, k), "wb") as f:
                f.write(bodies[k])

        def admin(method, path, body=None):
            rq = urllib.request.Request(gw.endpoint + path, method=method,
                                        data=json.dumps(body).encode() if body else None,
                                        headers={"Authorization": "Bearer " + gw.token})
            with urllib.request.urlopen(rq, timeout=30) as r:
                return json.loads(r.read())
        job = admin("POST", "/_/warm", {"bucket": B, "keys": keys})["job"]
        joined = gw.req("GET", "/%s/%s" % (B, keys[-1]), timeout=60)  # joins the warm's runs
        E.eq("reader joining a warm run", joined.status, 200)
        E.same_bytes("reader joining a warm run", joined.body, bodies[keys[-1]])
        deadline = time.time() + 60
        while True:
            s = admin("GET", "/_/warm/" + job)
            if s["state"] not in ("queued", "running"):
                break
            if time.time() > deadline:
                raise E.Fail("warm job did not finish: %r" % s)
            time.sleep(0.05)
        E.eq("warm job", (s["state"], s["objects_done"]), ("done", len(keys)))
        if E.odirect_ok(gw.cache):
            # the first 3 objects are under a page (buffered tails); w/10 was read while warming
            files = [os.path.join(d, f) for d, _, fs in os.walk(os.path.join(gw.cache, "data"))
                     for f in fs if os.path.getsize(os.path.join(d, f)) in sizes[3:-1]]
            res, size = E.page_cache_bytes(files)
            if size < sum(sizes[3:-1]) or res > size // 4:
                raise E.Fail("after the warm-up %d of %d bytes of its data files are in the page "
                             "cache" % (res, size))
        before = upstream_out(up, up.ak)
        for k in keys:
            r = gw.req("GET", "/%s/%s" % (B, k), timeout=60)
            E.eq("x-cache of warmed %s" % k, r.h("x-cache"), "hit")
            E.same_bytes("warmed %s" % k, r.body, bodies[k])
        E.eq("upstream (bytes, requests) reading the warmed objects", upstream_out(up, up.ak), before)

    def wrong_credentials():
        bad = E.Server(t, extra=["--backend", "http://127.0.0.1:%d" % up.port,
                                 "--backend-access-key", up.ak, "--backend-secret-key", "wrong" * 8,
                                 "--backend-timeout", "5s"]).start()
        try:
            r = bad.req("GET", "/%s/o/2" % B)
            if r.status < 400 or not r.code() or not r.request_id_ok():
                raise E.Fail("GET with wrong upstream credentials: %s %r" % (r.status, r.body[:300]))
            print("       . wrong upstream credentials: the client gets %s %s" % (r.status, r.code()))
            log = open(bad.log, errors="replace").read()
            r = bad.req("GET", "/%s" % B, query="list-type=2")
            if r.status != 403 or r.code() != "AccessDenied":
                raise E.Fail("listing with wrong upstream credentials: %s %r" % (r.status, r.body[:300]))
            import re
            # the lookup of a cold GET is a ranged GET (--cold-get), else a HEAD
            if not re.search(r"upstream .* rejected the gateway's request: (HEAD|GET) \S+/o/2: 403",
                             log):
                raise E.Fail("no log line names the upstream's rejection of the lookup:\n"
                             + bad.log_tail(10))
            log = open(bad.log, errors="replace").read()
            if not re.search(r"rejected the gateway's request: GET .* 403 SignatureDoesNotMatch", log):
                raise E.Fail("no log line names the upstream's rejection:\n" + bad.log_tail(10))
        finally:
            bad.stop()
            bad.cleanup()

    t.check("objects through the S3 backend: put/get/head/range, metadata, SHA-256", objects)
    t.check("listing through the S3 backend: pagination and delimiter", listing)
    t.check("copy, multipart (boto3 upload_file), delete through the S3 backend", copy_multipart_delete)
    t.check("hits never reach the upstream", hits_stay_local)
    t.check("16 concurrent cold GETs: the upstream sends the object once", coalesced16)
    t.check("awscli cp of 100 MiB up (multipart) and down (ranged GETs) through the S3 backend", awscli_100m)
    t.check("upstream connections are reused (ss: a handful for 80 requests)", connection_reuse)
    t.check("a warm-up through the S3 backend goes around the page cache; warmed objects are hits, byte for byte", warm_direct)
    t.check("upstream killed mid-transfer: client error, nothing partial cached; down: hits served, misses fail fast", upstream_dies_midway)
    t.check("wrong upstream credentials: S3 error to the client and a log line", wrong_credentials)
    gw.stop()
    up.stop()
    relay.close()
    gw.cleanup()
    up.cleanup()
    return t.finish()


if __name__ == "__main__":
    raise SystemExit(main())
