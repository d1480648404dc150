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
    resident in the page cache.
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

    def settled_used(want, timeout=30):
        """Waits (bounded) until the fills ended (cache.reserved_bytes 0: their blocks synced
        and indexed) with at least @want bytes cached."""
        def done():
            c = gw.stats()["cache"]
            return c["reserved_bytes"] == 0 and c["used_bytes"] >= want
        if not E.wait_until(done, timeout=timeout):
            raise E.Fail("the fills did not end within %d s: %r" % (timeout, gw.stats()["cache"]))

    def filled_in_page_cache():
        body = put("pc", 64 * MiB)
        r = gw.req("GET", "/%s/pc" % B)
        E.same_bytes("cold GET", r.body, body)
        E.eq("x-cache of the cold GET", r.h("x-cache"), "miss")
        settled_used(64 * MiB)
        res, size = E.page_cache_bytes(data_files())
        print("       # %d of %d bytes of the filled data file in the page cache" % (res, size))
        if size < 64 * MiB or res < size * 9 // 10:
            raise E.Fail("after a cold GET only %d of %d bytes of its data file are in the page "
                         "cache: the next epoch would read them from the disk" % (res, size))
        r = gw.req("GET", "/%s/pc" % B)
        E.same_bytes("the GET after", r.body, body)
        E.eq("x-cache of the GET after", r.h("x-cache"), "hit")

    def partial_hit():
        body = put("part", 4 * BS)
        r = gw.req("GET", "/%s/part" % B, headers={"Range": "bytes=0-%d" % (BS - 1)})
        E.same_bytes("ranged GET of the first block", r.body, body[:BS])
        E.eq("its x-cache", r.h("x-cache"), "miss")
        settled_used(64 * MiB + BS)
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
        settled_used(64 * MiB + 4 * BS)
        r = gw.req("GET", "/%s/part" % B)
        E.same_bytes("the GET after", r.body, body)
        E.eq("the GET after: x-cache", r.h("x-cache"), "hit")
        m = gw.req("GET", "/_/metrics", headers={"Authorization": "Bearer " + gw.token},
                   anon=True).body.decode()
        for name in ("s3cached_cache_partial_total", "s3cached_cache_hit_bytes_total",
                     "s3cached_cache_miss_bytes_total"):
            if not re.search(r"^%s \d+" % name, m, re.M):
                raise E.Fail("/_/metrics has no %s" % name)
        if not re.search(r'^s3cached_cache_partial_total [1-9]', m, re.M):
            raise E.Fail("s3cached_cache_partial_total is 0 after a partial hit")

    def three_epochs():
        keys = ["shard-%02d" % i for i in range(6)]
        for k in keys:
            put(k, 2 * BS + 4096 * (1 + keys.index(k)))
        total = sum(len(data[k]) for k in keys)
        used0 = gw.settled_stats()["cache"]["used_bytes"]
        b0 = gw.settled_stats()["backend"]["bytes_read"]
        rng = random.Random(63)
        labels = []
        for epoch in range(3):
            order = keys[:]
            rng.shuffle(order)
            got = []
            for k in order:
                r = gw.req("GET", "/%s/%s" % (B, k))
                E.same_bytes("epoch %d: %s" % (epoch + 1, k), r.body, data[k])
                got.append(r.h("x-cache"))
            labels.append(got)
            if epoch == 0:
                settled_used(used0 + total)
        print("       # x-cache per epoch: %s" % " | ".join(",".join(x) for x in labels))
        E.eq("epoch 1: every GET a miss", set(labels[0]), {"miss"})
        E.eq("epochs 2 and 3: every GET a hit", set(labels[1] + labels[2]), {"hit"})
        E.eq("backend bytes for three epochs (each byte once)",
             gw.settled_stats()["backend"]["bytes_read"] - b0, total)
        if in_memory:
            print("       # cache directory in memory: page cache residency not checked")
            return
        res, size = E.page_cache_bytes(data_files())
        if res < size * 9 // 10:
            raise E.Fail("after three epochs %d of %d bytes of the data files are in the page "
                         "cache" % (res, size))

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
    gw.stop()
    up.stop()
    return t.finish()


if __name__ == "__main__":
    raise SystemExit(main())
