"""72-fairshare.py — fair sharing when the gateway is saturated (--max-bandwidth 120M).
e2e: solo (shares and rates are measured: tests/e2e/run.sh runs it alone)

Three keys download at once; the gateway is saturated by its configured bandwidth. Shares are
measured on the client side over a 5 s window after 1.5 s to settle, and asserted as ratios:
  - hits: a client with 4 parallel streams and a client with 1 stream each get 50% ± 15%;
  - misses: the same when the 4-stream client reads cold objects (fills) and the other hits;
  - the spare of a slow client goes to the others: a key limited to 12 MiB/s by rate= beside
    the 4-stream client, which then takes at least 3.5 times as much (equal shares would be 1);
  - the gateway as a whole stays under --max-bandwidth (+15%) throughout;
  - /_/stats "fair" and the s3cached_fair_* gauges of /_/metrics, sampled while the two clients
    download: capacity equal to the flag, 2 active clients, saturated, the level near half the
    capacity (about 0.9 of it beside the client held to 12 MiB/s), sockets paced; without
    --max-bandwidth: capacity 0, nothing active or paced.
"""
import http.client
import os
import threading
import time
import urllib.parse
import urllib.request

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


def measure(groups, during=None):
    """groups: {name: [Stream...]}; starts them all, returns {name: bytes in the window}.
    during(deadline), if given, runs in the window (it must return by the deadline)."""
    for g in groups.values():
        for s in g:
            s.start()
    time.sleep(SETTLE)
    before = {n: sum(s.bytes for s in g) for n, g in groups.items()}
    t0 = time.time()
    if during:
        during(t0 + WINDOW)
    rest = t0 + WINDOW - time.time()
    if rest > 0:
        time.sleep(rest)
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


def fair_metrics(srv):
    """{name: value} of the s3cached_fair_* samples of /_/metrics."""
    rq = urllib.request.Request(srv.endpoint + "/_/metrics",
                                headers={"Authorization": "Bearer " + srv.token})
    with urllib.request.urlopen(rq, timeout=10) as r:
        text = r.read().decode()
    out = {}
    for ln in text.splitlines():
        if ln.startswith("s3cached_fair_"):
            name, val = ln.split(" ")
            out[name] = float(val)
    return out


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]


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
        fair, prom = [], []

        def probe(deadline):  # /_/stats and /_/metrics every 0.5 s, while both download
            while time.time() < deadline - 1.5:
                fair.append(srv.stats()["fair"])
                prom.append(fair_metrics(srv))
                time.sleep(0.5)
        share_check(measure({"A": a, "B": b}, probe), "hits, 4 streams vs 1")
        fair_check(fair, prom)

    def fair_check(fair, proms):
        """@proms: /_/metrics samples taken beside the /_/stats ones: like those, a sample
        taken as one of A's responses ends and the next begins may show a passing level, so
        the figures are judged by their median."""
        """The figures of a gateway saturated by two greedy clients (A: 4 streams, B: 1)."""
        levels = [f["level_bps"] / CAP for f in fair]
        print("       /_/stats fair (%d samples): level %s of capacity; active %s; saturated %s; "
              "responses %s, paced %s; rate %s MiB/s"
              % (len(fair), " ".join("%.2f" % x for x in levels),
                 [f["active_clients"] for f in fair], [f["saturated"] for f in fair],
                 [f["responses"] for f in fair], [f["paced_responses"] for f in fair],
                 " ".join("%.0f" % (f["rate_bps"] / 2**20) for f in fair)))
        if not proms:
            raise E.Fail("no /_/metrics sample in the window")
        keys = set().union(*proms)
        prom = {k: median([p[k] for p in proms if k in p]) for k in keys}
        print("       /_/metrics (median of %d samples): %s"
              % (len(proms), ", ".join("%s %g" % kv for kv in sorted(prom.items()))))
        if len(fair) < 4:
            raise E.Fail("only %d /_/stats samples in the window" % len(fair))
        for f in fair:
            for k in ("capacity_bps", "level_bps", "rate_bps", "active_clients", "responses",
                      "paced_responses"):
                if not isinstance(f.get(k), int) or isinstance(f.get(k), bool):
                    raise E.Fail("fair.%s is not an integer: %r" % (k, f))
            if not isinstance(f.get("saturated"), bool):
                raise E.Fail("fair.saturated is not a boolean: %r" % f)
            E.eq("fair.capacity_bps (--max-bandwidth 120M)", f["capacity_bps"], CAP)
        # the one-stream client is between two GETs for a moment each object: one sample may
        # land there (seen once under ASan), never more, and the link stays saturated
        bad = [f for f in fair if f["active_clients"] not in (1, 2) or not f["saturated"]]
        gaps = [f for f in fair if f["active_clients"] == 1]
        if bad or len(gaps) > 1:
            raise E.Fail("two clients downloading flat out, yet /_/stats shows %r"
                         % (bad or gaps)[0])
        lvl = median(levels)
        if not 0.45 <= lvl <= 0.65:
            raise E.Fail("fair.level_bps is %.2f of capacity (median); two greedy clients "
                         "should each get about half" % lvl)
        if max(f["paced_responses"] for f in fair) < 2 or max(f["responses"] for f in fair) < 2:
            raise E.Fail("fewer than 2 responses being sent or paced: %r" % fair)
        if any(f["paced_responses"] > f["responses"] for f in fair):
            raise E.Fail("more paced responses than responses: %r" % fair)
        rate = median([f["rate_bps"] / CAP for f in fair])
        if not 0.7 <= rate <= 1.15:
            raise E.Fail("fair.rate_bps is %.2f of capacity (median); saturated means near 1"
                         % rate)
        want = {"s3cached_fair_capacity_bytes_per_second": CAP, "s3cached_fair_saturated": 1,
                "s3cached_fair_active_clients": 2}
        for k, v in want.items():
            E.eq("/_/metrics %s" % k, prom.get(k), v)
        share = prom.get("s3cached_fair_share_bytes_per_second", -1) / CAP
        if not 0.45 <= share <= 0.65:
            raise E.Fail("s3cached_fair_share_bytes_per_second is %.2f of capacity" % share)
        for k in ("s3cached_fair_rate_bytes_per_second", "s3cached_fair_responses",
                  "s3cached_fair_paced_responses"):
            if k not in prom:
                raise E.Fail("/_/metrics has no %s" % k)

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
        levels = []

        def probe(deadline):
            while time.time() < deadline - 1.0:
                levels.append(srv.stats()["fair"]["level_bps"] / CAP)
                time.sleep(0.5)
        rates = measure({"A": a, "S": s}, probe)
        ratio = rates["A"] / max(rates["S"], 1)
        print("       spare: %s; A/S %.1f; fair.level_bps %s of capacity"
              % (show(rates), ratio, " ".join("%.2f" % x for x in levels)))
        if ratio < 3.5:
            raise E.Fail("the 4-stream client beside a key limited to 12 MiB/s got only %.1f "
                         "times as much (%s); the spare share is not used" % (ratio, show(rates)))
        if rates["A"] + rates["S"] > 1.15 * CAP:
            raise E.Fail("%s: over --max-bandwidth 120M + 15%%" % show(rates))
        if not levels or median(levels) < 0.75:  # max-min: 120M - 12M for A, not half
            raise E.Fail("fair.level_bps beside a client held to 12 MiB/s: %s of capacity; "
                         "want about 0.9" % levels)

    t.check("hits: 4 streams and 1 stream of two clients get 50% ± 15% each", hits)
    t.check("misses vs hits: 50% ± 15% each", misses)
    t.check("a client held back by its own limit leaves its share to the other", spare)
    srv.stop()
    srv.cleanup()

    def without_flag():
        off = E.Server(t).start()
        try:
            os.makedirs(os.path.join(off.store, "fair"))
            with open(os.path.join(off.store, "fair", "x"), "wb") as f:
                f.write(chunk * 4)
            for _ in range(2):  # a miss, then a hit: downloads without fair sharing
                r = off.req("GET", "/fair/x")
                E.eq("GET /fair/x", r.status, 200)
            fair = off.stats()["fair"]
            E.eq("fair without --max-bandwidth", fair,
                 {"capacity_bps": 0, "level_bps": 0, "rate_bps": 0, "active_clients": 0,
                  "responses": 0, "paced_responses": 0, "saturated": False})
            prom = fair_metrics(off)
            E.eq("s3cached_fair_capacity_bytes_per_second without --max-bandwidth",
                 prom.get("s3cached_fair_capacity_bytes_per_second"), 0)
            E.eq("s3cached_fair_saturated without --max-bandwidth",
                 prom.get("s3cached_fair_saturated"), 0)
        finally:
            off.stop()
            off.cleanup()
    t.check("without --max-bandwidth: /_/stats fair.capacity_bps 0, nothing paced", without_flag)
    tmp.cleanup()
    return t.finish()


if __name__ == "__main__":
    raise SystemExit(main())
