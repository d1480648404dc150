"""72-fairshare.py — fair sharing when the gateway is saturated (--max-bandwidth 120M).

Three keys download at once; the gateway is saturated by its configured bandwidth. Shares are
measured on the client side over a 5 s window after 1.5 s to settle, and asserted as ratios:
  - hits: a client with 4 parallel streams and a client with 1 stream each get 50% ± 15%;
  - misses: the same when the 4-stream client reads cold objects (fills) and the other hits;
  - the spare of a slow client goes to the others: a key limited to 12 MiB/s by rate= beside
    the 4-stream client, which then takes at least 3.5 times as much (equal shares would be 1);
  - the gateway as a whole stays under --max-bandwidth (+15%) throughout.
"""
import http.client
import os
import threading
import time
import urllib.parse

import e2elib as E

CAP = 120 << 20
SETTLE = 1.5
WINDOW = 5.0
HOT, HOT_SIZE = 4, 64 << 20
COLD, COLD_SIZE = 28, 32 << 20


class Stream(threading.Thread):
    """One keep-alive connection downloading @paths in a loop (each once when @once) until
    stopped; counts body bytes as they arrive."""

    def __init__(self, srv, ak, sk, paths, once=False):
        super().__init__(daemon=True)
        self.srv, self.ak, self.sk, self.paths, self.once = srv, ak, sk, paths, once
        self.bytes = 0
        self.stop = False
        self.error = None

    def get(self, conn, path):
        host = urllib.parse.urlsplit(self.srv.endpoint).netloc
        h = {"host": host}
        E.sign_headers("GET", path, "", h, "UNSIGNED-PAYLOAD", self.ak, self.sk)
        conn.request("GET", path, headers=h)
        r = conn.getresponse()
        if r.status != 200:
            raise E.Fail("GET %s: %d %r" % (path, r.status, r.read()[:200]))
        buf = bytearray(1 << 20)
        while not self.stop:
            n = r.readinto(buf)
            if not n:
                return True
            self.bytes += n
        return False

    def run(self):
        conn = http.client.HTTPConnection("127.0.0.1", self.srv.port, timeout=30)
        i = 0
        try:
            while not self.stop:
                if self.once and i >= len(self.paths):
                    break
                if not self.get(conn, self.paths[i % len(self.paths)]):
                    break
                i += 1
        except Exception as e:  # noqa: BLE001 - reported by the check
            if not self.stop:
                self.error = e
        finally:
            conn.close()


def measure(groups):
    """groups: {name: [Stream...]}; starts them all, returns {name: bytes in the window}."""
    for g in groups.values():
        for s in g:
            s.start()
    time.sleep(SETTLE)
    before = {n: sum(s.bytes for s in g) for n, g in groups.items()}
    t0 = time.time()
    time.sleep(WINDOW)
    after = {n: sum(s.bytes for s in g) for n, g in groups.items()}
    secs = time.time() - t0
    for g in groups.values():
        for s in g:
            s.stop = True
    for g in groups.values():
        for s in g:
            s.join(30)
    for n, g in groups.items():
        for s in g:
            if s.error:
                raise E.Fail("%s: %s" % (n, s.error))
    return {n: (after[n] - before[n]) / secs for n in groups}


def show(rates):
    return ", ".join("%s %.1f MiB/s" % (n, r / 2**20) for n, r in sorted(rates.items()))


def main():
    t = E.Suite("72-fairshare.py")
    tmp = E.Server(t)
    creds = os.path.join(tmp.tmp, "creds")
    A, SA = "AKFOURSTREAMS01", "four" * 8
    B, SB = "AKONESTREAM0001", "one" * 10
    S, SS = "AKSLOWKEY000001", "slow" * 8
    with open(creds, "w") as f:
        f.write("%s %s admin\n%s %s\n%s %s rate=12M\n" % (A, SA, B, SB, S, SS))
    srv = E.Server(t, auth=["--credentials", creds],
                   extra=["--max-bandwidth", "120M", "--cache-size", "4G"]).start()
    os.makedirs(os.path.join(srv.store, "fair"))
    chunk = os.urandom(1 << 20)
    for i in range(HOT):
        with open(os.path.join(srv.store, "fair", "hot%d" % i), "wb") as f:
            for _ in range(HOT_SIZE >> 20):
                f.write(chunk)
    for i in range(COLD):
        with open(os.path.join(srv.store, "fair", "cold%02d" % i), "wb") as f:
            for _ in range(COLD_SIZE >> 20):
                f.write(chunk)
    hot = ["/fair/hot%d" % i for i in range(HOT)]

    def prime():
        s = Stream(srv, A, SA, hot, once=True)
        s.run()
        if s.error or s.bytes != HOT * HOT_SIZE:
            raise E.Fail("priming the cache: %s bytes, %s" % (s.bytes, s.error))
    E.setup_or_die(t, srv, prime)

    def share_check(rates, what):
        total = rates["A"] + rates["B"]
        share_b = rates["B"] / total
        print("       %s: %s; B's share %.0f%%" % (what, show(rates), share_b * 100))
        if not 0.35 <= share_b <= 0.65:
            raise E.Fail("%s: the 1-stream client got %.0f%% of %.1f MiB/s (%s); want 50%% ± 15%%"
                         % (what, share_b * 100, total / 2**20, show(rates)))
        if total > 1.15 * CAP:
            raise E.Fail("%s: %.1f MiB/s in all, over --max-bandwidth 120M + 15%%"
                         % (what, total / 2**20))

    def hits():
        a = [Stream(srv, A, SA, hot[i:] + hot[:i]) for i in range(4)]
        b = [Stream(srv, B, SB, hot)]
        share_check(measure({"A": a, "B": b}), "hits, 4 streams vs 1")

    def misses():
        cold = ["/fair/cold%02d" % i for i in range(COLD)]
        a = [Stream(srv, A, SA, cold[i::4], once=True) for i in range(4)]
        b = [Stream(srv, B, SB, hot)]
        st0 = srv.stats()
        share_check(measure({"A": a, "B": b}), "4 streams of cold misses vs 1 stream of hits")
        st1 = srv.stats()
        if st1["cache"]["misses"] <= st0["cache"]["misses"]:
            raise E.Fail("the 4-stream client made no misses: %r" % st1["cache"])

    def spare():
        a = [Stream(srv, A, SA, hot[i:] + hot[:i]) for i in range(4)]
        s = [Stream(srv, S, SS, hot)]
        rates = measure({"A": a, "S": s})
        ratio = rates["A"] / max(rates["S"], 1)
        print("       spare: %s; A/S %.1f" % (show(rates), ratio))
        if ratio < 3.5:
            raise E.Fail("the 4-stream client beside a key limited to 12 MiB/s got only %.1f "
                         "times as much (%s); the spare share is not used" % (ratio, show(rates)))
        if rates["A"] + rates["S"] > 1.15 * CAP:
            raise E.Fail("%s: over --max-bandwidth 120M + 15%%" % show(rates))

    t.check("hits: 4 streams and 1 stream of two clients get 50% ± 15% each", hits)
    t.check("misses vs hits: 50% ± 15% each", misses)
    t.check("a client held back by its own limit leaves its share to the other", spare)
    srv.stop()
    srv.cleanup()
    tmp.cleanup()
    return t.finish()


if __name__ == "__main__":
    raise SystemExit(main())
