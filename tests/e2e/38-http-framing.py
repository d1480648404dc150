"""38-http-framing.py — a request whose body's end is in doubt is refused, and nothing after it
on the connection is read (RFC 9112 6.1-6.3; request smuggling through a proxy in front): two
Content-Length fields, two Transfer-Encoding fields, a Transfer-Encoding other than exactly
"chunked" ("chunked, identity", "identity", "gzip, chunked"), Transfer-Encoding with
Content-Length, Transfer-Encoding in an HTTP/1.0 request, and a bare LF (no CR) ending a chunk's
size line, its data, the last chunk or the trailer section. Each is sent on a raw socket with a
second request pipelined behind it: the first gets 400 (Connection: close), the second no answer
at all (the connection is closed), and nothing is stored. The 400 is an S3 XML BadRequest where
s3cached answers it; libmicrohttpd (1.0.1, client discipline level 1: http/server.c) answers a
Transfer-Encoding other than "chunked", Transfer-Encoding with Content-Length and a malformed
chunked body itself, before s3cached sees the request, with its own short HTML body.
Well-formed requests sent the same way get both answers (the controls).
"""
import os
import re
import socket
import time

import e2elib as E

B = "framing"
SECOND = b"GET /_/health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"


def exchange(srv, data, wait=5.0):
    """Sends @data on a fresh connection; returns (bytes received, closed by the server)."""
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=wait)
    out, closed = b"", False
    deadline = time.time() + wait
    try:
        s.sendall(data)
        while time.time() < deadline:
            try:
                d = s.recv(65536)
            except socket.timeout:
                break
            except ConnectionResetError:
                closed = True
                break
            if not d:
                closed = True
                break
            out += d
            # the control's two answers are in: no need to wait for the idle timeout
            if out.count(b"HTTP/1.1 ") >= 2 and out.rstrip().endswith(b"ok"):
                break
    finally:
        s.close()
    return out, closed


def statuses(raw):
    return [int(m) for m in re.findall(rb"HTTP/1\.1 (\d{3}) ", raw)]


def main():
    t = E.Suite("38-http-framing")
    srv = E.Server(t, auth=["--anonymous"])
    os.makedirs(os.path.join(srv.store, B))
    srv.start()

    def refused(head, body, key, xml=True):
        """@xml: s3cached answers (an S3 XML BadRequest); else libmicrohttpd may answer first."""
        raw, closed = exchange(srv, head + body + SECOND)
        st = statuses(raw)
        if st != [400]:
            raise E.Fail("expected exactly one answer, 400; got statuses %s:\n%r" % (st, raw[:600]))
        code = re.search(rb"<Error><Code>([^<]*)</Code>", raw)
        if xml or code:
            E.eq("<Code>", code.group(1).decode() if code else None, "BadRequest")
        if not re.search(rb"\r\nConnection: close\r\n", raw, re.I):
            raise E.Fail("the 400 does not say Connection: close:\n%r" % raw[:600])
        if not closed:
            raise E.Fail("the connection stayed open after the 400")
        if b"\r\n\r\nok" in raw:
            raise E.Fail("the pipelined request was answered")
        path = os.path.join(srv.store, B, key)
        if os.path.exists(path):
            raise E.Fail("%s was stored (%d bytes)" % (path, os.path.getsize(path)))

    def put_head(key, *fields):
        return ("PUT /%s/%s HTTP/1.1\r\nHost: 127.0.0.1\r\n" % (B, key)
                + "".join(f + "\r\n" for f in fields) + "\r\n").encode()

    chunked = b"5\r\nhello\r\n0\r\n\r\n"
    # (name, key, fields, body, answered by s3cached: S3 XML)
    cases = [
        ("two Content-Length fields (5, then 0)", "cl2",
         ["Content-Length: 5", "Content-Length: 0"], b"hello", True),
        ("two equal Content-Length fields", "cl2eq",
         ["Content-Length: 5", "Content-Length: 5"], b"hello", True),
        ("Transfer-Encoding: chunked, identity", "te-ci",
         ["Transfer-Encoding: chunked, identity"], chunked, False),
        ("Transfer-Encoding: identity with Content-Length", "te-id",
         ["Transfer-Encoding: identity", "Content-Length: 5"], b"hello", False),
        ("Transfer-Encoding: gzip, chunked", "te-gz", ["Transfer-Encoding: gzip, chunked"],
         chunked, False),
        ("Transfer-Encoding: chunked and Content-Length", "te-cl",
         ["Content-Length: 3", "Transfer-Encoding: chunked"], chunked, False),
        ("two Transfer-Encoding: chunked fields", "te2",
         ["Transfer-Encoding: chunked", "Transfer-Encoding: chunked"], chunked, True),
    ]
    # a bare LF where RFC 9112 7.1 has CRLF: a proxy that does not end the line there would
    # take the bytes after it for something else than the server does
    te = "Transfer-Encoding: chunked"
    cases += [
        ("bare LF ending a chunk-size line", "lf-size", [te], b"5\nhello\r\n0\r\n\r\n", False),
        ("bare LF after a chunk's data", "lf-data", [te], b"5\r\nhello\n0\r\n\r\n", False),
        ("bare LF ending the last chunk", "lf-last", [te], b"5\r\nhello\r\n0\n\r\n", False),
        ("bare LF ending the trailer section", "lf-trail", [te], b"5\r\nhello\r\n0\r\n\n",
         False),
        ("bare LF in every chunk line", "lf", [te], b"5\nhello\n0\n\n", False),
        ("LF CR after a chunk's data", "lfcr", [te], b"5\r\nhello\n\r0\r\n\r\n", False),
    ]
    for name, key, fields, body, xml in cases:
        t.check("%s: 400%s, connection closed, pipelined request not answered"
                % (name, " BadRequest" if xml else ""), refused, put_head(key, *fields), body,
                key, xml)
    t.check("HTTP/1.0 request with Transfer-Encoding: chunked: 400, connection closed, "
            "pipelined request not answered", refused,
            b"PUT /%s/te10 HTTP/1.0\r\nHost: 127.0.0.1\r\nConnection: keep-alive\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n" % B.encode(), chunked, "te10")
    # the same on a GET: a body is not needed for the framing to be in doubt
    t.check("GET with two Content-Length fields: 400, pipelined request not answered", refused,
            b"GET /%s/x HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n"
            b"Content-Length: 44\r\n\r\n" % B.encode(), b"", "x")

    def accepted(head, body, key, want):
        raw, _ = exchange(srv, head + body + SECOND)
        st = statuses(raw)
        if st != [200, 200] or not raw.rstrip().endswith(b"ok"):
            raise E.Fail("expected two answers, 200 and the health 'ok'; got %s:\n%r"
                         % (st, raw[:600]))
        with open(os.path.join(srv.store, B, key), "rb") as f:
            E.eq("stored bytes", f.read(), want)

    t.check("control: Content-Length PUT and a pipelined request: both answered", accepted,
            put_head("ok-cl", "Content-Length: 5"), b"hello", "ok-cl", b"hello")
    t.check("control: chunked PUT (Transfer-Encoding: Chunked) and a pipelined request: both "
            "answered", accepted, put_head("ok-te", "Transfer-Encoding: Chunked"), chunked,
            "ok-te", b"hello")
    t.check("control: chunked PUT with a trailer field and a pipelined request: both answered",
            accepted, put_head("ok-tr", te), b"5\r\nhello\r\n0\r\nX-Note: 1\r\n\r\n", "ok-tr",
            b"hello")

    def ext_not_misread():
        """A chunk extension (RFC 9112 7.1.1) is valid; libmicrohttpd 1.0.1 miscounts the
        length of such a line and refuses the body. Either way, never other bytes stored."""
        key = "ext"
        raw, closed = exchange(srv, put_head(key, te) + b"5;n=v\r\nhello\r\n0\r\n\r\n" + SECOND)
        st = statuses(raw)
        path = os.path.join(srv.store, B, key)
        if st == [200, 200]:
            with open(path, "rb") as f:
                E.eq("stored bytes", f.read(), b"hello")
            print("       | chunk extension: accepted")
        elif st == [400] and closed and not os.path.exists(path):
            print("       | chunk extension: refused (400), nothing stored")
        else:
            raise E.Fail("neither accepted as sent nor refused: %s\n%r" % (st, raw[:600]))

    t.check("chunk extension: read as the chunks say, or refused; never misread",
            ext_not_misread)
    srv.stop()
    srv.cleanup()
    return t.finish()


if __name__ == "__main__":
    raise SystemExit(main())
