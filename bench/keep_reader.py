"""bench/keep_reader.py: the training loader of bench/keep.sh. Reads every key of a list once
per epoch through an anonymous gateway, in a new random order each epoch, with 4 parallel
readers: PyTorch's DataLoader (shuffle=True, 4 worker processes) when python3-torch is
installed, else a thread pool doing the same. Per epoch it prints one line:
    EPOCH n seconds=S bytes=B hits=H reads=R backend_bytes=D
backend_bytes: what the gateway's /_/stats says it read from its backend during the epoch.
    keep_reader.py ENDPOINT BUCKET KEYS_FILE EPOCHS SEED
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


def epochs_torch(urls, epochs, seed):
    import torch
    import torch.utils.data as tud

    class Objects(tud.Dataset):
        def __len__(self):
            return len(urls)

        def __getitem__(self, i):
            return get(urls[i])

    g = torch.Generator()
    g.manual_seed(seed)
    dl = tud.DataLoader(Objects(), batch_size=None, shuffle=True, num_workers=WORKERS,
                        persistent_workers=True, generator=g)
    for _ in range(epochs):
        yield lambda: iter(dl)  # started after the clock: workers fetch ahead at once


def epochs_threads(urls, epochs, seed):
    import concurrent.futures as cf
    rnd = random.Random(seed)
    with cf.ThreadPoolExecutor(WORKERS) as ex:
        for _ in range(epochs):
            order = list(range(len(urls)))
            rnd.shuffle(order)
            yield lambda o=order: ex.map(lambda i: get(urls[i]), o)


def main():
    endpoint, bucket, keys_file, epochs, seed = sys.argv[1:6]
    keys = [k.strip() for k in open(keys_file) if k.strip()]
    urls = ["%s/%s/%s" % (endpoint, bucket, k) for k in keys]
    try:
        import torch  # noqa: F401
        gen, loader = epochs_torch, "torch.utils.data.DataLoader(shuffle=True, num_workers=4)"
    except ImportError:
        gen, loader = epochs_threads, "a pool of 4 threads, shuffled (no python3-torch)"
    print("LOADER %s" % loader, flush=True)
    for e, start in enumerate(gen(urls, int(epochs), int(seed)), 1):
        b0 = backend_read(endpoint)
        t0 = time.monotonic()
        nbytes = hits = reads = 0
        for n, hit in start():
            nbytes += n
            hits += hit
            reads += 1
        secs = time.monotonic() - t0
        print("EPOCH %d seconds=%.3f bytes=%d hits=%d reads=%d backend_bytes=%d"
              % (e, secs, nbytes, hits, reads, backend_read(endpoint) - b0), flush=True)


if __name__ == "__main__":
    main()
