"""39-admin-replay.py — the CLI's admin requests cannot be replayed with another body. A request
of `s3cached warm s3://replay/tmp/` signed with SigV4 (--access-key/--secret-key) is captured on
the wire (the CLI is pointed at a listener that keeps what it receives) and sent to the gateway:
as captured it is a valid request (202); with the body changed to warm and pin the whole bucket
it is refused (400 XAmzContentSHA256Mismatch: the CLI signs its body's SHA-256), and with the
x-amz-content-sha256 header changed to UNSIGNED-PAYLOAD as well it is refused (403
SignatureDoesNotMatch); nothing gets pinned. A request signed with UNSIGNED-PAYLOAD by the admin
key (what the CLI sent before) is refused on every admin endpoint that takes a body (403
AccessDenied): POST /_/warm, /_/unpin, /_/flush, /_/jobs and PUT /_/policy; the admin token and
GET requests are unaffected. The CLI signed with SigV4 still works: warm, flush, and check (its
/_/stats and its checkpoint's POST /_/flush).
"""
import json
import os
import re
import socket
import subprocess
import threading

import e2elib as E

B = "replay"


def capture_one(argv, env=None):
    """Runs the CLI @argv (with --endpoint of a listener appended) against a listener that keeps
    the first request it receives and answers it 500; returns (head, body) as bytes."""
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(1)
    ls.settimeout(30)
    port = ls.getsockname()[1]
    got = {}

    def serve():
        try:
            c, _ = ls.accept()
        except OSError:
            return
        c.settimeout(30)
        data = b""
        while b"\r\n\r\n" not in data:
            d = c.recv(65536)
            if not d:
                break
            data += d
        head, _, body = data.partition(b"\r\n\r\n")
        m = re.search(rb"\r\ncontent-length: *(\d+)", head, re.I)
        n = int(m.group(1)) if m else 0
        while len(body) < n:
            d = c.recv(65536)
            if not d:
                break
            body += d
        got["head"], got["body"] = head, body
        c.sendall(b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\n"
                  b"Connection: close\r\n\r\n")
        c.close()

    th = threading.Thread(target=serve, daemon=True)
    th.start()
    subprocess.run(argv + ["--endpoint", "http://127.0.0.1:%d" % port], capture_output=True,
                   timeout=60, env=env)
    th.join(30)
    ls.close()
    if "head" not in got:
        raise E.Fail("the CLI sent nothing to the capturing listener")
    return got["head"], got["body"]


def send_raw(srv, head, body):
    """Sends @head (without its final CRLFCRLF) and @body to @srv; returns an E.Resp."""
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=30)
    try:
        s.sendall(head + b"\r\n\r\n" + body)
        return E._read_response(s, "POST", 30)
    finally:
        s.close()


def set_header(head, name, value):
    """@head with header @name's value replaced (case-insensitive); fails when absent."""
    pat = re.compile(rb"(\r\n" + re.escape(name) + rb":) *[^\r]*", re.I)
    if not pat.search(head):
        raise E.Fail("no %s header in the captured request:\n%s" % (name.decode(), head.decode()))
    return pat.sub(lambda m: m.group(1) + b" " + value, head, count=1)


def main():
    t = E.Suite("39-admin-replay")
    srv = E.Server(t)
    for d, n in (("tmp", 3), ("other", 5)):
        os.makedirs(os.path.join(srv.store, B, d))
        for i in range(n):
            with open(os.path.join(srv.store, B, d, "o%d" % i), "wb") as f:
                f.write(os.urandom(4096))
    srv.start()
    sigv4 = ["--access-key", srv.ak, "--secret-key", srv.sk]
    env = {k: v for k, v in os.environ.items()
           if k not in ("S3CACHED_ADMIN_TOKEN", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
                        "S3CACHED_ENDPOINT")}

    def pinned():
        return srv.stats()["cache"]["pinned_objects"]

    def captured_warm_replayed():
        head, body = capture_one([E.BIN, "warm", "s3://%s/tmp/" % B] + sigv4, env)
        if not head.startswith(b"POST /_/warm "):
            raise E.Fail("captured: %r" % head[:200])
        evil = json.dumps({"bucket": B, "prefix": "", "pin": True}).encode()
        evil_head = set_header(head, b"Content-Length", str(len(evil)).encode())
        r = send_raw(srv, evil_head, evil)
        E.expect_error("the captured request with a body pinning the whole bucket", r, 400,
                       "XAmzContentSHA256Mismatch")
        r = send_raw(srv, set_header(evil_head, b"x-amz-content-sha256", b"UNSIGNED-PAYLOAD"),
                     evil)
        E.expect_error("... and x-amz-content-sha256: UNSIGNED-PAYLOAD", r, 403,
                       "SignatureDoesNotMatch")
        E.eq("pinned objects after the replays", pinned(), 0)
        # as captured, it is a request of the admin key's (SigV4 cannot stop a replay of the
        # very same request within its 15 minutes; it can stop any other)
        r = send_raw(srv, head, body)
        E.eq("the captured request as it was: status", r.status, 202)
        job = json.loads(r.body)["job"]
        E.wait_until(lambda: srv.stats()["cache"]["objects"] >= 3, timeout=30)
        E.eq("pinned objects after the warm-up of tmp/ (no --pin)", pinned(), 0)
        st, js = admin_token("GET", "/_/warm/" + job)
        E.eq("the job warmed tmp/", (st, js.get("objects_total")), (200, 3))

    def admin_token(method, path, body=None):
        r = E.request(srv.endpoint, method, path, body=json.dumps(body).encode() if body else b"",
                      headers={"Authorization": "Bearer " + srv.token}, anon=True)
        try:
            return r.status, json.loads(r.body or b"null")
        except ValueError:
            return r.status, r.body

    def unsigned_payload_refused():
        cases = [("POST", "/_/warm", {"bucket": B, "prefix": "", "pin": True}),
                 ("POST", "/_/unpin", {"bucket": B, "prefix": ""}),
                 ("POST", "/_/flush", {"bucket": B}),
                 ("POST", "/_/jobs", {"job": "replayed", "need": "1G"}),
                 ("PUT", "/_/policy", {"bucket": B, "prefix": "", "policy": "lru"})]
        for method, path, body in cases:
            b = json.dumps(body).encode()
            r = srv.req(method, path, body=b, payload="unsigned",
                        headers={"content-type": "application/json"})
            E.expect_error("%s %s signed with UNSIGNED-PAYLOAD" % (method, path), r, 403,
                           "AccessDenied")
            if b"UNSIGNED-PAYLOAD" not in r.body:
                raise E.Fail("the message does not say why: %r" % r.body)
        E.eq("pinned objects", pinned(), 0)
        st, pol = admin_token("GET", "/_/policy")
        if st != 200 or B in json.dumps(pol):
            raise E.Fail("GET /_/policy: %s %s" % (st, pol))
        # the same requests with the body's SHA-256 signed go through
        r = srv.req("POST", "/_/flush", body=json.dumps({"bucket": B}).encode())
        E.eq("POST /_/flush signed with the body's SHA-256", r.status, 200)
        r = srv.req("GET", "/_/stats", payload="unsigned")
        E.eq("GET /_/stats signed with UNSIGNED-PAYLOAD", r.status, 200)
        st, _ = admin_token("POST", "/_/flush", {"bucket": B})
        E.eq("POST /_/flush with the admin token", st, 200)

    def cli_still_works():
        p = subprocess.run([E.BIN, "warm", "--endpoint", srv.endpoint, "s3://%s/other/" % B]
                           + sigv4, capture_output=True, timeout=120, env=env)
        if p.returncode != 0:
            raise E.Fail("warm (SigV4): exit %d\n%s%s" % (p.returncode, p.stdout.decode()[-1000:],
                                                         p.stderr.decode()[-1000:]))
        p = subprocess.run([E.BIN, "flush", "--endpoint", srv.endpoint, "s3://%s" % B] + sigv4,
                           capture_output=True, timeout=120, env=env)
        if p.returncode != 0:
            raise E.Fail("flush (SigV4): exit %d\n%s" % (p.returncode, p.stderr.decode()[-1000:]))
        p = subprocess.run([E.BIN, "check", "--endpoint", srv.endpoint, "s3://%s/tmp/" % B,
                            "--json", "--gpus", "1", "--per-gpu", "1M", "--sample", "1",
                            "--checkpoint", "8M", "--writers", "2"] + sigv4,
                           capture_output=True, timeout=120, env=env)
        try:
            d = json.loads(p.stdout)
        except ValueError:
            raise E.Fail("check: exit %d, not JSON: %s %s" % (p.returncode, p.stdout[-500:],
                                                              p.stderr[-1000:]))
        if d.get("gateway") is None:
            raise E.Fail("check (SigV4) got no gateway counters: %s" % d.get("bound_detail"))
        c = d["checkpoint"]
        if not c["ok"] or not isinstance(c.get("backend_s"), (int, float)):
            raise E.Fail("check's checkpoint (its POST /_/flush, SigV4): %s\n%s"
                         % (c, p.stderr.decode()[-1000:]))

    t.check("a captured `s3cached warm` replayed with another body (or UNSIGNED-PAYLOAD): "
            "refused, nothing pinned", captured_warm_replayed)
    t.check("UNSIGNED-PAYLOAD refused on the admin endpoints that take a body (403 AccessDenied)",
            unsigned_payload_refused)
    t.check("the CLI signed with SigV4: warm, flush, check (stats and checkpoint flush) work",
            cli_still_works)
    srv.stop()
    srv.cleanup()
    return t.finish()


if __name__ == "__main__":
    raise SystemExit(main())
