#!/usr/bin/python3
"""plan_loader.py: tell s3cached the order a PyTorch job will read its objects in (a read plan,
docs/plans.md), so the gateway prefetches ahead of each rank and evicts what the job needs last.

At each epoch's start, every rank posts the keys its sampler will hand it, in order: this
epoch's, then the next one's (the sampler's order is fixed by its seed, so the next epoch's is
known too, and the gateway keeps in its cache what that epoch reads first):

    from plan_loader import post_plan, epoch_keys
    for epoch in range(epochs):
        sampler.set_epoch(epoch)                       # a DistributedSampler, or any sampler
        post_plan(s3, "datasets", epoch_keys(sampler, keys, epoch, epoch + 1),
                  name="resnet50/rank-%d" % rank)
        for batch in loader:                           # reads keys[i] for i in the sampler
            ...

A plan of the same name replaces the last one; a plan nobody reads for --plan-idle goes by
itself. post_plan needs only boto3 (Debian: python3-boto3); epoch_keys takes any sampler with
set_epoch() (torch.utils.data.DistributedSampler) or a plain list of indices per epoch.
"""
import json
import urllib.error
import urllib.request

import botocore.auth
import botocore.awsrequest


def _signed(s3, method, path, body=None, timeout=60):
    """@method @path of the gateway @s3 points at, SigV4-signed with @s3's credentials over the
    body's SHA-256 (as the gateway requires of a body here): the answer's JSON."""
    url = s3.meta.endpoint_url.rstrip("/") + path
    headers = {"Content-Type": "application/json"} if body is not None else {}
    req = botocore.awsrequest.AWSRequest(method=method, url=url, data=body, headers=headers)
    creds = s3._request_signer._credentials.get_frozen_credentials()
    botocore.auth.S3SigV4Auth(creds, "s3", s3.meta.region_name).add_auth(req)
    prepared = req.prepare()
    rq = urllib.request.Request(prepared.url, data=body, method=method,
                                headers=dict(prepared.headers.items()))
    try:
        with urllib.request.urlopen(rq, timeout=timeout) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as e:
        raise RuntimeError("%s %s: HTTP %d %s" % (method, path, e.code, e.read()[:500].decode(
            "utf-8", "replace"))) from None


def post_plan(s3, bucket, keys, name="default", sizes=None, timeout=60):
    """POST /_/plan for @keys of @bucket, in order, with the credentials of the boto3 client
    @s3 (any key: a plan is its key's own). Returns the plan's JSON ({"plan": ID, "entries":
    N, ...})."""
    doc = {"bucket": bucket, "name": name, "keys": list(keys)}
    if sizes is not None:
        doc["sizes"] = list(sizes)
    return _signed(s3, "POST", "/_/plan", json.dumps(doc).encode(), timeout)


def plan_status(s3, plan_id, timeout=30):
    """GET /_/plan/ID: the plan's position, bytes ahead, hits, misses and stalls."""
    return _signed(s3, "GET", "/_/plan/" + plan_id, None, timeout)


def epoch_keys(sampler, keys, *epochs):
    """The keys @sampler yields (indices into @keys) in each of @epochs, one after the other.
    @sampler: anything with set_epoch(e) and iteration (a DistributedSampler), or a callable
    e -> indices. Leaves a set_epoch() sampler at the first of @epochs."""
    out = []
    for e in epochs:
        if callable(sampler) and not hasattr(sampler, "set_epoch"):
            idx = sampler(e)
        else:
            sampler.set_epoch(e)
            idx = list(iter(sampler))
        out.extend(keys[i] for i in idx)
    if hasattr(sampler, "set_epoch") and epochs:
        sampler.set_epoch(epochs[0])
    return out
