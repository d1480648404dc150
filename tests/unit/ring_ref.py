#!/usr/bin/env python3
"""ring_ref.py: a small, independent model of nginx's `hash $key consistent` ring, written
from nginx's description (ngx_http_upstream_hash_module.c), that printed the vectors of
tests/unit/test_ring.c. Run it to regenerate them: /usr/bin/python3 tests/unit/ring_ref.py
"""
import struct
import zlib


def split(name):
    if name[:5].lower() == "unix:":
        return name[5:].encode(), b""
    host, sep, port = name.rpartition(":")
    if sep and port.isdigit() or (sep and port == ""):
        return host.encode(), port.encode()
    return name.encode(), b""


def points(servers):
    """servers: [(name, weight, down)] -> sorted [(hash, server index)], first of equals kept"""
    pts = []
    for si, (name, weight, _) in enumerate(servers):
        host, port = split(name)
        base = zlib.crc32(host + b"\0" + port)
        prev = 0
        for _ in range(160 * weight):
            h = zlib.crc32(struct.pack("<I", prev), base)
            pts.append((h, len(pts), si))
            prev = h
    pts.sort()
    out = []
    for h, _, si in pts:
        if not out or out[-1][0] != h:
            out.append((h, si))
    return out


def owner(servers, key):
    if all(d for _, _, d in servers):
        return "ENOENT"
    if len(servers) == 1:
        return 0
    if key == b"":
        return "EAGAIN"
    pts = points(servers)
    h = zlib.crc32(key)
    i = next((k for k, (ph, _) in enumerate(pts) if ph >= h), len(pts))
    for t in range(21):
        si = pts[(i + t) % len(pts)][1]
        if not servers[si][2]:
            return si
    return "EAGAIN"


if __name__ == "__main__":
    three = [("127.0.0.1:9001", 1, 0), ("127.0.0.1:9002", 1, 0), ("127.0.0.1:9003", 1, 0)]
    for name in ["127.0.0.1:9001", "unix:/run/gw.sock", "UNIX:/run/gw.sock", "gw", "gw:", "gw:abc",
                 "[::1]:9000", "10.0.0.5:09000"]:
        p = points([(name, 1, 0)])
        first = []
        host, port = split(name)
        base = zlib.crc32(host + b"\0" + port)
        prev = 0
        for _ in range(3):
            prev = zlib.crc32(struct.pack("<I", prev), base)
            first.append(prev)
        print('{"%s", {%s}, %d},' % (name, ", ".join("0x%08xu" % x for x in first), len(p)))
    keys = [b"/", b"/a", b"/bucket/key-1", b"/shards/train/shard-000000.tar", b"/x%20y", "/日本".encode()]
    for k in keys:
        print('{"%s", %s},' % (k.decode(), owner(three, k)))
    weighted = [("a:1", 3, 0), ("b:2", 1, 0), ("c:3", 1, 1), ("d:4", 2, 0)]
    for k in keys:
        print('weighted {"%s", %s},' % (k.decode(), owner(weighted, k)))
    print("points weighted:", len(points(weighted)))
    print("crc32('/a') = 0x%08x" % zlib.crc32(b"/a"))
    pts = points(three)
    print("first/last point of three:", hex(pts[0][0]), pts[0][1], hex(pts[-1][0]), pts[-1][1])
