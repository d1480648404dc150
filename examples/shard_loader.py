#!/usr/bin/python3
"""shard_loader.py: PyTorch loaders over WebDataset-style tar shards served by s3cached.

Two ways to read samples (a sample is the members of one shard sharing a base name,
e.g. sample-00042.jpg and sample-00042.cls) from the gateway's cache:

  MemberDataset   a map-style Dataset: __getitem__(i) reads sample i's members with one
                  GET /bucket/shard.tar?member=NAME each (boto3, SigV4; any random order).
  BatchDataset    with BatchSampler: __getitem__([i, j, ...]) reads all the members of a batch
                  with one POST /?batch, a TAR stream in the batch's order.

Both take a `Samples` list: build it once with Samples.scan() (reads every shard's headers
from the gateway, which also caches and indexes the shards) or from your own manifest.

    s3_args = dict(endpoint="http://127.0.0.1:9000", access_key="AK", secret_key="SK")
    samples = Samples.scan(shard_client(**s3_args), "datasets", ["train/shard-000000.tar", ...])
    ds = MemberDataset(s3_args, samples)
    loader = DataLoader(ds, batch_size=64, shuffle=True, num_workers=4,
                        collate_fn=lambda x: x)
    bds = BatchDataset(s3_args, samples)
    loader = DataLoader(bds, batch_size=None, num_workers=4,
                        sampler=BatchSampler(RandomSampler(bds), 64, drop_last=False))

Each worker process makes its own boto3 client (clients are not fork-safe). Requires boto3
and torch (Debian: python3-boto3, python3-torch); shard_client, get_member and get_batch need
only boto3. A sample comes back as a dict
{"__key__": "shard/base", "jpg": bytes, "cls": bytes, ...}: decode it in a transform.
"""
import io
import json
import tarfile
import urllib.parse
import urllib.request

import boto3
import botocore.auth
import botocore.awsrequest
import botocore.config

try:
    from torch.utils.data import Dataset as _Dataset
except ImportError:  # shard_client, get_member and get_batch work without torch
    _Dataset = object


def shard_client(endpoint, access_key, secret_key, region="us-east-1", **config):
    """A boto3 S3 client whose GetObject takes TarMember="name": the member query parameter is
    added to the URL before SigV4 signs it, so the signature covers it."""
    conf = dict(s3={"addressing_style": "path"}, retries={"max_attempts": 3})
    conf.update(config)
    s3 = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=access_key,
                      aws_secret_access_key=secret_key, region_name=region,
                      config=botocore.config.Config(**conf))

    def stash(params, context, **_):
        member = params.pop("TarMember", None)
        if member is not None:
            context["tar_member"] = member

    def add_member(request, **_):
        member = request.context.get("tar_member")
        if member is None:
            return
        u = urllib.parse.urlsplit(request.url)
        q = (u.query + "&" if u.query else "") + "member=" + urllib.parse.quote(member, safe="-_.~")
        request.url = urllib.parse.urlunsplit((u.scheme, u.netloc, u.path, q, u.fragment))

    s3.meta.events.register("before-parameter-build.s3.GetObject", stash)
    s3.meta.events.register("before-sign.s3.GetObject", add_member)
    return s3


def get_member(s3, bucket, key, member, **kw):
    """The bytes of one member of a tar shard."""
    return s3.get_object(Bucket=bucket, Key=key, TarMember=member, **kw)["Body"].read()


def get_batch(s3, items, continue_on_error=False, timeout=300):
    """One POST /?batch: @items are dicts {bucket, key, member?, range?}. Returns the list of
    (name, bytes, pax_headers) in the items' order (failed items, with continue_on_error, have
    b"" and pax_headers["S3CACHED.status"]), and the parsed __batch_status__.json or None.
    The body is signed with its SHA-256 (x-amz-content-sha256), as the gateway requires."""
    body = json.dumps({"items": items, "continue_on_error": continue_on_error}).encode()
    endpoint = s3.meta.endpoint_url.rstrip("/")
    req = botocore.awsrequest.AWSRequest(method="POST", url=endpoint + "/?batch", data=body,
                                         headers={"Content-Type": "application/json"})
    creds = s3._request_signer._credentials.get_frozen_credentials()
    botocore.auth.S3SigV4Auth(creds, "s3", s3.meta.region_name).add_auth(req)
    prepared = req.prepare()
    rq = urllib.request.Request(prepared.url, data=body, method="POST",
                                headers=dict(prepared.headers.items()))
    try:
        resp = urllib.request.urlopen(rq, timeout=timeout)
    except urllib.error.HTTPError as e:
        raise RuntimeError("batch failed: HTTP %d %s" % (e.code, e.read()[:500].decode(
            "utf-8", "replace"))) from None
    out, status = [], None
    with resp, tarfile.open(fileobj=resp, mode="r|") as tf:
        for ti in tf:
            data = tf.extractfile(ti).read() if ti.size else b""
            if ti.name == "__batch_status__.json":
                status = json.loads(data)
                continue
            out.append((ti.name, data, dict(ti.pax_headers)))
    if len(out) != len(items):
        raise RuntimeError("batch returned %d entries for %d items" % (len(out), len(items)))
    return out, status


class Samples:
    """The samples of a set of shards: samples[i] = (shard key, base name, [extensions])."""

    def __init__(self, bucket, rows):
        self.bucket = bucket
        self.rows = rows

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        return self.rows[i]

    @classmethod
    def scan(cls, s3, bucket, shard_keys):
        """Reads each shard once (a streaming GET: the gateway caches it and indexes it at
        fill time) and groups its members by base name, in archive order."""
        rows = []
        for key in shard_keys:
            body = s3.get_object(Bucket=bucket, Key=key)["Body"]
            groups = {}
            with tarfile.open(fileobj=body, mode="r|") as tf:
                for ti in tf:
                    if not ti.isfile():
                        continue
                    base, _, ext = ti.name.partition(".")
                    groups.setdefault(base, []).append(ext)
            rows.extend((key, base, exts) for base, exts in groups.items())
        return cls(bucket, rows)


class _ClientPerWorker:
    """A boto3 client made lazily in each DataLoader worker process."""

    def __init__(self, client_args):
        self.client_args = dict(client_args)
        self._s3 = None

    @property
    def s3(self):
        if self._s3 is None:
            self._s3 = shard_client(**self.client_args)
        return self._s3

    def __getstate__(self):
        return {"client_args": self.client_args, "_s3": None}


class MemberDataset(_ClientPerWorker, _Dataset):
    """Map-style: sample i with one member GET per member."""

    def __init__(self, client_args, samples, transform=None):
        super().__init__(client_args)
        self.samples = samples
        self.transform = transform

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, i):
        key, base, exts = self.samples[i]
        sample = {"__key__": key + "/" + base}
        for ext in exts:
            sample[ext] = get_member(self.s3, self.samples.bucket, key, base + "." + ext)
        return self.transform(sample) if self.transform else sample


class BatchDataset(_ClientPerWorker, _Dataset):
    """With a BatchSampler (DataLoader(batch_size=None, sampler=BatchSampler(...))):
    __getitem__(indices) reads the whole batch with one request, in the indices' order."""

    def __init__(self, client_args, samples, transform=None, continue_on_error=False):
        super().__init__(client_args)
        self.samples = samples
        self.transform = transform
        self.continue_on_error = continue_on_error

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, indices):
        if isinstance(indices, int):
            indices = [indices]
        items, owners = [], []
        for i in indices:
            key, base, exts = self.samples[i]
            for ext in exts:
                items.append({"bucket": self.samples.bucket, "key": key,
                              "member": base + "." + ext})
                owners.append((i, ext))
        entries, _ = get_batch(self.s3, items, self.continue_on_error)
        batch = {}
        for (i, ext), (_, data, pax) in zip(owners, entries):
            key, base, _ = self.samples[i]
            s = batch.setdefault(i, {"__key__": key + "/" + base})
            s[ext] = None if "S3CACHED.status" in pax else data
        out = [batch[i] for i in indices]
        return [self.transform(s) for s in out] if self.transform else out


if __name__ == "__main__":
    import argparse
    import hashlib
    import time

    ap = argparse.ArgumentParser(description="read every sample of some shards, two ways")
    ap.add_argument("--endpoint", required=True)
    ap.add_argument("--access-key", required=True)
    ap.add_argument("--secret-key", required=True)
    ap.add_argument("--bucket", required=True)
    ap.add_argument("shards", nargs="+")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--workers", type=int, default=2)
    a = ap.parse_args()
    args = dict(endpoint=a.endpoint, access_key=a.access_key, secret_key=a.secret_key)
    samples = Samples.scan(shard_client(**args), a.bucket, a.shards)
    from torch.utils.data import BatchSampler, DataLoader, RandomSampler
    for name, loader in (
            ("member GETs", DataLoader(MemberDataset(args, samples), batch_size=a.batch_size,
                                       shuffle=True, num_workers=a.workers,
                                       collate_fn=lambda x: x)),
            ("batches", DataLoader(BatchDataset(args, samples), batch_size=None,
                                   num_workers=a.workers,
                                   sampler=BatchSampler(RandomSampler(range(len(samples))),
                                                        a.batch_size, drop_last=False)))):
        t0, n, h = time.time(), 0, hashlib.sha256()
        for batch in loader:
            for s in batch:
                n += 1
                h.update(s["__key__"].encode())
        print("%s: %d samples in %.2f s" % (name, n, time.time() - t0))
