#!/usr/bin/python3
"""78-plan-loader: examples/plan_loader.py as a user runs it. 96 objects; two ranks, each a
DistributedSampler (shuffled, seeded) over a map-style Dataset that GETs its keys with boto3,
read by a DataLoader with 2 workers, for two epochs; at each epoch's start each rank posts its
plan (this epoch's keys, then the next one's, epoch_keys()). Every sample of every epoch is
checked by hash; each rank's plan follows it (position, reads) and the gateway's /_/stats count
the plans' reads; the plan of the same name replaced the last one. Needs Debian's python3-torch
(make deps-test installs it): without it the checks are reported as skipped."""
import hashlib
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2elib as E  # noqa: E402

sys.path.insert(0, os.path.join(E.REPO, "examples"))
t = E.Suite("78-plan-loader")
try:
    import torch  # noqa: F401
    from torch.utils.data import DataLoader, Dataset, DistributedSampler
    import plan_loader as P
except ImportError as e:
    t.skip("examples/plan_loader.py with PyTorch", "cannot import torch (%s): install "
           "python3-torch (make deps-test)" % e)
    sys.exit(t.finish())

B, N = "train", 96
srv = E.Server(t, extra=["--revalidate-after", "never"]).start()
os.makedirs(os.path.join(srv.store, B, "img"))
KEYS, WANT = [], {}
for i in range(N):
    k = "img/%05d.jpg" % i
    data = hashlib.sha256(k.encode()).digest() * (300 + 7 * i)
    with open(os.path.join(srv.store, B, k), "wb") as f:
        f.write(data)
    KEYS.append(k)
    WANT[k] = E.sha(data)


class Objects(Dataset):
    """Sample i is object KEYS[i], one GET each (a client per worker process)."""

    def __init__(self):
        self.s3 = None

    def __len__(self):
        return N

    def __getitem__(self, i):
        if self.s3 is None:
            self.s3 = srv.boto3()
        return KEYS[i], self.s3.get_object(Bucket=B, Key=KEYS[i])["Body"].read()


def two_ranks():
    s3 = srv.boto3()
    ids = {}
    for epoch in range(2):
        for rank in range(2):
            sampler = DistributedSampler(range(N), num_replicas=2, rank=rank, shuffle=True,
                                         seed=7)
            keys = P.epoch_keys(sampler, KEYS, epoch, epoch + 1)
            E.eq("the plan holds this epoch's keys, then the next one's", len(keys),
                 2 * len(sampler))
            j = P.post_plan(s3, B, keys, name="job-78/rank-%d" % rank)
            E.eq("plan entries", j["entries"], len(keys))
            if epoch:
                E.eq("the same name replaced the last plan", j["plan"] != ids[rank], True)
            ids[rank] = j["plan"]
            loader = DataLoader(Objects(), batch_size=8, sampler=sampler, num_workers=2,
                                collate_fn=lambda x: x)
            seen = []
            for batch in loader:
                for key, data in batch:
                    if E.sha(data) != WANT[key]:
                        raise E.Fail("epoch %d rank %d: %s has the wrong bytes"
                                     % (epoch, rank, key))
                    seen.append(key)
            E.eq("epoch %d rank %d: its share, each once" % (epoch, rank), sorted(seen),
                 sorted(KEYS[i] for i in sampler))
            st = P.plan_status(s3, ids[rank])
            # the loader's two workers may answer a little out of order: a GET behind the
            # plan's position counts as a re-read; every GET counts once
            E.eq("epoch %d rank %d: the plan counted every GET" % (epoch, rank),
                 st["reads"] + st["reads_behind"], len(sampler))
            if abs(st["position"] - len(sampler)) > 8:
                raise E.Fail("the plan's position after the epoch: %r" % st)
    plans = srv.stats()["plans"]
    E.eq("plans held (one per rank)", plans["held"], 2)
    if plans["reads"] < N:
        raise E.Fail("/_/stats plans: %r" % plans)


t.check("two ranks, two epochs, a plan each epoch (DistributedSampler, 2 workers), by hash",
        two_ranks)
srv.stop()
sys.exit(t.finish())
