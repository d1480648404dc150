"""bench/keep_reader.py: the training loader of bench/keep.sh. Reads every key of a list once
per epoch through an anonymous gateway, in a new random order each epoch (fixed by SEED), with
4 parallel readers: PyTorch's DataLoader (the epoch's order as its sampler, 4 worker processes)
when python3-torch is installed, else a thread pool doing the same. With "plan", each epoch
starts with POST /_/plan of this epoch's order then the next one's (docs/plans.md), inside the
epoch's clock. Per epoch it prints one line:
    EPOCH n seconds=S bytes=B hits=H reads=R backend_bytes=D
backend_bytes: what the gateway's /_/stats says it read from its backend during the epoch.
    keep_reader.py ENDPOINT BUCKET KEYS_FILE EPOCHS SEED [plan]
"""
import json
import random
import sys
import time
import urllib.request
import warnings

WORKERS = 4
# torch warns that 4 workers exceed a 2-core machine's count: the readers wait on the network
warnings.filterwarnings("ignore", message=".*worker process")


def get(url):
    """(bytes read, 1 if x-cache: hit) of one GET, the body read and dropped."""
    n = 0
    with urllib.request.urlopen(url, timeout=300) as r:
        hit = r.headers.get("x-cache") == "hit"
        while True:
            b = r.read(1 << 20)
            if not b:
                break
            n += len(b)
    return n, int(hit)


def backend_read(endpoint):
    with urllib.request.urlopen(endpoint + "/_/stats", timeout=30) as r:
        return json.load(r)["backend"]["bytes_read"]


def orders_of(n, epochs, seed):
    """Each epoch's order (one more: the plan of the last epoch names the next one's too)."""
    rnd = random.Random(seed)
    out = []
    for _ in range(epochs + 1):
        o = list(range(n))
        rnd.shuffle(o)
        out.append(o)
    return out


def epochs_torch(urls, orders):
    import torch.utils.data as tud

    class Objects(tud.Dataset):
        def __len__(self):
            return len(urls)

        def __getitem__(self, i):
            return get(urls[i])

    class EpochOrder(tud.Sampler):
        def __init__(self):
            self.order = []

        def __iter__(self):
            return iter(self.order)

        def __len__(self):
            return len(self.order)

    sampler = EpochOrder()
    dl = tud.DataLoader(Objects(), batch_size=None, sampler=sampler, num_workers=WORKERS,
                        persistent_workers=True)
    for o in orders[:-1]:
        sampler.order = o
        yield lambda: iter(dl)  # started after the clock: workers fetch ahead at once


def epochs_threads(urls, orders):
    import concurrent.futures as cf
    with cf.ThreadPoolExecutor(WORKERS) as ex:
        for o in orders[:-1]:
            yield lambda o=o: ex.map(lambda i: get(urls[i]), o)


def post_plan(endpoint, bucket, keys):
    body = json.dumps({"bucket": bucket, "name": "keep-bench", "keys": keys}).encode()
    rq = urllib.request.Request(endpoint + "/_/plan", data=body, method="POST")
    with urllib.request.urlopen(rq, timeout=30) as r:
        r.read()


def main():
    endpoint, bucket, keys_file, epochs, seed = sys.argv[1:6]
    plan = len(sys.argv) > 6 and sys.argv[6] == "plan"
    keys = [k.strip() for k in open(keys_file) if k.strip()]
    urls = ["%s/%s/%s" % (endpoint, bucket, k) for k in keys]
    orders = orders_of(len(keys), int(epochs), int(seed))
    try:
        import torch  # noqa: F401
        gen, loader = epochs_torch, "torch.utils.data.DataLoader(a shuffled order, num_workers=4)"
    except ImportError:
        gen, loader = epochs_threads, "a pool of 4 threads, shuffled (no python3-torch)"
    print("LOADER %s%s" % (loader, ", a read plan per epoch" if plan else ""), flush=True)
    for e, start in enumerate(gen(urls, orders), 1):
        b0 = backend_read(endpoint)
        t0 = time.monotonic()
        if plan:
            post_plan(endpoint, bucket, [keys[i] for i in orders[e - 1] + orders[e]])
        nbytes = hits = reads = 0
        for n, hit in start():
            nbytes += n
            hits += hit
            reads += 1
        secs = time.monotonic() - t0
        print("EPOCH %d seconds=%.3f bytes=%d hits=%d reads=%d backend_bytes=%d"
              % (e, secs, nbytes, hits, reads, backend_read(endpoint) - b0), flush=True)
        if plan:
            with urllib.request.urlopen(endpoint + "/_/plan", timeout=30) as r:
                p = json.load(r)["plans"][0]
            print("PLAN %d %s" % (e, " ".join("%s=%s" % (k, p[k]) for k in (
                "position", "reads", "reads_behind", "hits", "stalls", "misses", "prefetched",
                "cached_already", "prefetch_no_room", "prefetch_errors"))), flush=True)


if __name__ == "__main__":
    main()
