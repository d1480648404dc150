#!/usr/bin/python3
"""tar_fixtures.py OUTDIR: the archives test_tar.c walks, made at test time (no binary tars
are committed). For each valid archive NAME.tar it writes NAME.list, Python tarfile's view of
it, one member per line:
    offset offset_data size kind hexname
kind is reg, dir, sym, lnk, sparse or other; hexname the name's bytes in hex. Hostile archives
(bad checksum, truncated, huge pax record, ...) get no listing: test_tar.c knows what each must
give. GNU tar archives are made only when `tar` is GNU tar (else skipped, and said so)."""
import io
import os
import random
import subprocess
import sys
import tarfile

OUT = sys.argv[1]
BLOCK = 512


def kind(t):
    if t.type == tarfile.GNUTYPE_SPARSE or getattr(t, "sparse", None) is not None:
        return "sparse"
    if t.isreg():
        return "reg"
    if t.isdir():
        return "dir"
    if t.issym():
        return "sym"
    if t.islnk():
        return "lnk"
    return "other"


def listing(name):
    path = os.path.join(OUT, name)
    with tarfile.open(path, "r:") as tf, open(path[:-4] + ".list", "w") as out:
        for t in tf.getmembers():
            nm = t.name.encode("utf-8", "surrogateescape").hex() or "-"
            out.write(f"{t.offset} {t.offset_data} {t.size} {kind(t)} {nm}\n")


def data(n, seed):
    r = random.Random(seed)
    return bytes(r.getrandbits(8) for _ in range(n))


def reg(name, payload, mtime=1700000000):
    t = tarfile.TarInfo(name)
    t.size = len(payload)
    t.mtime = mtime
    return t, io.BytesIO(payload)


def write_tarfile(name, fmt, members, pax_headers=None):
    with tarfile.open(os.path.join(OUT, name), "w", format=fmt,
                      pax_headers=pax_headers or {}) as tf:
        for t, f in members:
            tf.addfile(t, f)


def special(name, typ, linkname=""):
    t = tarfile.TarInfo(name)
    t.type = typ
    t.linkname = linkname
    t.mtime = 1700000000
    return t, None


LONG300 = "long/" + "d" * 120 + "/" + "n" * 170 + ".jpg"           # 300 bytes
SPLIT180 = "deep/" + "p" * 90 + "/" + "q" * 80 + ".cls"  # 180 bytes: ustar prefix + name


def common(fmt):
    m = [reg("a.txt", b""), reg("b.bin", b"x"), reg("c.bin", data(511, 1)),
         reg("d.bin", data(512, 2)), reg("e.bin", data(513, 3)), reg("f.bin", data(10000, 4)),
         special("sub", tarfile.DIRTYPE), reg("sub/x.json", b'{"k": 1}\n'),
         special("link", tarfile.SYMTYPE, "a.txt"), special("hard.bin", tarfile.LNKTYPE, "f.bin"),
         reg(SPLIT180, data(700, 5)),
         reg("dup.txt", b"first version\n"), reg("g.bin", data(3, 6)),
         reg("dup.txt", b"second, the one that wins\n")]
    if fmt != tarfile.USTAR_FORMAT:
        m.append(reg(LONG300, data(1500, 7)))
        m.append(reg("\u00e9t\u00e9/caf\u00e9-\u00fc.txt", b"unicode\n"))
    return m


def tarfile_archives():
    write_tarfile("py_ustar.tar", tarfile.USTAR_FORMAT, common(tarfile.USTAR_FORMAT))
    write_tarfile("py_gnu.tar", tarfile.GNU_FORMAT, common(tarfile.GNU_FORMAT))
    write_tarfile("py_pax.tar", tarfile.PAX_FORMAT, common(tarfile.PAX_FORMAT),
                  pax_headers={"comment": "a global header", "mtime": "1600000000.5"})
    for n in ("py_ustar.tar", "py_gnu.tar", "py_pax.tar"):
        listing(n)


def big_archive(name, fmt):
    """A member declaring 9 GiB of data, then a small one: the file is sparse on disk."""
    big = tarfile.TarInfo("big.bin")
    big.size = 9 << 30
    small, f = reg("after.txt", b"after the big one\n")
    path = os.path.join(OUT, name)
    with open(path, "wb") as out:
        out.write(big.tobuf(fmt, "utf-8", "surrogateescape"))
        out.seek(big.size, 1)  # size is a multiple of 512: no padding
        out.write(small.tobuf(fmt, "utf-8", "surrogateescape"))
        d = f.read()
        out.write(d + b"\0" * (-len(d) % BLOCK))
        out.write(b"\0" * (2 * BLOCK))
    listing(name)


def wds_shard():
    """WebDataset-like: 3000 samples of .jpg, .cls, .json, in order, as webdataset writes."""
    r = random.Random(42)
    with tarfile.open(os.path.join(OUT, "wds.tar"), "w", format=tarfile.PAX_FORMAT) as tf:
        for i in range(3000):
            key = f"sample-{i:05d}"
            for ext, payload in ((".jpg", bytes(r.randrange(1, 4000))),
                                 (".cls", str(i % 10).encode()),
                                 (".json", f'{{"i": {i}}}'.encode())):
                t, f = reg(key + ext, payload)
                tf.addfile(t, f)
    listing("wds.tar")


def gnu_tar_archives():
    try:
        v = subprocess.run(["tar", "--version"], capture_output=True, text=True).stdout
    except OSError:
        v = ""
    if "GNU tar" not in v:
        print("tar_fixtures: GNU tar not found, GNU tar archives skipped")
        return
    src = os.path.join(OUT, "src")
    os.makedirs(os.path.join(src, "sub"))
    os.makedirs(os.path.dirname(os.path.join(src, SPLIT180)))
    os.makedirs(os.path.dirname(os.path.join(src, LONG300)))
    files = {"a.txt": b"", "b.bin": b"x", "c.bin": data(511, 1), "d.bin": data(512, 2),
             "e.bin": data(513, 3), "f.bin": data(10000, 4), "sub/x.json": b"{}\n",
             SPLIT180: data(700, 5), LONG300: data(1500, 7), "caf\u00e9.txt": b"u\n"}
    for n, d in files.items():
        with open(os.path.join(src, n), "wb") as f:
            f.write(d)
    os.symlink("a.txt", os.path.join(src, "link"))
    os.link(os.path.join(src, "f.bin"), os.path.join(src, "hard.bin"))
    with open(os.path.join(src, "sparse.img"), "wb") as f:  # 1 MiB, data at both ends
        f.write(data(4096, 8))
        f.seek((1 << 20) - 4096)
        f.write(data(4096, 9))
    short = ["a.txt", "b.bin", "c.bin", "d.bin", "e.bin", "f.bin", "sub", "link", "hard.bin",
             "sparse.img", "caf\u00e9.txt"]
    plans = [("gnutar_v7.tar", "v7", short),
             ("gnutar_ustar.tar", "ustar", short + ["deep"]),
             ("gnutar_oldgnu.tar", "oldgnu", short + ["deep", "long"]),
             ("gnutar_gnu.tar", "gnu", short + ["deep", "long"]),
             ("gnutar_pax.tar", "posix", short + ["deep", "long"])]
    for out, fmt, names in plans:
        for sparse in (False, True) if fmt in ("oldgnu", "gnu", "posix") else (False,):
            n = out if not sparse else out.replace(".tar", "_sparse.tar")
            cmd = ["tar", "--format=" + fmt, "-C", src, "-cf", os.path.join(OUT, n),
                   "--sort=name"] + (["-S"] if sparse else []) + names
            subprocess.run(cmd, check=True)
            listing(n)


def hostile():
    def ustar(members):
        b = io.BytesIO()
        with tarfile.open(fileobj=b, mode="w", format=tarfile.USTAR_FORMAT) as tf:
            for t, f in members:
                tf.addfile(t, f)
        return bytearray(b.getvalue())

    def save(name, buf):
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(buf)

    def three():
        return [reg("one.txt", b"1" * 100), reg("two.txt", b"2" * 100), reg("three.txt", b"3")]

    # bad checksum in the second header (one.txt: header 0, data 512; two.txt at 1024)
    b = ustar(three())
    b[1024 + 1] ^= 0x20
    save("badsum.tar", b)
    # first member declares 100000 bytes, the file has 1000 after its header
    t, _ = reg("big.txt", b"")
    t.size = 100000
    save("pastend.tar", t.tobuf(tarfile.USTAR_FORMAT, "utf-8", "strict") + b"z" * 1000)
    # cut inside the second header
    save("trunc_hdr.tar", ustar(three())[:1024 + 200])
    # a pax record of 100 000 bytes (over the 64 KiB cap)
    t, f = reg("huge.txt", b"h")
    t.pax_headers = {"comment": "x" * 100000}
    b = io.BytesIO()
    with tarfile.open(fileobj=b, mode="w", format=tarfile.PAX_FORMAT) as tf:
        tf.addfile(t, f)
    save("hugepax.tar", b.getvalue())
    # unsafe names among safe ones
    names = ["../evil.txt", "/abs.txt", "a/../b.txt", "ok.txt", "./fine.txt", "..hidden",
             "a/..b", "x/..", "..\\win.txt"]
    b = io.BytesIO()
    with tarfile.open(fileobj=b, mode="w", format=tarfile.GNU_FORMAT) as tf:
        for n in names:
            t, f = reg(n, n.encode())
            tf.addfile(t, f)
    save("dotdot.tar", b.getvalue())
    save("empty.tar", b"")
    save("endonly.tar", b"\0" * 1024)
    save("endonly10k.tar", b"\0" * 10240)
    save("notatar.bin", data(4096, 11))


os.makedirs(OUT, exist_ok=True)
tarfile_archives()
big_archive("big_pax.tar", tarfile.PAX_FORMAT)
big_archive("big_gnu.tar", tarfile.GNU_FORMAT)
wds_shard()
gnu_tar_archives()
hostile()
