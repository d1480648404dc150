"""70-accounting.py — per-client accounting as the people running a cluster read it.
Two keys (one admin, one not) download and upload known byte counts through misses and hits:
/_/stats rows (access key + address) match exactly; an aborted download is charged what went
out, not its Content-Length; /_/metrics passes promtool (or a strict parser) and agrees with
the JSON; admin endpoints refuse the non-admin key; `s3cached stats` shows both clients;
bucket rows only for buckets that exist (made-up names, however many, go to "_other")."""
import json
import os
import re
import socket
import subprocess
import time
import urllib.request

import e2elib as E

here = os.path.dirname(os.path.abspath(__file__))


def main():
    t = E.Suite("70-accounting.py")
    cred_dir = E.Server(t)  # only for a temp dir
    creds = os.path.join(cred_dir.tmp, "creds")
    A, SA, B, SB = "AKADMIN0001", "secretA" * 4, "AKUSER00002", "secretB" * 4
    with open(creds, "w") as f:
        f.write("%s %s admin\n%s %s\n" % (A, SA, B, SB))
    srv = E.Server(t, auth=["--credentials", creds]).start()
    bucket = "acct"
    os.makedirs(os.path.join(srv.store, bucket))
    sizes = {"o1": 1 << 20, "o2": 3 << 20, "o3": 200 * 1024, "huge": 200 << 20}
    for k, n in sizes.items():
        with open(os.path.join(srv.store, bucket, k), "wb") as f:
            f.write(os.urandom(min(n, 4 << 20)) * max(1, n // (4 << 20)) if n > (4 << 20) else os.urandom(n))
    sizes["huge"] = os.path.getsize(os.path.join(srv.store, bucket, "huge"))

    def get(ak, sk, key):
        r = E.request(srv.endpoint, "GET", "/%s/%s" % (bucket, key), ak=ak, sk=sk, timeout=120)
        E.eq("GET %s status" % key, r.status, 200)
        return r

    def row(st, ak):
        for c in st["clients"]:
            if c["client"] == ak and c["addr"] == "127.0.0.1":
                return c
        return None

    def wait_rows(want):
        """Completion callbacks run just after the last byte: poll briefly for the totals."""
        deadline = time.time() + 5
        while True:
            st = srv.stats()
            got = {ak: {k: (row(st, ak) or {}).get(k) for k in w} for ak, w in want.items()}
            if got == want or time.time() > deadline:
                return st, got

    def exact_counts():
        get(A, SA, "o1")                      # miss
        get(A, SA, "o1")                      # hit
        get(A, SA, "o2")                      # miss
        get(B, SB, "o1")                      # hit
        get(B, SB, "o3")                      # miss
        get(B, SB, "o3")                      # hit
        body = os.urandom(100000)
        r = E.request(srv.endpoint, "PUT", "/%s/up" % bucket, body=body, ak=B, sk=SB)
        E.eq("PUT status", r.status, 200)
        want = {
            A: {"requests": 3, "bytes_out": 2 * sizes["o1"] + sizes["o2"], "bytes_in": 0,
                "hits": 1, "misses": 2, "backend_fill_bytes": sizes["o1"] + sizes["o2"]},
            B: {"requests": 4, "bytes_out": sizes["o1"] + 2 * sizes["o3"], "bytes_in": 100000,
                "hits": 2, "misses": 1, "backend_fill_bytes": sizes["o3"]},
        }
        _, got = wait_rows(want)
        E.eq("per-client rows", got, want)

    def aborted(cold):
        st0 = srv.settled_stats(A)
        before = (row(st0, A) or {}).get("bytes_out", 0)
        if not cold:
            get(A, SA, "huge")                # make it a hit (sendfile path)
            st0 = srv.settled_stats(A)        # its 200 MiB charged before the sample
            before = (row(st0, A) or {}).get("bytes_out", 0)
        else:
            rq = urllib.request.Request(srv.endpoint + "/_/cache/%s/huge" % bucket, method="DELETE",
                                        headers={"Authorization": "Bearer " + srv.token})
            urllib.request.urlopen(rq, timeout=10).read()
        hdrs = {"host": "127.0.0.1:%d" % srv.port}
        E.sign_headers("GET", "/%s/huge" % bucket, "", hdrs, "UNSIGNED-PAYLOAD", A, SA)
        s = socket.create_connection(("127.0.0.1", srv.port))
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 256 * 1024)
        req = "GET /%s/huge HTTP/1.1\r\n" % bucket + "".join("%s: %s\r\n" % kv for kv in hdrs.items()) + "\r\n"
        s.sendall(req.encode())
        got = 0
        while got < (4 << 20):
            d = s.recv(1 << 16)
            if not d:
                break
            got += len(d)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        s.close()
        deadline = time.time() + 10
        charged = None
        while time.time() < deadline:
            r = row(srv.stats(), A)
            if r and r["bytes_out"] != before and r["requests"] > (row(st0, A) or {}).get("requests", 0):
                charged = r["bytes_out"] - before
                # the completion of the aborted request is the last to land
                time.sleep(0.5)
                charged = row(srv.stats(), A)["bytes_out"] - before
                break
            time.sleep(0.1)
        if charged is None:
            raise E.Fail("the aborted download was never charged")
        if not (got - (1 << 20) <= charged <= got + (16 << 20)):
            raise E.Fail("aborted after %d bytes received; charged %d (object %d bytes): expected "
                         "what went out (within socket buffers), not the Content-Length"
                         % (got, charged, sizes["huge"]))

    def metrics_agree():
        rq = urllib.request.Request(srv.endpoint + "/_/metrics",
                                    headers={"Authorization": "Bearer " + srv.token})
        with urllib.request.urlopen(rq, timeout=10) as r:
            text = r.read().decode()
            ctype = r.headers.get("Content-Type", "")
        if not ctype.startswith("text/plain; version=0.0.4"):
            raise E.Fail("Content-Type %r" % ctype)
        pc = os.path.join(here, "promcheck.sh")
        p = subprocess.run([pc, "-"], input=text.encode(), capture_output=True, timeout=60)
        if p.returncode == 77:   # no promtool: a strict line check
            for ln in text.splitlines():
                if ln.startswith("#"):
                    if not re.match(r"^# (HELP|TYPE) [a-zA-Z_:][a-zA-Z0-9_:]* .+$", ln):
                        raise E.Fail("bad comment line: %r" % ln)
                elif ln and not re.match(r'^[a-zA-Z_:][a-zA-Z0-9_:]*(\{([a-zA-Z_][a-zA-Z0-9_]*="(\\.|[^"\\])*",?)*\})? [-+0-9.eEInfNa]+$', ln):
                    raise E.Fail("bad sample line: %r" % ln)
        elif p.returncode != 0:
            raise E.Fail("promtool rejected /_/metrics:\n" + p.stdout.decode() + p.stderr.decode())
        st = srv.stats()
        for ak in (A, B):
            m = re.search(r'^s3cached_client_sent_bytes_total\{[^}]*client="%s"[^}]*addr="127.0.0.1"[^}]*\} (\S+)$'
                          % ak, text, re.M) or re.search(
                r'^s3cached_client_sent_bytes_total\{[^}]*addr="127.0.0.1"[^}]*client="%s"[^}]*\} (\S+)$' % ak, text, re.M)
            if not m:
                raise E.Fail("no s3cached_client_sent_bytes_total for %s" % ak)
            E.eq("metrics vs JSON bytes_out for %s" % ak, int(float(m.group(1))), row(st, ak)["bytes_out"])

    def admin_only():
        r = E.request(srv.endpoint, "GET", "/_/stats", ak=B, sk=SB)
        E.expect_error("stats signed by a non-admin key", r, 403, "AccessDenied")
        r = E.request(srv.endpoint, "GET", "/_/metrics", ak=B, sk=SB)
        E.expect_error("metrics signed by a non-admin key", r, 403, "AccessDenied")
        r = E.request(srv.endpoint, "GET", "/_/stats", anon=True)
        E.expect_error("stats without credentials", r, 403, "AccessDenied")
        r = E.request(srv.endpoint, "GET", "/_/stats", headers={"Authorization": "Bearer wrong"}, anon=True)
        E.expect_error("stats with a wrong token", r, 403, "AccessDenied")
        r = E.request(srv.endpoint, "GET", "/_/stats", ak=A, sk=SA)
        E.eq("stats signed by the admin key", r.status, 200)
        json.loads(r.body)

    def cli_table():
        p = subprocess.run([E.BIN, "stats", "--endpoint", srv.endpoint, "--admin-token", srv.token],
                           capture_output=True, timeout=30)
        out = p.stdout.decode()
        E.eq("s3cached stats exit status", p.returncode, 0)
        for ak in (A, B):
            if ak not in out:
                raise E.Fail("s3cached stats lacks %s:\n%s" % (ak, out))
        p = subprocess.run([E.BIN, "stats", "--endpoint", srv.endpoint, "--admin-token", "nope"],
                           capture_output=True, timeout=30)
        if p.returncode == 0:
            raise E.Fail("s3cached stats with a wrong token exited 0")

    def bucket_rows():
        """Only buckets that exist have rows: 260 made-up names from unauthenticated clients
        (and some from a signed one) all go to "_other", and a bucket created afterwards gets
        its own row at once; a deleted bucket's row folds into "_other"."""
        for i in range(260):
            r = E.request(srv.endpoint, "GET", "/junk-%03d/k" % i, anon=True)
            E.eq("unauthenticated GET of junk-%03d" % i, r.status, 403)
        for i in range(5):
            r = E.request(srv.endpoint, "GET", "/ghost-%d/k" % i, ak=B, sk=SB)
            E.expect_error("signed GET of the missing ghost-%d" % i, r, 404, "NoSuchBucket")
        r = E.request(srv.endpoint, "PUT", "/fresh", ak=A, sk=SA)
        E.eq("CreateBucket fresh", r.status, 200)
        r = E.request(srv.endpoint, "PUT", "/fresh/obj", body=b"x" * 1000, ak=B, sk=SB)
        E.eq("PUT fresh/obj", r.status, 200)
        r = E.request(srv.endpoint, "GET", "/fresh/obj", ak=B, sk=SB)
        E.eq("GET fresh/obj", r.status, 200)

        def rows_when(ready):
            """The bucket rows by name once @ready(rows) (completion runs after the last
            byte), or as they are after 5 s."""
            last = {}

            def poll():
                last.update(rows={b["bucket"]: b for b in srv.stats()["buckets"]})
                return ready(last["rows"])
            E.wait_until(poll, timeout=5)
            return last["rows"]
        rows = rows_when(lambda x: x.get("fresh", {}).get("requests") == 3)
        names = sorted(rows)
        bad = [n for n in names if n.startswith(("junk-", "ghost-"))]
        if bad:
            raise E.Fail("made-up bucket names have rows: %s ... (%d)" % (bad[:5], len(bad)))
        E.eq("requests of the real bucket created after them", rows.get("fresh", {}).get("requests"), 3)
        E.eq("bytes_out of the real bucket", rows.get("fresh", {}).get("bytes_out"), 1000)
        if "acct" not in rows:
            raise E.Fail("the bucket the earlier checks read has no row: %s" % names)
        other = rows.get("_other", {}).get("requests", 0)
        if other < 265:
            raise E.Fail("_other counts %d requests, want at least 265" % other)
        for path in ("/fresh/obj", "/fresh"):
            r = E.request(srv.endpoint, "DELETE", path, ak=A, sk=SA)
            E.eq("DELETE %s" % path, r.status, 204)
        rows = rows_when(lambda x: "fresh" not in x)
        if "fresh" in rows:
            raise E.Fail("the deleted bucket keeps its row: %r" % rows["fresh"])
        if rows.get("_other", {}).get("requests", 0) < other + 5:
            raise E.Fail("the deleted bucket's 5 requests did not fold into _other: %r"
                         % rows.get("_other"))

    t.check("two keys through misses and hits: exact requests, bytes, hits, misses", exact_counts)
    t.check("aborted download of a hit (sendfile) is charged what went out", aborted, False)
    t.check("aborted download of a cold object (streamed) is charged what went out", aborted, True)
    t.check("/_/metrics is valid Prometheus text and agrees with /_/stats", metrics_agree)
    t.check("admin endpoints: admin key and token yes, others 403 AccessDenied", admin_only)
    t.check("s3cached stats prints both clients; a wrong token fails", cli_table)
    t.check("bucket rows: only for buckets that exist; made-up names go to _other", bucket_rows)
    srv.stop()
    srv.cleanup()
    cred_dir.cleanup()
    return t.finish()


if __name__ == "__main__":
    raise SystemExit(main())
