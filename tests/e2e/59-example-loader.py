#!/usr/bin/python3
"""59-example-loader: examples/shard_loader.py as a user runs it. Three WebDataset shards; the
map-style MemberDataset (one member GET each, shuffled, 2 DataLoader workers) and the
BatchDataset with a BatchSampler (one POST ?batch per batch of 16 samples) each run for two
epochs, and every sample of every epoch is checked by hash: all present, none twice, batches
in their sampler's order. Needs Debian's python3-torch (make deps-test installs it): without
it the checks are reported as skipped."""
import hashlib
import io
import os
import sys
import tarfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2elib as E  # noqa: E402

sys.path.insert(0, os.path.join(E.REPO, "examples"))
t = E.Suite("59-example-loader")
try:
    import torch  # noqa: F401
    import shard_loader as L
except ImportError as e:
    t.skip("examples/shard_loader.py with PyTorch", "cannot import torch (%s): install "
           "python3-torch (make deps-test)" % e)
    sys.exit(t.finish())
from torch.utils.data import BatchSampler, DataLoader, RandomSampler, SequentialSampler  # noqa

srv = E.Server(t)
srv.start()
BUCKET = "wds"
os.makedirs(os.path.join(srv.store, BUCKET, "train"))
WANT = {}  # "train/shard-N.tar/sample-M" -> {ext: sha256}
SHARDS = []
for s in range(3):
    key = "train/shard-%06d.tar" % s
    SHARDS.append(key)
    with tarfile.open(os.path.join(srv.store, BUCKET, key), "w", format=tarfile.PAX_FORMAT) as tf:
        for i in range(40):
            base = "sample-%05d" % (s * 1000 + i)
            for ext, n in (("jpg", 5000 + 131 * i), ("cls", 2), ("json", 60)):
                data = hashlib.sha256(("%s/%s.%s" % (key, base, ext)).encode()).digest()
                data = (data * (n // 32 + 1))[:n]
                WANT.setdefault("%s/%s" % (key, base), {})[ext] = E.sha(data)
                ti = tarfile.TarInfo(base + "." + ext)
                ti.size = n
                tf.addfile(ti, io.BytesIO(data))

ARGS = dict(endpoint=srv.endpoint, access_key=srv.ak, secret_key=srv.sk)
samples = None


def scan():
    global samples
    samples = L.Samples.scan(L.shard_client(**ARGS), BUCKET, SHARDS)
    E.eq("samples found", len(samples), len(WANT))


t.check("Samples.scan reads the shards' member lists", scan)


def check_epoch(seen, what):
    E.eq("%s: samples in the epoch" % what, len(seen), len(WANT))
    E.eq("%s: every sample once" % what, sorted(seen), sorted(WANT))


def verify(sample, what):
    want = WANT[sample["__key__"]]
    for ext, h in want.items():
        if E.sha(sample[ext]) != h:
            raise E.Fail("%s: %s.%s has the wrong bytes" % (what, sample["__key__"], ext))


def member_dataset():
    ds = L.MemberDataset(ARGS, samples)
    for epoch in range(2):
        loader = DataLoader(ds, batch_size=16, shuffle=True, num_workers=2,
                            collate_fn=lambda x: x)
        seen = []
        for batch in loader:
            for s in batch:
                verify(s, "MemberDataset epoch %d" % epoch)
                seen.append(s["__key__"])
        check_epoch(seen, "MemberDataset epoch %d" % epoch)


t.check("MemberDataset (member GETs, 2 workers): two epochs, every sample by hash",
        member_dataset)


def batch_dataset():
    ds = L.BatchDataset(ARGS, samples)
    for epoch in range(2):
        sampler = BatchSampler(RandomSampler(range(len(ds))), 16, drop_last=False)
        order = list(sampler)  # the sampler's batches, to compare the loader's order with
        loader = DataLoader(ds, batch_size=None, num_workers=2, sampler=order)
        seen = []
        for want_idx, batch in zip(order, loader):
            E.eq("batch order", [s["__key__"] for s in batch],
                 ["%s/%s" % (samples[i][0], samples[i][1]) for i in want_idx])
            for s in batch:
                verify(s, "BatchDataset epoch %d" % epoch)
                seen.append(s["__key__"])
        check_epoch(seen, "BatchDataset epoch %d" % epoch)


t.check("BatchDataset (one POST ?batch per 16 samples, 2 workers): two epochs, by hash, "
        "in the sampler's order", batch_dataset)


def counted():
    st = srv.stats()["shards"]
    if st["batches"] < 2 * ((len(WANT) + 15) // 16):
        raise E.Fail("batches counted: %r" % st)
    if st["member_reads"] < 2 * 3 * len(WANT):
        raise E.Fail("member reads counted: %r" % st)
    E.eq("one index per shard", st["member_index_builds"], len(SHARDS))


t.check("the gateway counted the member reads and batches; one index per shard", counted)


def missing_member():
    ds = L.BatchDataset(ARGS, L.Samples(BUCKET, [(SHARDS[0], "sample-00000", ["jpg", "png"])]),
                        continue_on_error=True)
    out = ds[[0]]
    E.eq("the missing member is None", out[0]["png"], None)
    E.eq("the present one is there", E.sha(out[0]["jpg"]),
         WANT["%s/sample-00000" % SHARDS[0]]["jpg"])


t.check("continue_on_error in the loader: a missing member is None, the step goes on",
        missing_member)


def command_line():
    """The script's own __main__, as docs/tar-shards.md shows it: both loaders over the shards."""
    import subprocess
    r = subprocess.run([sys.executable, os.path.join(E.REPO, "examples", "shard_loader.py"),
                        "--endpoint", srv.endpoint, "--access-key", srv.ak,
                        "--secret-key", srv.sk, "--bucket", BUCKET, "--batch-size", "16"]
                       + SHARDS, capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        raise E.Fail("exit %d: %s" % (r.returncode, r.stderr[-800:]))
    for what in ("member GETs", "batches"):
        if "%s: %d samples in" % (what, len(WANT)) not in r.stdout:
            raise E.Fail("no '%s: %d samples' line in %r" % (what, len(WANT), r.stdout))


t.check("python3 examples/shard_loader.py as a command: both loaders read every sample",
        command_line)

srv.stop()
srv.cleanup()
sys.exit(t.finish())
