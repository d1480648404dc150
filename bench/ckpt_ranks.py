#!/usr/bin/python3
"""bench/ckpt_ranks.py: the checkpoint shape of MLPerf Storage (bench/ckpt_ranks.sh drives it).
N ranks, one thread each, each writes its shard of a checkpoint as one multipart upload
(PART bytes a part, in order, one connection per rank) and the slowest rank's time is the
figure; or reads its shard back with one GET. Anonymous requests (--anonymous gateways): the
client's cost stays the socket's. Prints one JSON line.
  ckpt_ranks.py write ENDPOINT BUCKET PREFIX RANKS SHARD_BYTES PART_BYTES
  ckpt_ranks.py read  ENDPOINT BUCKET PREFIX RANKS SHARD_BYTES"""
import http.client
import json
import os
import sys
import threading
import time
import urllib.parse

MiB = 1 << 20


def conn(endpoint):
    u = urllib.parse.urlsplit(endpoint)
    return http.client.HTTPConnection(u.hostname, u.port, timeout=600)


def call(c, method, path, body=None):
    c.request(method, path, body=body, headers={"Content-Length": str(len(body) if body else 0)})
    r = c.getresponse()
    data = r.read()
    if r.status != 200:
        raise RuntimeError("%s %s: %d %s" % (method, path, r.status, data[:200]))
    return r, data


def write_rank(endpoint, bucket, key, shard, part, buf, out, i):
    c = conn(endpoint)
    t0 = time.monotonic()
    _, d = call(c, "POST", "/%s/%s?uploads" % (bucket, key))
    uid = d.split(b"<UploadId>")[1].split(b"</UploadId>")[0].decode()
    etags, off, n = [], 0, 0
    while off < shard:
        n += 1
        ln = min(part, shard - off)
        # a rank's bytes: the shared random buffer from an offset of its own
        start = (i * 7919 * 4096 + off) % (len(buf) - part)
        r, _ = call(c, "PUT", "/%s/%s?partNumber=%d&uploadId=%s" % (bucket, key, n, uid),
                    buf[start:start + ln])
        etags.append(r.getheader("ETag"))
        off += ln
    body = ("<CompleteMultipartUpload>" + "".join(
        "<Part><PartNumber>%d</PartNumber><ETag>%s</ETag></Part>" % (k + 1, e)
        for k, e in enumerate(etags)) + "</CompleteMultipartUpload>").encode()
    _, d = call(c, "POST", "/%s/%s?uploadId=%s" % (bucket, key, uid), body)
    if b"<Error>" in d:
        raise RuntimeError("complete %s: %s" % (key, d[:200]))
    out[i] = time.monotonic() - t0
    c.close()


def read_rank(endpoint, bucket, key, shard, out, i):
    c = conn(endpoint)
    t0 = time.monotonic()
    c.request("GET", "/%s/%s" % (bucket, key))
    r = c.getresponse()
    buf = bytearray(4 * MiB)
    got = 0
    while True:
        n = r.readinto(buf)
        if not n:
            break
        got += n
    if r.status != 200 or got != shard:
        raise RuntimeError("GET %s: %d, %d of %d bytes" % (key, r.status, got, shard))
    out[i] = time.monotonic() - t0
    c.close()


def main():
    mode, endpoint, bucket, prefix, ranks, shard = sys.argv[1:7]
    ranks, shard = int(ranks), int(shard)
    out = [None] * ranks
    errs = []
    if mode == "write":
        part = int(sys.argv[7])
        buf = os.urandom(max(64 * MiB, 2 * part))

        def job(i):
            try:
                write_rank(endpoint, bucket, "%s%03d" % (prefix, i), shard, part, buf, out, i)
            except Exception as e:  # noqa: BLE001 - reported, the run fails
                errs.append(repr(e))
    else:
        def job(i):
            try:
                read_rank(endpoint, bucket, "%s%03d" % (prefix, i), shard, out, i)
            except Exception as e:  # noqa: BLE001
                errs.append(repr(e))
    t0 = time.monotonic()
    th = [threading.Thread(target=job, args=(i,)) for i in range(ranks)]
    for x in th:
        x.start()
    for x in th:
        x.join()
    wall = time.monotonic() - t0
    if errs:
        print(json.dumps({"error": errs[:3]}))
        sys.exit(1)
    print(json.dumps({"ranks": ranks, "shard": shard, "slowest_s": round(max(out), 3),
                      "fastest_s": round(min(out), 3), "wall_s": round(wall, 3),
                      "slowest_mibs": round(shard / MiB / max(out), 1),
                      "total_mibs": round(ranks * shard / MiB / wall, 1)}))


main()
