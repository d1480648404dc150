#!/usr/bin/env python3
"""64-aborted-hits.py — clients that go away in the middle of hits cost a bounded amount of
disk reads (issue 34, item 6). A GET answered from the cache that ends early is re-read by a
worker from where TCP saw it acknowledged, to find a cached copy that cannot be read: at most
8 MiB of it, and at most two such re-reads at once. 50 GETs of a cached 128 MiB object that
read 1 KiB and close (before: each queued a re-read of up to 64 MiB, 3.2 GiB in all) cause the
server to read (rchar of /proc/PID/io: preads and sendfile alike) far less than 50 x 64 MiB,
and a hit after them is whole and right."""
import os
import socket
import time

import e2elib as E

MiB = 1 << 20
B = "aborts"
N = 50


def main():
    t = E.Suite("64-aborted-hits.py")
    srv = E.Server(t, auth=["--anonymous"]).start()
    body = os.urandom(128 * MiB)

    def setup():
        os.makedirs(os.path.join(srv.store, B))
        with open(os.path.join(srv.store, B, "big"), "wb") as f:
            f.write(body)
        r = srv.req("GET", "/%s/big" % B, anon=True)
        E.same_bytes("first GET", r.body, body)
        if not E.wait_until(lambda: srv.stats()["cache"].get("reserved_bytes", 0) == 0 and
                            srv.req("GET", "/%s/big" % B, anon=True,
                                    headers={"Range": "bytes=0-0"}).h("x-cache") == "hit",
                            timeout=30):
            raise E.Fail("the object is not a hit")
    E.setup_or_die(t, srv, setup)

    def rchar():
        with open("/proc/%d/io" % srv.proc.pid) as f:
            for line in f:
                if line.startswith("rchar:"):
                    return int(line.split()[1])
        raise E.Fail("no rchar in /proc/PID/io")

    def aborted_hits():
        r0 = rchar()
        for _ in range(N):
            s = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.sendall(("GET /%s/big HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" % B).encode())
            s.recv(1024)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            s.close()  # a reset: the response ends early
        # the re-reads run on workers: wait for the server's reads to stop growing
        last, still = -1, time.time()
        deadline = time.time() + 60
        while time.time() < deadline:
            now = rchar()
            if now != last:
                last, still = now, time.time()
            elif time.time() - still > 1.0:
                break
            time.sleep(0.1)
        read = rchar() - r0
        print("       # %d aborted hits: the server read %.0f MiB (%.1f MiB each)"
              % (N, read / MiB, read / MiB / N))
        if read > N * 16 * MiB:
            raise E.Fail("%d aborted hits made the server read %.0f MiB (more than 16 MiB each)"
                         % (N, read / MiB))
        r = srv.req("GET", "/%s/big" % B, anon=True)
        E.same_bytes("a hit after them", r.body, body)
        E.eq("its x-cache", r.h("x-cache"), "hit")

    t.check("%d hits that the client aborts cost bounded re-reads (at most 16 MiB each)" % N,
            aborted_hits)
    srv.stop()
    return t.finish()


if __name__ == "__main__":
    raise SystemExit(main())
