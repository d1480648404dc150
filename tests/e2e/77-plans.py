"""77-plans.py — read plans (POST /_/plan, docs/plans.md) over an S3 backend that answers each
request 20 ms late (build/throttle in front of a second s3cached). A client key (not an admin)
posts the keys it will read, in order: the gateway prefetches ahead of it, no further than
--plan-ahead before the reader comes, then follows the reader; reading the plan in order, every
body is right, most GETs are hits, the backend is asked once per object, and the plan's stats
(GET /_/plan, /_/stats, /_/metrics) say so. Attacks, as on the other admin endpoints: no
signature (403), a body the signature does not cover (400 XAmzContentSHA256Mismatch),
UNSIGNED-PAYLOAD (403), another key's plans (404 to read or cancel), keys that are not keys or a
bucket that is not one (400), more plans than a key may hold (503 SlowDown), a body over the
limit (400). An admin sees every plan; a cancelled plan is gone."""
import hashlib
import json
import os
import subprocess
import time
import urllib.request

import e2elib as E

B = "plans"
KiB = 1024
N, SIZE = 200, 64 * KiB
AHEAD = 1 << 20  # --plan-ahead: 16 objects
TINY = 256  # 1 KiB objects: a cold lookup's GET brings all of one


def main():
    t = E.Suite("77-plans.py")
    tmpsrv = E.Server(t)  # a temp dir for the credentials
    creds = os.path.join(tmpsrv.tmp, "creds")
    A, SA, U, SU, V, SV = ("AKADMIN0077", "secretA" * 4, "AKUSER00077", "secretU" * 4,
                           "AKOTHER0077", "secretV" * 4)
    with open(creds, "w") as f:
        f.write("%s %s admin\n%s %s\n%s %s\n" % (A, SA, U, SU, V, SV))
    back = E.Server(t, auth=["--anonymous"], extra=["--revalidate-after", "never"]).start()
    sums = {}
    os.makedirs(os.path.join(back.store, B, "img"))
    for i in range(N):
        body = os.urandom(SIZE - i)
        k = "img/%04d.jpg" % i
        with open(os.path.join(back.store, B, k), "wb") as f:
            f.write(body)
        sums[k] = hashlib.sha256(body).hexdigest()
    os.makedirs(os.path.join(back.store, B, "tiny"))
    for i in range(TINY):
        with open(os.path.join(back.store, B, "tiny", "%03d" % i), "wb") as f:
            f.write(os.urandom(KiB))
    throttle = E.build_helper("throttle", os.path.join(E.REPO, "bench", "throttle.c"),
                              ["-lpthread"], tmpsrv.tmp)
    lport = E.free_port()
    log = open(os.path.join(tmpsrv.tmp, "throttle.log"), "wb")
    relay = subprocess.Popen([throttle, str(lport), str(back.port), "1e9", "0", "20"],
                             stdout=log, stderr=subprocess.STDOUT)
    try:
        if not E.wait_until(lambda: b"ready" in open(log.name, "rb").read(), timeout=10):
            raise SystemExit("throttle did not start")
        gw = E.Server(t, auth=["--credentials", creds],
                      extra=["--backend", "http://127.0.0.1:%d" % lport, "--revalidate-after",
                             "never", "--plan-ahead", str(AHEAD), "--plan-requests", "16"])
        gw.ak, gw.sk = U, SU
        gw.start()
        run(t, gw, sums, (A, SA), (V, SV))
        gw.stop()
    finally:
        relay.kill()
        relay.wait()
        back.stop()
        tmpsrv.cleanup()
    return t.finish()


def plan_req(gw, method, path, body=b"", key=None, **kw):
    ak, sk = key or (gw.ak, gw.sk)
    return gw.req(method, path, body=body, ak=ak, sk=sk, **kw)


def metrics(gw, key):
    r = plan_req(gw, "GET", "/_/metrics", key=key)
    out = {}
    for line in r.body.decode().splitlines():
        if line.startswith("s3cached_plan"):
            name, val = line.split()
            out[name] = float(val)
    return out


def run(t, gw, sums, admin, other):
    keys = sorted(sums)
    body = json.dumps({"bucket": B, "name": "job-1/rank-0", "keys": keys}).encode()
    state = {}

    def post():
        r = plan_req(gw, "POST", "/_/plan", body)
        E.eq("POST /_/plan by a client key", r.status, 201)
        j = json.loads(r.body)
        E.eq("the plan's entries", j["entries"], N)
        state["id"] = j["plan"]

    t.check("a client key posts its plan", post)

    def paced():
        """Before any GET, the prefetch stops about --plan-ahead ahead of the reader."""
        last = {}

        def settled():
            j = json.loads(plan_req(gw, "GET", "/_/plan/" + state["id"]).body)
            done = j["prefetched"] + j["cached_already"]
            same = done and j["in_flight"] == 0 and last.get("done") == done
            last["done"] = done
            if not same:
                time.sleep(0.3)  # nothing more starts while the reader stays put
            return j if same else None
        j = E.wait_until(settled, timeout=20)
        if not j:
            raise E.Fail("the prefetch did not settle ahead of the reader: %r" % last)
        if not (AHEAD // SIZE <= j["prefetched"] <= AHEAD // SIZE + 2):
            raise E.Fail("prefetched %d objects ahead of a reader that has read nothing; "
                         "--plan-ahead allows ~%d" % (j["prefetched"], AHEAD // SIZE))
        E.eq("position before any GET", j["position"], 0)

    t.check("the prefetch stays within --plan-ahead of the reader", paced)

    def read_in_order():
        s3 = gw.boto3()
        how = {}
        for k in keys:
            r = s3.get_object(Bucket=B, Key=k)
            data = r["Body"].read()
            E.eq("body of " + k, hashlib.sha256(data).hexdigest(), sums[k])
            x = r["ResponseMetadata"]["HTTPHeaders"].get("x-cache", "?")
            how[x] = how.get(x, 0) + 1
        j = json.loads(plan_req(gw, "GET", "/_/plan/" + state["id"]).body)
        E.eq("position after the epoch", j["position"], N)
        E.eq("planned reads", j["reads"], N)
        if j["hits"] + j["stalls"] < N * 9 // 10 or j["misses"] > N // 10:
            raise E.Fail("a planned epoch over a 20 ms store: %r (x-cache %r)" % (j, how))
        st = gw.stats()
        E.eq("backend bytes: each object once", st["backend"]["bytes_read"], sum(
            SIZE - i for i in range(N)))
        E.eq("/_/stats plans held", st["plans"]["held"], 1)
        E.eq("/_/stats plans reads", st["plans"]["reads"], N)
        m = metrics(gw, admin)
        E.eq("s3cached_plan_reads_total", m.get("s3cached_plan_reads_total"), float(N))
        E.eq("s3cached_plans", m.get("s3cached_plans"), 1.0)
        print("       # x-cache %r; plan %s" % (how, {k: j[k] for k in (
            "hits", "stalls", "misses", "prefetched", "cached_already")}))

    t.check("reading the plan in order: right bodies, hits, one backend fetch each",
            read_in_order)

    def attacks():
        r = E.request(gw.endpoint, "POST", "/_/plan", body=body, anon=True)
        E.expect_error("no signature", r, 403, "AccessDenied")
        r = plan_req(gw, "POST", "/_/plan", body, payload="unsigned")
        E.expect_error("UNSIGNED-PAYLOAD", r, 403, "AccessDenied")
        r = plan_req(gw, "POST", "/_/plan", body, payload=E.sha(b'{"bucket":"plans","keys":[]}'))
        E.expect_error("a body the signature does not cover", r, 400,
                       "XAmzContentSHA256Mismatch")
        r = plan_req(gw, "GET", "/_/plan/" + state["id"], key=other)
        E.expect_error("another key reads the plan", r, 404, "NotFound")
        r = plan_req(gw, "DELETE", "/_/plan/" + state["id"], key=other)
        E.expect_error("another key cancels the plan", r, 404, "NotFound")
        lst = json.loads(plan_req(gw, "GET", "/_/plan", key=other).body)
        E.eq("another key's list", lst["plans"], [])
        for what, b in (("a key that is not one", {"bucket": B, "keys": ["ok", ""]}),
                        ("a bucket that is not one", {"bucket": "../etc", "keys": ["a"]}),
                        ("keys that are not strings", {"bucket": B, "keys": [1, 2]}),
                        ("not JSON", None)):
            raw = json.dumps(b).encode() if b is not None else b"{not json"
            r = plan_req(gw, "POST", "/_/plan", raw)
            E.expect_error(what, r, 400, "InvalidArgument")
        big = json.dumps({"bucket": B, "keys": ["k%07d-%s" % (i, "x" * 40)
                                                for i in range(700000)]}).encode()
        r = plan_req(gw, "POST", "/_/plan", big)
        E.expect_error("a body over the limit (%d MiB)" % (len(big) >> 20), r, 400,
                       "EntityTooLarge")
        for i in range(15):  # 16 in all with the first
            r = plan_req(gw, "POST", "/_/plan", json.dumps(
                {"bucket": B, "name": "extra-%d" % i, "keys": keys[:2]}).encode())
            E.eq("plan %d of 16" % (i + 2), r.status, 201)
        r = plan_req(gw, "POST", "/_/plan", json.dumps(
            {"bucket": B, "name": "one-too-many", "keys": keys[:2]}).encode())
        E.expect_error("a 17th plan of one key", r, 503, "SlowDown")
        r = plan_req(gw, "POST", "/_/plan", json.dumps(
            {"bucket": B, "name": "mine", "keys": keys[:2]}).encode(), key=other)
        E.eq("another key still may", r.status, 201)
        lst = json.loads(plan_req(gw, "GET", "/_/plan", key=admin).body)
        E.eq("an admin sees every plan", len(lst["plans"]), 17)

    t.check("attacks on /_/plan", attacks)

    def cancel():
        r = plan_req(gw, "DELETE", "/_/plan/" + state["id"])
        E.eq("DELETE its own plan", r.status, 200)
        r = plan_req(gw, "GET", "/_/plan/" + state["id"])
        E.expect_error("a cancelled plan", r, 404, "NotFound")

    t.check("a key cancels its own plan", cancel)

    def cli():
        kf = os.path.join(gw.tmp, "keys.txt")
        with open(kf, "w") as f:
            f.write("\n".join(keys[:50]) + "\n")
        base = [E.BIN, "plan", "--endpoint", gw.endpoint, "--access-key", gw.ak,
                "--secret-key", gw.sk]
        p = subprocess.run(base + ["--keys", kf, "--name", "cli/rank-0", "s3://" + B],
                           capture_output=True, timeout=60)
        E.eq("s3cached plan --keys: exit status (%s)" % p.stderr.decode()[-300:], p.returncode, 0)
        pid = p.stdout.decode().split()[1].rstrip(":")
        p = subprocess.run(base, capture_output=True, timeout=60)
        E.eq("s3cached plan: exit status", p.returncode, 0)
        if pid not in p.stdout.decode() or "cli/rank-0" not in p.stdout.decode():
            raise E.Fail("s3cached plan does not list %s:\n%s" % (pid, p.stdout.decode()))
        p = subprocess.run(base + ["--cancel", pid], capture_output=True, timeout=60)
        E.eq("s3cached plan --cancel: exit status", p.returncode, 0)
        p = subprocess.run(base + ["--cancel", pid], capture_output=True, timeout=60)
        E.eq("cancelling it again fails", p.returncode, 1)

    t.check("s3cached plan: post from a key list, list, cancel", cli)

    def own_fetches():
        """What the plan fetched counts as prefetched, never as cached already, even where
        the lookup's GET of the first block brought the whole object before the prefetch
        looked (it did, for some, under load: 15 prefetched and 1 cached_already)."""
        tiny = ["tiny/%03d" % i for i in range(TINY)]
        r = plan_req(gw, "POST", "/_/plan", json.dumps(
            {"bucket": B, "name": "job-1/rank-tiny", "keys": tiny}).encode())
        E.eq("POST a plan of 1 KiB objects", r.status, 201)
        pid = json.loads(r.body)["plan"]
        last = {}

        def settled():
            j = json.loads(plan_req(gw, "GET", "/_/plan/" + pid).body)
            done = j["prefetched"] + j["cached_already"]
            same = done and j["in_flight"] == 0 and last.get("done") == done
            last["done"] = done
            if not same:
                time.sleep(0.3)
            return j if same else None
        j = E.wait_until(settled, timeout=20)
        if not j:
            raise E.Fail("the tiny plan did not settle: %r" % last)
        print("       # %d of %d prefetched, %d cached already" % (j["prefetched"], TINY,
                                                                 j["cached_already"]))
        E.eq("objects of a fresh prefix counted cached_already", j["cached_already"], 0)
        if j["prefetched"] < 1:
            raise E.Fail("nothing prefetched: %r" % j)
        plan_req(gw, "DELETE", "/_/plan/" + pid)

    t.check("a plan's own fetches count as prefetched, not cached already", own_fetches)


if __name__ == "__main__":
    raise SystemExit(main())
