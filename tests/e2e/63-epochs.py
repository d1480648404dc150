#!/usr/bin/env python3
"""63-epochs.py — epochs after the first come from memory and flash (issue 33). The upstream
is a second s3cached on a file backend (its /_/stats counts what reached it); the gateway
reaches it as an S3 endpoint, so cold GETs go through the fill window (cache/fillwin.c).
  - the bytes a cold GET filled stay in the page cache (the cache writer writes them through
    it and starts their writeback behind): a data set that RAM holds is read from memory in
    the next epoch, not from the disk (before, the writer wrote around the page cache with
    O_DIRECT and the next epoch read every byte back from the disk);
  - a partly cached object is a partial hit: a GET of an object whose first block is cached
    fetches only the other blocks from the upstream (its byte counter), is labelled
    `x-cache: partial`, and /_/stats counts it (cache.partial, hit_bytes, miss_bytes), as
    /_/metrics does; the GET after it is a hit that reaches nobody;
  - three epochs over a small set in a new order each: the first all misses, the backend
    sends each byte once in all, the second and third all hits, and the data files are then
    resident in the page cache;
  - a cold sequential GET of 48 blocks with --fetch-parallel 1 reaches the backend in a few
    requests (by default: ranged GETs of a block each ahead of it, each block once): its read-ahead
    starts runs as long as the first (before, one request per block past the first run).
With the cache directory in memory (tmpfs: no window, the file is the page cache) the page
cache checks are reported skipped."""
import os
import random
import re

import e2elib as E

MiB = 1 << 20
BS = 4 * MiB
B = "epochs"


def main():
    t = E.Suite("63-epochs.py")
    up = E.Server(t).start()
    gw = E.Server(t, extra=["--backend", "http://127.0.0.1:%d" % up.port,
                            "--backend-access-key", up.ak, "--backend-secret-key", up.sk,
                            "--block-size", "4M", "--readahead", "0",
                            # a window as large as the object: its reader copies every byte
                            # from memory, so only the writer can put its pages in the cache
                            "--fill-window", "64M", "--fill-memory", "256M",
                            "--revalidate-after", "never"]).start()
    E.setup_or_die(t, up, lambda: os.makedirs(os.path.join(up.store, B)))
    in_memory = E.in_memory(gw.cache)
    data = {}

    def put(key, n):
        body = os.urandom(n)
        with open(os.path.join(up.store, B, key), "wb") as f:
            f.write(body)
        data[key] = body
        return body

    def data_files():
        return [os.path.join(d, f) for d, _, fs in os.walk(os.path.join(gw.cache, "data"))
                for f in fs]

    def cache_delta(before, field):
        return gw.settled_stats()["cache"][field] - before[field]

    def settled_used(want, timeout=60):
        """Waits (bounded) until the fills ended (cache.reserved_bytes 0: their blocks synced
        and indexed) with at least @want bytes cached."""
        def done():
            c = gw.stats()["cache"]
            return c.get("reserved_bytes", 0) == 0 and c["used_bytes"] >= want
        if not E.wait_until(done, timeout=timeout):
            raise E.Fail("the fills did not end within %d s: %r" % (timeout, gw.stats()["cache"]))

    def cache_until_hit(path, headers=None, tries=8):
        """GETs @path until it is a hit (a loaded machine's writer may leave blocks uncached,
        and each GET fetches them again): the labels seen."""
        seen = []
        for _ in range(tries):
            r = gw.req("GET", path, headers=headers or {})
            seen.append(r.h("x-cache"))
            settled_used(0)
            if seen[-1] == "hit":
                return seen
        raise E.Fail("%s is not a hit after %d GETs: %r" % (path, tries, seen))

    def filled_in_page_cache():
        body = put("pc", 64 * MiB)
        r = gw.req("GET", "/%s/pc" % B)
        E.same_bytes("cold GET", r.body, body)
        E.eq("x-cache of the cold GET", r.h("x-cache"), "miss")
        settled_used(0)
        c = gw.stats()["cache"]
        res, size = E.page_cache_bytes(data_files())
        print("       # %d of the %d bytes the cold GET cached are in the page cache (%d left "
              "uncached)" % (res, c["used_bytes"], c["uncached_bytes"]))
        if c["used_bytes"] == 0 or res < c["used_bytes"] * 9 // 10:
            raise E.Fail("after a cold GET only %d of the %d bytes it cached are in the page "
                         "cache: the next epoch would read them from the disk"
                         % (res, c["used_bytes"]))
        seen = cache_until_hit("/%s/pc" % B)
        res, size = E.page_cache_bytes(data_files())
        if res < 64 * MiB * 9 // 10:
            raise E.Fail("once a hit (%r), %d of 64 MiB in the page cache" % (seen, res))
        r = gw.req("GET", "/%s/pc" % B)
        E.same_bytes("the GET after", r.body, body)

    def partial_hit():
        body = put("part", 4 * BS)
        first = {"Range": "bytes=0-%d" % (BS - 1)}
        r = gw.req("GET", "/%s/part" % B, headers=first)
        E.same_bytes("ranged GET of the first block", r.body, body[:BS])
        E.eq("its x-cache", r.h("x-cache"), "miss")
        cache_until_hit("/%s/part" % B, first)
        c0 = gw.settled_stats()["cache"]
        b0 = gw.settled_stats()["backend"]["bytes_read"]
        r = gw.req("GET", "/%s/part" % B)
        E.same_bytes("GET of the partly cached object", r.body, body)
        E.eq("its x-cache", r.h("x-cache"), "partial")
        E.eq("backend bytes read for it (the three blocks not cached)",
             gw.settled_stats()["backend"]["bytes_read"] - b0, 3 * BS)
        E.eq("cache.partial", cache_delta(c0, "partial"), 1)
        E.eq("cache.hit_bytes", cache_delta(c0, "hit_bytes"), BS)
        E.eq("cache.miss_bytes", cache_delta(c0, "miss_bytes"), 3 * BS)
        E.eq("cache.misses (a partial hit is not a miss)", cache_delta(c0, "misses"), 0)
        settled_used(0)
        cache_until_hit("/%s/part" % B)
        r = gw.req("GET", "/%s/part" % B)
        E.same_bytes("the GET after", r.body, body)
        E.eq("the GET after: x-cache", r.h("x-cache"), "hit")
        m = gw.req("GET", "/_/metrics", headers={"Authorization": "Bearer " + gw.token},
                   anon=True).body.decode()
        for name in ("s3cached_cache_partial_total", "s3cached_cache_hit_bytes_total",
                     "s3cached_cache_miss_bytes_total", "s3cached_cache_reserved_bytes"):
            if not re.search(r"^%s \d+" % name, m, re.M):
                raise E.Fail("/_/metrics has no %s" % name)
        if not re.search(r'^s3cached_cache_partial_total [1-9]', m, re.M):
            raise E.Fail("s3cached_cache_partial_total is 0 after a partial hit")

    def three_epochs():
        """Each epoch fetches exactly what the one before left uncached (0 on an idle machine:
        then epochs 2 and 3 are all hits); no GET after the first epoch is a miss."""
        keys = ["shard-%02d" % i for i in range(6)]
        for k in keys:
            put(k, 2 * BS + 4096 * (1 + keys.index(k)))
        total = sum(len(data[k]) for k in keys)
        rng = random.Random(63)
        labels, fetched, uncached = [], [], []
        for epoch in range(3):
            order = keys[:]
            rng.shuffle(order)
            s0 = gw.settled_stats()
            got = []
            for k in order:
                r = gw.req("GET", "/%s/%s" % (B, k))
                E.same_bytes("epoch %d: %s" % (epoch + 1, k), r.body, data[k])
                got.append(r.h("x-cache"))
            settled_used(0)
            s1 = gw.settled_stats()
            labels.append(got)
            fetched.append(s1["backend"]["bytes_read"] - s0["backend"]["bytes_read"])
            uncached.append(s1["cache"]["uncached_bytes"] - s0["cache"]["uncached_bytes"])
        print("       # x-cache per epoch: %s; backend bytes %r; left uncached %r"
              % (" | ".join(",".join(x) for x in labels), fetched, uncached))
        E.eq("epoch 1: every GET a miss", set(labels[0]), {"miss"})
        E.eq("epoch 1: the backend sent the set once", fetched[0], total)
        for e in (1, 2):
            E.eq("epoch %d fetched what epoch %d left uncached" % (e + 1, e), fetched[e],
                 uncached[e - 1])
            if "miss" in labels[e]:
                raise E.Fail("epoch %d had a miss: %r" % (e + 1, labels[e]))
            if not uncached[e - 1] and set(labels[e]) != {"hit"}:
                raise E.Fail("epoch %d: everything was cached, yet %r" % (e + 1, labels[e]))
        if in_memory:
            print("       # cache directory in memory: page cache residency not checked")
            return
        c = gw.stats()["cache"]
        res, size = E.page_cache_bytes(data_files())
        if res < c["used_bytes"] * 9 // 10:
            raise E.Fail("after three epochs %d of the %d bytes cached are in the page cache"
                         % (res, c["used_bytes"]))

    name = "a cold GET's bytes stay in the page cache (the next epoch reads memory)"
    if in_memory:
        t.skip(name, "the cache directory is in memory (tmpfs): its file is the page cache")
        put("pc", 64 * MiB)
        gw.req("GET", "/%s/pc" % B)   # the partial hit below counts on it being cached
        settled_used(64 * MiB)
    else:
        t.check(name, filled_in_page_cache)
    t.check("a partly cached object is a partial hit: only the missing blocks are fetched",
            partial_hit)
    t.check("three epochs in new orders: misses once, then hits, each byte fetched once",
            three_epochs)

    def cold_long(extra, key):
        """A cold GET of 48 blocks through a gateway with @extra: (backend requests, bytes,
        its cache figures)."""
        g = E.Server(t, extra=["--backend", "http://127.0.0.1:%d" % up.port,
                               "--backend-access-key", up.ak, "--backend-secret-key", up.sk,
                               "--block-size", "1M", "--revalidate-after", "never"] + extra).start()
        try:
            body = put(key, 48 * MiB)
            s0 = g.settled_stats()["backend"]
            r = g.req("GET", "/%s/%s" % (B, key))
            E.eq("status", r.status, 200)
            E.eq("right bytes", r.body == body, True)
            st = g.settled_stats()
            return (st["backend"]["requests"] - s0["requests"],
                    st["backend"]["bytes_read"] - s0["bytes_read"], st["cache"])
        finally:
            g.stop()
            g.cleanup()

    def few_requests():
        # one stream (--fetch-parallel 1): the read-ahead of a sequential cold GET starts runs
        # as long as its first one (16 blocks): a long read is a few backend requests (before:
        # one per block past the first run, 34 for this one)
        n, nbytes, _ = cold_long(["--fetch-parallel", "1"], "long")
        print("       # backend requests for a cold GET of 48 blocks, one stream: %d" % n)
        if n > 6:
            raise E.Fail("%d backend requests for 48 blocks (runs of 16: at most 6)" % n)

    def parallel_requests():
        # the default: ranged GETs of a block each ahead of the reader, each block once
        n, nbytes, c = cold_long(["--fetch-parallel", "16"], "long2")
        print("       # backend requests for a cold GET of 48 blocks, in parallel: %d (%d "
              "ahead)" % (n, c["fetch_ahead_runs"]))
        E.eq("bytes from the backend", nbytes, 48 * MiB)
        if not c["fetch_ahead_runs"] or n > 48 + 1:
            raise E.Fail("%d requests, %d ahead: want ranged GETs ahead, at most one a block"
                         % (n, c["fetch_ahead_runs"]))

    t.check("a cold sequential GET of 48 blocks, one stream: a few backend requests", few_requests)
    t.check("a cold sequential GET of 48 blocks: ranged GETs ahead, each block once",
            parallel_requests)
    gw.stop()
    up.stop()
    return t.finish()


if __name__ == "__main__":
    raise SystemExit(main())
