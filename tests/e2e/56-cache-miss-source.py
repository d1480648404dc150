"""56-cache-miss-source: --miss-source with a file:// backend on a local disk (this test's temp
directory). A cold GET of at least 32 MiB is sent from the backend's own file (sendfile) while
the cache fills from the same open file: x-cache miss, the right bytes, cache.source_sends
counts it, the backend is opened once (backend.requests: the lookup and one open) and read once
(backend.bytes_read == the object size), and once the fill ends the whole object is cached and
the next GET is a hit that does not touch the backend, also across several chained fill runs
(--block-size 1M: 48 blocks, runs of 16), also after a restart. A PUT or a cache invalidation
during such a GET (before its version is indexed) wins: the next GETs, and those after a
restart, serve the newest bytes. Eight concurrent cold GETs of one object: eight
correct bodies, one backend open. A cold 32 MiB range fills only its blocks. A client that
drops its connection early stops the chain after the run in flight. Objects under 32 MiB,
and every object with --miss-source cache, stream from the cache as before
(source_sends stays 0). An object bigger than the whole cache (its runs go to memory) is
answered whole to concurrent GETs. A bad --miss-source value is refused at start (exit 2)."""
import concurrent.futures as cf
import os
import socket
import struct
import subprocess
import sys
import time

import e2elib as E

MiB = 1 << 20
B = "msrc"
t = E.Suite("56-cache-miss-source.py")
SRC = {}


def put_src(srv, key, size):
    data = os.urandom(size)
    path = os.path.join(srv.store, B, key)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    SRC[key] = data


def get(srv, key, rng=None):
    hdrs = {"range": "bytes=%d-%d" % rng} if rng else None
    r = srv.req("GET", "/%s/%s" % (B, key), headers=hdrs, timeout=60)
    if r.status not in (200, 206):
        raise E.Fail("GET %s: %s %r" % (key, r.status, r.body[:200]))
    return r


def settle(srv, quiet=0.3, limit=20, until=None):
    """stats once no fill is landing bytes: (cache, backend) stable over @quiet seconds.
    @until(cache, backend): first wait (at most 30 s) until it holds, i.e. until what the test
    knows must happen (a chain's fill, a GET counted once the server is done with it) has
    happened, so that @quiet only has to catch what goes beyond it."""
    def now():
        s = srv.stats()
        return s["cache"], s["backend"]
    if until is not None:
        E.wait_until(lambda: until(*now()))
    end = time.time() + limit
    s = srv.stats()
    last = (s["cache"]["fill_bytes"], s["backend"])
    while time.time() < end:
        time.sleep(quiet)
        s = srv.stats()
        cur = (s["cache"]["fill_bytes"], s["backend"])
        if cur == last:
            return s["cache"], s["backend"]
        last = cur
    return s["cache"], s["backend"]


srv = E.Server(t, extra=["--cache-size", "1G", "--block-size", "1M", "--readahead", "2M",
                         "--revalidate-after", "never"]).start()


def setup():
    put_src(srv, "big", 48 * MiB + 4097)     # 49 blocks: runs of 16, chained
    put_src(srv, "shared", 40 * MiB)
    put_src(srv, "ranged", 96 * MiB)
    put_src(srv, "small", 20 * MiB + 3)
    put_src(srv, "dropped", 200 * MiB)


E.setup_or_die(t, srv, setup)


def whole_object():
    c0, b0 = settle(srv)
    r = get(srv, "big")
    E.eq("x-cache of a cold 48 MiB GET", r.h("x-cache"), "miss")
    E.same_bytes("its body", r.body, SRC["big"])
    n = len(SRC["big"])
    c1, b1 = settle(srv, until=lambda c, b: c["source_sends"] > c0["source_sends"]
                    and b["bytes_read"] - b0["bytes_read"] >= n and c["used_bytes"] - c0["used_bytes"] >= n)
    E.eq("cache.source_sends", c1["source_sends"] - c0["source_sends"], 1)
    E.eq("backend.requests (lookup + one open for every chained run)",
         b1["requests"] - b0["requests"], 2)
    E.eq("backend.bytes_read", b1["bytes_read"] - b0["bytes_read"], len(SRC["big"]))
    if c1["used_bytes"] - c0["used_bytes"] < len(SRC["big"]):
        raise E.Fail("the chain cached %d of %d bytes" % (c1["used_bytes"] - c0["used_bytes"],
                                                          len(SRC["big"])))
    r = get(srv, "big")
    E.eq("x-cache of the next GET", r.h("x-cache"), "hit")
    E.same_bytes("its body", r.body, SRC["big"])
    c2, b2 = settle(srv)
    E.eq("backend.requests during the hit", b2["requests"], b1["requests"])
    E.eq("cache.source_sends during the hit", c2["source_sends"], c1["source_sends"])


def concurrent_cold():
    c0, b0 = settle(srv)
    with cf.ThreadPoolExecutor(8) as ex:
        rs = list(ex.map(lambda _: get(srv, "shared"), range(8)))
    for i, r in enumerate(rs):
        E.same_bytes("body %d" % i, r.body, SRC["shared"])
    how = sorted(r.h("x-cache") for r in rs)
    # one miss; the others joined it, or found every byte of it landed already (a hit: a
    # thread that started late, or a fill faster than the threads' start)
    E.eq("misses among 8 concurrent cold GETs", how.count("miss"), 1)
    if set(how) - {"miss", "coalesced", "hit"}:
        raise E.Fail("x-cache of 8 concurrent cold GETs: %r" % how)
    c1, b1 = settle(srv, until=lambda c, b: c["source_sends"] > c0["source_sends"]
                    and b["bytes_read"] - b0["bytes_read"] >= len(SRC["shared"]))
    E.eq("backend.requests", b1["requests"] - b0["requests"], 2)
    E.eq("backend.bytes_read", b1["bytes_read"] - b0["bytes_read"], len(SRC["shared"]))
    if c1["source_sends"] - c0["source_sends"] < 1:
        raise E.Fail("no GET was sent from the backend's file")
    E.eq("x-cache afterwards", get(srv, "shared").h("x-cache"), "hit")


def cold_range():
    c0, b0 = settle(srv)
    a = 40 * MiB
    r = get(srv, "ranged", rng=(a, a + 32 * MiB - 1))
    E.eq("status", r.status, 206)
    E.eq("content-range", r.h("content-range"), "bytes %d-%d/%d" % (a, a + 32 * MiB - 1, 96 * MiB))
    E.same_bytes("body", r.body, SRC["ranged"][a:a + 32 * MiB])
    c1, b1 = settle(srv, until=lambda c, b: c["source_sends"] > c0["source_sends"]
                    and b["bytes_read"] - b0["bytes_read"] >= 32 * MiB)
    E.eq("cache.source_sends", c1["source_sends"] - c0["source_sends"], 1)
    E.eq("backend.bytes_read: the range's 32 blocks only", b1["bytes_read"] - b0["bytes_read"],
         32 * MiB)
    r = get(srv, "ranged", rng=(a + MiB, a + 2 * MiB - 1))
    E.eq("x-cache of a range inside it", r.h("x-cache"), "hit")


def small_streams():
    c0, _ = settle(srv)
    r = get(srv, "small")
    E.eq("x-cache", r.h("x-cache"), "miss")
    E.same_bytes("body", r.body, SRC["small"])
    c1, _ = settle(srv)
    E.eq("cache.source_sends for a 20 MiB object", c1["source_sends"], c0["source_sends"])
    E.eq("x-cache right after", get(srv, "small").h("x-cache"), "hit")


def dropped_client():
    c0, b0 = settle(srv)
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
    hdrs = {"host": "127.0.0.1:%d" % srv.port}
    path = "/%s/dropped" % B
    E.sign_headers("GET", path, "", hdrs, E.EMPTY_SHA, srv.ak, srv.sk)
    s.sendall(("GET %s HTTP/1.1\r\n" % path + "".join("%s: %s\r\n" % kv for kv in hdrs.items())
               + "\r\n").encode())
    got = s.recv(65536)
    if b"200 OK" not in got.split(b"\r\n", 1)[0]:
        raise E.Fail("GET of a cold 200 MiB object: %r" % got[:200])
    # gone at once (a reset): the server's next send fails, however loaded the machine is
    # (after a plain close it may still fill the socket's buffers for a while)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.close()
    c1, b1 = settle(srv)
    pulled = b1["bytes_read"] - b0["bytes_read"]
    # the run in flight (16 blocks) ends; the chain does not go on to the other 184 MiB
    if pulled > 48 * MiB:
        raise E.Fail("a client gone after 64 KiB of a cold 200 MiB object left %d MiB fetched"
                     % (pulled // MiB))
    r = get(srv, "dropped")
    E.same_bytes("the object read whole afterwards", r.body, SRC["dropped"])
    print("       # backend bytes after the early drop: %d MiB" % (pulled // MiB))


def overwrite_and_invalidate_race():
    """A cold GET sent from the backend's file indexes its version only when the fill needs it.
    A PUT of the key, or an invalidation, landing in that window must win: no stale record."""
    import threading
    put_src(srv, "race", 40 * MiB)
    old = SRC["race"]
    new = os.urandom(40 * MiB)
    got = {}
    th = threading.Thread(target=lambda: got.setdefault("r", get(srv, "race")))
    th.start()
    time.sleep(0.005)
    r = srv.req("PUT", "/%s/race" % B, body=new, timeout=60)
    E.eq("PUT during the cold GET", r.status, 200)
    th.join(60)
    body = got["r"].body
    if body != old and body != new:
        raise E.Fail("the cold GET returned neither version (%d bytes)" % len(body))
    SRC["race"] = new
    settle(srv)
    E.same_bytes("GET after the PUT", get(srv, "race").body, new)
    E.same_bytes("and again", get(srv, "race").body, new)

    put_src(srv, "inv", 40 * MiB)
    th = threading.Thread(target=lambda: got.setdefault("i", get(srv, "inv")))
    th.start()
    time.sleep(0.005)
    r = E.request(srv.endpoint, "DELETE", "/_/cache/%s/inv" % B,
                  headers={"Authorization": "Bearer " + srv.token}, anon=True)
    if r.status not in (200, 204):
        raise E.Fail("DELETE /_/cache during the cold GET: %r" % (r,))
    th.join(60)
    E.same_bytes("the cold GET's body", got["i"].body, SRC["inv"])
    settle(srv)
    E.same_bytes("GET after the invalidation", get(srv, "inv").body, SRC["inv"])


def restart_keeps():
    """What was sent from the backend's file and filled is indexed durably: after a restart
    the first GET is a hit; the overwritten key serves its newest bytes."""
    settle(srv)
    srv.stop()
    srv.start()
    r = get(srv, "big")
    E.eq("x-cache of the first GET after a restart", r.h("x-cache"), "hit")
    E.same_bytes("its body", r.body, SRC["big"])
    E.same_bytes("the overwritten key after a restart", get(srv, "race").body, SRC["race"])
    E.same_bytes("the invalidated key after a restart", get(srv, "inv").body, SRC["inv"])


t.check("a cold 48 MiB GET is sent from the backend's file; the chain caches all of it", whole_object)
t.check("8 concurrent cold GETs: right bodies, one backend open, one read", concurrent_cold)
t.check("a cold 32 MiB range is sent from the file and fills only its blocks", cold_range)
t.check("a cold object under 32 MiB streams from the cache (a hit right after)", small_streams)
t.check("a client gone early stops the chain after the run in flight", dropped_client)
t.check("a PUT or an invalidation during a cold GET wins (no stale index record)",
        overwrite_and_invalidate_race)
t.check("after a restart: the object sent from the backend's file is a hit", restart_keeps)
srv.stop()
srv.cleanup()

# --- --miss-source cache: every cold GET streams from the cache ------------------------------
srv2 = E.Server(t, extra=["--cache-size", "1G", "--miss-source", "cache"]).start()


def setup2():
    put_src(srv2, "big2", 48 * MiB)


def cache_mode():
    r = get(srv2, "big2")
    E.eq("x-cache", r.h("x-cache"), "miss")
    E.same_bytes("body", r.body, SRC["big2"])
    c, b = settle(srv2, until=lambda c, b: b["bytes_read"] >= 48 * MiB)
    E.eq("cache.source_sends with --miss-source cache", c["source_sends"], 0)
    E.eq("backend.bytes_read", b["bytes_read"], 48 * MiB)
    E.eq("x-cache next", get(srv2, "big2").h("x-cache"), "hit")


E.setup_or_die(t, srv2, setup2)
t.check("--miss-source cache: a cold 48 MiB GET streams from the cache", cache_mode)
srv2.stop()
srv2.cleanup()


# --- an object bigger than the whole cache: every fill run goes to memory (a bypass) ---------
srv3 = E.Server(t, extra=["--cache-size", "4M", "--block-size", "1M"]).start()


def setup3():
    put_src(srv3, "huge", 40 * MiB + 5)


def bigger_than_cache():
    """Most of its runs cannot reserve room, so they open no backend file for GETs to send
    from: the GETs that waited for one stream the bypass bytes instead (they once started a
    new run after each one that went to memory, and could loop without answering)."""
    for rnd in range(3):
        with cf.ThreadPoolExecutor(4) as ex:
            bodies = list(ex.map(lambda _: get(srv3, "huge").body, range(4)))
        for i, body in enumerate(bodies):
            E.same_bytes("round %d, GET %d" % (rnd + 1, i + 1), body, SRC["huge"])
    c, _ = settle(srv3)
    if c["used_bytes"] > 4 * MiB:
        raise E.Fail("used_bytes %d over the 4 MiB cap" % c["used_bytes"])


E.setup_or_die(t, srv3, setup3)
t.check("an object bigger than the cache: 3 rounds of 4 concurrent GETs, all whole and right",
        bigger_than_cache)
srv3.stop()
srv3.cleanup()


def bad_value():
    p = subprocess.run([E.BIN, "serve", "--miss-source", "sometimes", "--listen", "127.0.0.1:1"],
                       capture_output=True, timeout=20)
    E.eq("exit status for --miss-source sometimes", p.returncode, 2)
    if b"miss-source" not in p.stderr:
        raise E.Fail("the error does not name the option: %r" % p.stderr)


t.check("--miss-source with a bad value: exit 2 naming the option", bad_value)
sys.exit(t.finish())
