"""65-write-back.py — --write-mode back against a real upstream (a second s3cached on a file
backend, stopped and restarted on the same port): checkpoints written with awscli (multipart)
and boto3 while the upstream is down are acknowledged, read back byte for byte as hits, listed
(prefix and delimiter), copied; large bodies (parts of 5 MiB + 3 bytes too) are written
around the page cache; a repeated Complete gets the first one's answer; flush times out (504, CLI exit 1) while it is down; DELETE of a
dirty object then fails 503 and loses nothing; the dirty limit answers 503 SlowDown; once the
upstream is back a flush puts everything there byte for byte and writes succeed again;
kill -9 of the gateway mid-drain (upstream frozen with SIGSTOP), restart, flush: nothing missing,
nothing extra, nothing torn; an overwrite while the key drains cancels the upload of the old
bytes (stuck on a frozen upstream) and leaves the newest bytes upstream;
DELETE with the upstream up removes the object on both sides; every file under the cache dir
(data, index, the uploads' parts, info and done records) is mode 0600."""
import json
import os
import signal
import subprocess
import time
import urllib.request

import e2elib as E

MiB = 1 << 20
B = "ckpt"


def main():
    t = E.Suite("65-write-back.py")
    up = E.Server(t, port=E.free_port()).start()
    gw = E.Server(t, port=E.free_port(), extra=["--backend", "http://127.0.0.1:%d" % up.port,
                            "--backend-access-key", up.ak, "--backend-secret-key", up.sk,
                            "--backend-timeout", "3s", "--write-mode", "back",
                            "--dirty-limit", "300M", "--cache-size", "2G",
                            "--revalidate-after", "0"]).start()
    s3 = gw.boto3()
    s3u = up.boto3()
    files = {}  # key -> bytes, everything acknowledged
    tmp = gw.tmp

    def admin(srv, method, path, body=None):
        rq = urllib.request.Request(srv.endpoint + path, method=method, data=body,
                                    headers={"Authorization": "Bearer " + srv.token})
        try:
            with urllib.request.urlopen(rq, timeout=120) as r:
                return r.status, json.loads(r.read() or b"{}")
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"{}")

    def aws(*args):
        env = dict(os.environ, AWS_ACCESS_KEY_ID=gw.ak, AWS_SECRET_ACCESS_KEY=gw.sk,
                   AWS_DEFAULT_REGION=E.REGION)
        env.pop("AWS_CA_BUNDLE", None)
        return subprocess.run(["/usr/bin/aws", "--endpoint-url", gw.endpoint, *args],
                              env=env, capture_output=True, text=True, timeout=300)

    def upstream_keys(prefix=""):
        out = []
        for page in s3u.get_paginator("list_objects_v2").paginate(Bucket=B, Prefix=prefix):
            out += [o["Key"] for o in page.get("Contents", [])]
        return sorted(out)

    def check_upstream(keys):
        for k in keys:
            E.same_bytes("upstream " + k, s3u.get_object(Bucket=B, Key=k)["Body"].read(), files[k])

    def written_while_down():
        s3.create_bucket(Bucket=B)  # a bucket operation goes to the upstream at once
        up.stop()
        for i in range(3):
            data = os.urandom(48 * MiB + i * 12345)
            path = os.path.join(tmp, "f%d" % i)
            with open(path, "wb") as f:
                f.write(data)
            r = aws("s3", "cp", path, "s3://%s/run7/step%d.pt" % (B, i), "--only-show-errors")
            if r.returncode:
                raise E.Fail("aws s3 cp while the upstream is down: " + r.stderr[-500:])
            files["run7/step%d.pt" % i] = data
        for i in range(5):
            k = "run7/meta/%d.json" % i
            files[k] = os.urandom(1000 + i)
            s3.put_object(Bucket=B, Key=k, Body=files[k])
        s3.copy_object(Bucket=B, Key="run7/latest.pt", CopySource={"Bucket": B, "Key": "run7/step2.pt"})
        files["run7/latest.pt"] = files["run7/step2.pt"]
        for k, v in files.items():
            r = s3.get_object(Bucket=B, Key=k)
            E.same_bytes(k, r["Body"].read(), v)
            E.eq("x-cache of " + k, r["ResponseMetadata"]["HTTPHeaders"].get("x-cache"), "hit")
        st = gw.stats()
        E.eq("dirty objects", st["cache"]["dirty_objects"], len(files))
        E.eq("dirty bytes", st["cache"]["dirty_bytes"], sum(len(v) for v in files.values()))
        for f in ("uploaded_objects", "rate_bps", "oldest_dirty_age_s", "inflight", "errors"):
            if f not in st["drain"]:
                raise E.Fail("stats drain has no " + f)

    def data_files():
        d = os.path.join(gw.cache, "data")
        return {os.path.join(r, f) for r, _, fs in os.walk(d) for f in fs}

    def written_around_page_cache():
        """Large bodies are written around the page cache (O_DIRECT from an aligned buffer),
        also parts whose size is no multiple of a page (5 MiB + 3: every part but the first
        starts mid-page) and bodies that end mid-page: the bytes are right, read back as hits,
        and (where the file system takes O_DIRECT) almost none of them sit in the page cache."""
        before = data_files()
        psize = 5 * MiB + 3
        mp = os.urandom(3 * psize + MiB + 7)
        u = s3.create_multipart_upload(Bucket=B, Key="run7/odd-parts.pt")["UploadId"]
        parts = []
        for n, a in enumerate(range(0, len(mp), psize), 1):
            r = s3.upload_part(Bucket=B, Key="run7/odd-parts.pt", UploadId=u, PartNumber=n,
                               Body=mp[a:a + psize])
            parts.append({"PartNumber": n, "ETag": r["ETag"]})
        s3.complete_multipart_upload(Bucket=B, Key="run7/odd-parts.pt", UploadId=u,
                                     MultipartUpload={"Parts": parts})
        files["run7/odd-parts.pt"] = mp
        files["run7/odd-put.pt"] = os.urandom(9 * MiB + 5)
        s3.put_object(Bucket=B, Key="run7/odd-put.pt", Body=files["run7/odd-put.pt"])
        new = sorted(data_files() - before)
        E.eq("new data files", len(new), 2)
        if E.odirect_ok(gw.cache):
            res, size = E.page_cache_bytes(new)
            E.eq("their bytes", size, len(mp) + len(files["run7/odd-put.pt"]))
            if res > size // 4:
                raise E.Fail("%d of their %d bytes are in the page cache" % (res, size))
        for k in ("run7/odd-parts.pt", "run7/odd-put.pt"):
            r = s3.get_object(Bucket=B, Key=k)
            E.same_bytes(k, r["Body"].read(), files[k])
            E.eq("x-cache of " + k, r["ResponseMetadata"]["HTTPHeaders"].get("x-cache"), "hit")

    def complete_repeated():
        """A Complete sent again (its answer lost) gets the same answer, the object unchanged;
        one with other parts gets InvalidPart; parts out of order get InvalidPartOrder even when
        a small part comes first (the order is checked before sizes, as S3 does)."""
        k = "run7/retried.pt"
        a, b = os.urandom(5 * MiB), os.urandom(MiB + 1)
        u = s3.create_multipart_upload(Bucket=B, Key=k)["UploadId"]
        e1 = s3.upload_part(Bucket=B, Key=k, UploadId=u, PartNumber=1, Body=a)["ETag"]
        e2 = s3.upload_part(Bucket=B, Key=k, UploadId=u, PartNumber=2, Body=b)["ETag"]
        E.expect_client_error("Complete with parts 2,1", s3.complete_multipart_upload, 400,
                              "InvalidPartOrder", Bucket=B, Key=k, UploadId=u,
                              MultipartUpload={"Parts": [{"PartNumber": 2, "ETag": e2},
                                                         {"PartNumber": 1, "ETag": e1}]})
        parts = {"Parts": [{"PartNumber": 1, "ETag": e1}, {"PartNumber": 2, "ETag": e2}]}
        first = s3.complete_multipart_upload(Bucket=B, Key=k, UploadId=u, MultipartUpload=parts)
        files[k] = a + b
        again = s3.complete_multipart_upload(Bucket=B, Key=k, UploadId=u, MultipartUpload=parts)
        E.eq("ETag of the repeated Complete", again["ETag"], first["ETag"])
        E.expect_client_error("a repeat with other parts", s3.complete_multipart_upload, 400,
                              "InvalidPart", Bucket=B, Key=k, UploadId=u,
                              MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": e1}]})
        E.expect_client_error("a repeat for another key", s3.complete_multipart_upload, 404,
                              "NoSuchUpload", Bucket=B, Key="run7/other.pt", UploadId=u,
                              MultipartUpload=parts)
        E.same_bytes("the object after the repeats", s3.get_object(Bucket=B, Key=k)["Body"].read(),
                     files[k])

    def listed_while_down():
        keys = [o["Key"] for o in s3.list_objects_v2(Bucket=B, Prefix="run7/")["Contents"]]
        E.eq("listing while the upstream is down", sorted(keys), sorted(files))
        r = s3.list_objects_v2(Bucket=B, Prefix="run7/", Delimiter="/")
        E.eq("common prefixes", [p["Prefix"] for p in r.get("CommonPrefixes", [])], ["run7/meta/"])
        E.eq("keys beside them", len(r.get("Contents", [])), 7)  # 3 steps, latest, 2 odd, retried
        pages, token, got = 0, None, []
        while True:
            kw = {"ContinuationToken": token} if token else {}
            r = s3.list_objects_v2(Bucket=B, Prefix="run7/", MaxKeys=3, **kw)
            got += [o["Key"] for o in r.get("Contents", [])]
            pages += 1
            if not r["IsTruncated"]:
                break
            token = r["NextContinuationToken"]
        E.eq("paginated listing (3 a page)", got, sorted(files))

    def flush_times_out():
        st, body = admin(gw, "POST", "/_/flush", b'{"timeout_s": 1}')
        E.eq("flush status while down", st, 504)
        E.eq("flushed", body.get("flushed"), False)
        E.eq("remaining objects", body.get("remaining_objects"), len(files))
        r = subprocess.run([E.BIN, "flush", "--endpoint", gw.endpoint, "--admin-token", gw.token,
                            "--timeout", "1s"], capture_output=True, text=True, timeout=60)
        if r.returncode == 0:
            raise E.Fail("s3cached flush exited 0 with the upstream down")

    def delete_while_down():
        E.expect_client_error("DELETE of a dirty object, upstream down", s3.delete_object, 503,
                              "ServiceUnavailable", Bucket=B, Key="run7/meta/0.json")
        E.same_bytes("still readable", s3.get_object(Bucket=B, Key="run7/meta/0.json")["Body"].read(),
                     files["run7/meta/0.json"])

    def dirty_limit():
        E.expect_client_error("PUT past --dirty-limit", s3.put_object, 503, "SlowDown",
                              Bucket=B, Key="big/over", Body=b"x" * (160 * MiB))

    def upstream_back():
        up.start()  # same port
        st, body = admin(gw, "POST", "/_/flush")
        E.eq("flush status", st, 200)
        E.eq("flushed", body.get("flushed"), True)
        E.eq("upstream keys", upstream_keys("run7/"), sorted(files))
        check_upstream(files)
        E.eq("dirty objects after flush", gw.stats()["cache"]["dirty_objects"], 0)
        s3.put_object(Bucket=B, Key="big/over", Body=b"x" * (160 * MiB))
        files["big/over"] = b"x" * (160 * MiB)
        r = subprocess.run([E.BIN, "flush", "--endpoint", gw.endpoint, "--admin-token", gw.token,
                            "s3://%s/big/" % B], capture_output=True, text=True, timeout=120)
        E.eq("s3cached flush exit status", r.returncode, 0)
        check_upstream(["big/over"])

    def kill9_mid_drain():
        os.kill(up.proc.pid, signal.SIGSTOP)  # uploads hang mid-way
        try:
            keys = ["crash/%d" % i for i in range(4)]
            for k in keys:
                files[k] = os.urandom(8 * MiB + 1)
                s3.put_object(Bucket=B, Key=k, Body=files[k])
            deadline = time.time() + 10
            while gw.stats()["drain"]["inflight"] < 1:
                if time.time() > deadline:
                    raise E.Fail("no upload in flight")
                time.sleep(0.05)
            gw.proc.kill()
            gw.proc.wait()
            gw.proc = None
        finally:
            os.kill(up.proc.pid, signal.SIGCONT)
        gw.start()
        st, body = admin(gw, "POST", "/_/flush", b'{"bucket": "ckpt", "prefix": "crash/"}')
        E.eq("flush after the restart", (st, body.get("flushed")), (200, True))
        E.eq("upstream keys (nothing missing, nothing extra)", upstream_keys("crash/"), keys)
        check_upstream(keys)

    def overwrite_while_draining():
        k = "ow/model.pt"
        v1, v2 = os.urandom(8 * MiB), os.urandom(8 * MiB)
        os.kill(up.proc.pid, signal.SIGSTOP)
        try:
            s3.put_object(Bucket=B, Key=k, Body=v1)
            deadline = time.time() + 10
            while gw.stats()["drain"]["inflight"] < 1:
                if time.time() > deadline:
                    raise E.Fail("no upload in flight")
                time.sleep(0.05)
            cancelled = gw.stats()["drain"]["cancelled"]
            s3.put_object(Bucket=B, Key=k, Body=v2)
            # the upload of v1, stuck on the frozen upstream, is stopped, not waited out
            deadline = time.time() + 10
            while gw.stats()["drain"]["cancelled"] < cancelled + 1:
                if time.time() > deadline:
                    raise E.Fail("the superseded upload of v1 was not cancelled")
                time.sleep(0.05)
        finally:
            os.kill(up.proc.pid, signal.SIGCONT)
        files[k] = v2
        E.same_bytes("gateway reads the newest", s3.get_object(Bucket=B, Key=k)["Body"].read(), v2)
        st, body = admin(gw, "POST", "/_/flush")
        E.eq("flush", (st, body.get("flushed")), (200, True))
        check_upstream([k])

    def sigterm_during_flush():
        """Flushes waiting on a frozen upstream, more of them than the gateway has workers (the
        ranks of a job flushing at its end), hold no worker: a PUT meanwhile is answered at
        once. SIGTERM then: every flush is answered 503 ServiceUnavailable XML, the gateway
        exits 0 (it used to abort in libmicrohttpd with a flush's connection suspended), and
        after the restart the object drains."""
        import threading
        gw2 = E.Server(t, port=E.free_port(), extra=[
            "--backend", "http://127.0.0.1:%d" % up.port, "--backend-access-key", up.ak,
            "--backend-secret-key", up.sk, "--backend-timeout", "3s", "--write-mode", "back",
            "--shutdown-timeout", "1s", "--workers", "2"]).start()
        k = "term/last.pt"
        files[k] = os.urandom(3 * MiB)
        got = [{} for _ in range(6)]

        def flush(into):
            rq = urllib.request.Request(gw2.endpoint + "/_/flush", method="POST",
                                        headers={"Authorization": "Bearer " + gw2.token})
            try:
                with urllib.request.urlopen(rq, timeout=30) as r:
                    into["status"], into["body"] = r.status, r.read()
            except urllib.error.HTTPError as e:
                into["status"], into["body"] = e.code, e.read()
            except OSError as e:
                into["status"], into["body"] = None, repr(e).encode()
        os.kill(up.proc.pid, signal.SIGSTOP)
        try:
            c2 = gw2.boto3()
            c2.put_object(Bucket=B, Key=k, Body=files[k])
            ths = [threading.Thread(target=flush, args=(g,)) for g in got]
            for th in ths:
                th.start()

            def flushes_waiting():   # the admin row's requests in flight: 6 flushes + this one
                return sum(c["in_flight"] for c in gw2.stats()["clients"]
                           if c["client"] == "admin-token")
            if not E.wait_until(lambda: flushes_waiting() >= 7):
                raise E.Fail("the 6 flushes are not all waiting after 30 s: %d in flight"
                             % flushes_waiting())
            t0 = time.time()
            c2.put_object(Bucket=B, Key="term/during-flushes", Body=b"x" * 1000)
            took = time.time() - t0
            if took > 5 or any(g for g in got):
                raise E.Fail("a PUT beside 6 waiting flushes (2 workers) took %.1f s; flushes "
                             "answered early: %r" % (took, got))
            files["term/during-flushes"] = b"x" * 1000
            gw2.stop()  # records "server exits 0 on SIGTERM"
            for th in ths:
                th.join(30)
        finally:
            os.kill(up.proc.pid, signal.SIGCONT)
        E.eq("flushes answered while stopping", [g.get("status") for g in got], [503] * 6)
        for g in got:
            if b"<Code>ServiceUnavailable</Code>" not in g.get("body", b""):
                raise E.Fail("flush body while stopping: %r" % g.get("body"))
        gw2.start()
        rq = urllib.request.Request(gw2.endpoint + "/_/flush", method="POST",
                                    headers={"Authorization": "Bearer " + gw2.token})
        with urllib.request.urlopen(rq, timeout=60) as r:
            E.eq("flush after the restart", json.loads(r.read()).get("flushed"), True)
        check_upstream([k, "term/during-flushes"])
        gw2.stop()

    def delete_with_upstream_up():
        k = "run7/meta/1.json"
        s3.put_object(Bucket=B, Key=k, Body=b"soon gone")
        s3.delete_object(Bucket=B, Key=k)
        del files[k]
        admin(gw, "POST", "/_/flush")
        E.expect_client_error("gone from the gateway", s3.get_object, 404, "NoSuchKey", Bucket=B, Key=k)
        E.expect_client_error("gone upstream", s3u.get_object, 404, "NoSuchKey", Bucket=B, Key=k)

    def cache_files_private():
        """What the gateway keeps under --cache-dir (cached data, the index, the write-back
        uploads' parts, info and done records) is its owner's only, whatever the umask."""
        seen, wide = 0, []
        for d, _, names in os.walk(gw.cache):
            for n in names:
                p = os.path.join(d, n)
                st = os.lstat(p)
                if not os.path.isfile(p):
                    continue
                seen += 1
                if st.st_mode & 0o077:
                    wide.append("%o %s" % (st.st_mode & 0o777, os.path.relpath(p, gw.cache)))
        if not any(x.startswith("mpu") for x in os.listdir(gw.cache)):
            raise E.Fail("no write-back upload under the cache dir to look at: %s"
                         % os.listdir(gw.cache))
        if wide:
            raise E.Fail("%d of %d files readable by others: %s" % (len(wide), seen, wide[:8]))

    t.check("written with the upstream down: acknowledged, read back as hits", written_while_down)
    t.check("large bodies go around the page cache (odd part sizes too), read back as hits",
            written_around_page_cache)
    t.check("Complete repeated: same answer; other parts InvalidPart; order before sizes",
            complete_repeated)
    t.check("files under --cache-dir (data, index, uploads) are the owner's only (0600)",
            cache_files_private)
    t.check("listed with the upstream down (prefix, delimiter, pages)", listed_while_down)
    t.check("flush times out while the upstream is down (504, CLI non-zero)", flush_times_out)
    t.check("DELETE of a dirty object with the upstream down: 503, kept", delete_while_down)
    t.check("dirty limit: 503 SlowDown", dirty_limit)
    t.check("upstream back: flush puts everything there byte for byte; writes resume", upstream_back)
    t.check("kill -9 mid-drain, restart, flush: nothing missing, extra or torn", kill9_mid_drain)
    t.check("overwrite while draining: the old upload is cancelled; the upstream ends with the newest bytes", overwrite_while_draining)
    t.check("flushes hold no worker (6 waiting, 2 workers: a PUT answers); SIGTERM: 503 to each, "
            "exit 0, drained after the restart", sigterm_during_flush)
    t.check("DELETE with the upstream up: gone on both sides", delete_with_upstream_up)
    gw.stop()
    up.stop()
    gw.cleanup()
    up.cleanup()
    return t.finish()


if __name__ == "__main__":
    raise SystemExit(main())
