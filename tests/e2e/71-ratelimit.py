"""71-ratelimit.py — fair sharing: a key limited to 20 MiB/s (rate= in the credentials file)
gets 20 MiB/s, -20 % / +10 %, over ~10 s, hits and misses alike, while an unlimited key
downloading at the same time is not slowed (compared with its solo rate in the same run, as a
ratio). The bounds are not alike: going over the limit depends on no machine's speed (the token
bucket's burst is 1/20 s of the rate, 0.5 % over 10 s), so +10 % holds anywhere; falling short
of it does (a throttled connection is resumed by a timer, late on a loaded CPU or an ASan
build), so -20 % leaves room for that while a limiter that halves the rate still fails."""
import os
import subprocess
import threading
import time

import e2elib as E

RATE = 20 << 20
OVER, UNDER = 0.10, 0.20     # allowed above and below RATE (see above)


def curl_get(srv, ak, sk, path, out=os.devnull):
    """Downloads with curl --aws-sigv4; returns (seconds, bytes)."""
    t0 = time.time()
    p = subprocess.run(["curl", "-sS", "--fail", "-o", out, "-w", "%{size_download}",
                        "--aws-sigv4", "aws:amz:us-east-1:s3", "--user", "%s:%s" % (ak, sk),
                        "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD",
                        srv.endpoint + path], capture_output=True, timeout=120)
    if p.returncode != 0:
        raise E.Fail("curl %s: %s" % (path, p.stderr.decode()))
    return time.time() - t0, int(p.stdout)


def main():
    t = E.Suite("71-ratelimit.py")
    tmp = E.Server(t)
    creds = os.path.join(tmp.tmp, "creds")
    L, SL, F, SF = "AKLIMITED01", "limited" * 4, "AKFREE00001", "unlimited" * 4
    with open(creds, "w") as f:
        f.write("%s %s rate=20M\n%s %s admin\n" % (L, SL, F, SF))
    srv = E.Server(t, auth=["--credentials", creds]).start()
    os.makedirs(os.path.join(srv.store, "ratelim"))
    chunk = os.urandom(4 << 20)
    for name, n in (("warm", 200 << 20), ("cold", 200 << 20), ("free", 256 << 20)):
        with open(os.path.join(srv.store, "ratelim", name), "wb") as f:
            for _ in range(n // len(chunk)):
                f.write(chunk)
    curl_get(srv, F, SF, "/ratelim/warm")            # cached: the limited hit path
    curl_get(srv, F, SF, "/ratelim/free")

    def limited(path):
        secs, n = curl_get(srv, L, SL, path)
        rate = n / secs
        print("       . %s: %.1f MiB/s" % (path, rate / (1 << 20)))
        if not (1 - UNDER) * RATE <= rate <= (1 + OVER) * RATE:
            raise E.Fail("%s: %d bytes in %.2f s = %.1f MiB/s; limit 20 MiB/s -20 %% / +10 %%"
                         % (path, n, secs, rate / (1 << 20)))

    def unlimited_not_slowed():
        solo = []
        for _ in range(3):
            s, n = curl_get(srv, F, SF, "/ratelim/free")
            solo.append(n / s)
        res = {}

        def bg():
            res["lim"] = curl_get(srv, L, SL, "/ratelim/warm")
        th = threading.Thread(target=bg)
        th.start()

        def limited_out():  # what the limited key has been sent so far
            return sum(c["bytes_out"] for c in srv.stats()["clients"] if c["client"] == L)
        lim0 = limited_out()
        if not E.wait_until(lambda: limited_out() - lim0 >= 1 << 20, timeout=30):
            raise E.Fail("the limited download did not start within 30 s")
        during = []
        while th.is_alive() and len(during) < 6:
            s, n = curl_get(srv, F, SF, "/ratelim/free")
            during.append(n / s)
        th.join()
        lim_secs, lim_n = res["lim"]
        ratio = max(during) / max(solo)
        if ratio < 0.5:
            raise E.Fail("unlimited key during the limited download: %.0f MiB/s vs %.0f MiB/s solo "
                         "(ratio %.2f)" % (max(during) / 2**20, max(solo) / 2**20, ratio))
        rate = lim_n / lim_secs
        print("       . unlimited %.0f MiB/s solo, %.0f MiB/s beside the limited key (%.1f MiB/s)"
              % (max(solo) / 2**20, max(during) / 2**20, rate / 2**20))
        if not (1 - UNDER) * RATE <= rate <= (1 + OVER) * RATE:
            raise E.Fail("limited key while another downloads: %.1f MiB/s" % (rate / 2**20))

    t.check("limited key, cache hit: 20 MiB/s -20 %/+10 % over ~10 s", limited, "/ratelim/warm")
    t.check("limited key, cold miss: 20 MiB/s -20 %/+10 % over ~10 s", limited, "/ratelim/cold")
    t.check("an unlimited key is not slowed by a limited one", unlimited_not_slowed)
    srv.stop()
    srv.cleanup()
    tmp.cleanup()
    return t.finish()


if __name__ == "__main__":
    raise SystemExit(main())
