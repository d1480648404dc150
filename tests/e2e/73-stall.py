"""73-stall.py — is the gateway starving a job? Stall accounting per client and per job
(x-s3cached-job), against what the clients themselves measure. The gateway's backend is a
second s3cached reached through build/throttle, a relay capped at 24 MiB/s, so a cold read is
slow for a reason the test controls rather than the machine's speed.
  - a job reading hits at a limited pace (curl --limit-rate) is idle, never starved, with no
    stall, also while it reads, with a need declared above what it gets;
  - a job reading cold objects is starved with cause backend, and its stall seconds agree
    within 20 % with the wait its client measured: the time its cold GETs took, less the
    time the same GETs took as hits right after (what the bytes cost the client itself);
  - a key with rate= shows its wait as cause rate_limit, in its job and its client row;
  - with --workers 1, a GET whose lookup waits behind another's fetch shows cause queue;
  - the job header signed by boto3 (an event hook), need= of a key, POST/GET/DELETE
    /_/jobs and their refusals, the jobs in s3cached stats and in /_/metrics (promtool);
  - a job's need is the key's that declared it (another key's header is ignored), and one
    key naming 260 jobs cannot keep another key's job out of the table."""
import json
import os
import subprocess
import tempfile
import threading
import time
import urllib.request

import e2elib as E

MIB = 1 << 20
SLOW_BPS = 24 * MIB
THROTTLE = os.path.join(os.path.dirname(E.BIN), "throttle")


def start_throttle(target_port):
    port = E.free_port()
    p = subprocess.Popen([THROTTLE, str(port), str(target_port), str(SLOW_BPS)],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    line = p.stdout.readline()
    if b"ready" not in line:
        p.kill()
        p.wait()
        raise E.Fail("throttle did not start: %r" % line)
    return p, port


def curl_get(srv, key, path, job=None, need=None, limit=None):
    """GET with curl --aws-sigv4; returns (time_total, time_starttransfer, bytes)."""
    ak, sk = key
    cmd = ["curl", "-sS", "--fail", "-o", os.devnull,
           "-w", "%{time_total} %{time_starttransfer} %{size_download}",
           "--aws-sigv4", "aws:amz:us-east-1:s3", "--user", "%s:%s" % (ak, sk),
           "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD"]
    if job:
        cmd += ["-H", "x-s3cached-job: " + job]
    if need:
        cmd += ["-H", "x-s3cached-job-need: " + need]
    if limit:
        cmd += ["--limit-rate", limit]
    p = subprocess.run(cmd + [srv.endpoint + path], capture_output=True, timeout=120)
    if p.returncode != 0:
        raise E.Fail("curl %s: %s" % (path, p.stderr.decode()))
    tt, ts, n = p.stdout.decode().split()
    return float(tt), float(ts), int(n)


def job(srv, name):
    for j in srv.stats()["jobs"]:
        if j["job"] == name:
            return j
    return None


def wait_gets(srv, name, n):
    """Waits (20 s at most) until job @name has @n GETs completed; returns its row."""
    return E.wait_until(lambda: (job(srv, name) or {}).get("gets", 0) >= n and job(srv, name),
                        timeout=20) or job(srv, name)


def admin(srv, method, path, body=None):
    data = json.dumps(body).encode() if isinstance(body, dict) else body
    rq = urllib.request.Request(srv.endpoint + path, data=data, method=method,
                                headers={"Authorization": "Bearer " + srv.token})
    try:
        with urllib.request.urlopen(rq, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def dashboard_panels(metrics):
    """The Grafana dashboard has the needed-vs-delivered and stall-by-cause panels; their
    queries parse (promtool check rules) and name only metrics /_/metrics (@metrics) has."""
    import re
    d = json.load(open(os.path.join(E.REPO, "deploy", "grafana", "s3cached-dashboard.json")))
    panels = {p["title"]: p for p in d["panels"]}
    exprs = []
    for title in ("Needed vs delivered, per job", "Stall by cause, per job"):
        if title not in panels:
            raise E.Fail("no panel %r in the dashboard" % title)
        exprs += [x["expr"] for x in panels[title]["targets"]]
    for e in exprs:
        for name in set(re.findall(r"s3cached_[a-z_]+", e)):
            if "\n%s{" % name not in metrics:
                raise E.Fail("the dashboard queries %s, which /_/metrics does not have" % name)
    if not os.access("/usr/bin/promtool", os.X_OK):
        return
    with tempfile.NamedTemporaryFile("w", suffix=".yml", delete=False) as f:
        f.write("groups:\n- name: dashboard\n  rules:\n")
        for i, e in enumerate(exprs):
            q = e.replace("$instance", ".*").replace("$__rate_interval", "1m")
            f.write("  - record: dashboard:q%d\n    expr: %s\n" % (i, json.dumps(q)))
    try:
        p = subprocess.run(["/usr/bin/promtool", "check", "rules", f.name], capture_output=True,
                           timeout=60)
    finally:
        os.unlink(f.name)
    if p.returncode != 0:
        raise E.Fail("the panels' queries: %s" % p.stdout.decode() + p.stderr.decode())


def main():
    t = E.Suite("73-stall.py")
    if not os.access(THROTTLE, os.X_OK):
        t.skip("stall accounting", "no %s (make all builds it)" % THROTTLE)
        return t.finish()
    up = E.Server(t).start()
    os.makedirs(os.path.join(up.store, "data"))
    blob = os.urandom(8 * MIB)
    names = ["hot"] + ["cold%d" % i for i in range(6)] + ["limited", "big", "small"]
    sizes = {"hot": 16 * MIB, "limited": 16 * MIB, "big": 32 * MIB, "small": 1 * MIB}
    for n in names:
        with open(os.path.join(up.store, "data", n), "wb") as f:
            left = sizes.get(n, 8 * MIB)
            while left:
                f.write(blob[:min(left, len(blob))])
                left -= min(left, len(blob))
    thr, tport = start_throttle(up.port)
    tmp = E.Server(t)
    creds = os.path.join(tmp.tmp, "creds")
    A, SA = "AKSTALLADMIN", "admin-secret" * 3
    L, SL = "AKSTALLLIMIT", "limited-secret" * 3
    N, SN = "AKSTALLNEEDS", "needs-secret" * 3
    with open(creds, "w") as f:
        f.write("%s %s admin\n%s %s rate=8M\n%s %s need=2.8e9\n" % (A, SA, L, SL, N, SN))
    backend = ["--backend", "http://127.0.0.1:%d" % tport, "--backend-access-key", up.ak,
               "--backend-secret-key", up.sk, "--revalidate-after", "never"]
    gw = E.Server(t, auth=["--credentials", creds], extra=backend).start()
    admin_key, limited_key, needs_key = (A, SA), (L, SL), (N, SN)

    def hits_at_a_limited_pace():
        curl_get(gw, admin_key, "/data/hot", job="warm-up")  # now cached
        seen = []
        stop = threading.Event()

        def watch():
            while not stop.is_set():
                j = job(gw, "slow-reader")
                if j:
                    seen.append(j["state"])
                time.sleep(0.3)
        th = threading.Thread(target=watch)
        th.start()
        try:
            for _ in range(2):  # 2 x 16 MiB at 8 MiB/s: ~4 s
                curl_get(gw, admin_key, "/data/hot", job="slow-reader", need="64M", limit="8M")
        finally:
            stop.set()
            th.join()
        j = wait_gets(gw, "slow-reader", 2)
        print("       . slow reader: %.0f MiB/s of 64 needed, stall %.4f s of %.2f s, states %s"
              % (j["delivered_bps_10s"] / MIB, j["stall_s"], j["transfer_s"], sorted(set(seen))))
        E.eq("state after", j["state"], "idle")
        if "starved" in seen:
            raise E.Fail("a hit reader at its own pace was called starved: %s" % seen)
        if not seen:
            raise E.Fail("the job was never seen while it read")
        if j["hit_share"] < 0.99:
            raise E.Fail("hit share %.3f, want 1" % j["hit_share"])
        if j["stall_s"] > 0.02 * j["transfer_s"]:
            raise E.Fail("stall %.4f s of %.2f s: not near zero" % (j["stall_s"], j["transfer_s"]))

    def cold_through_slow_backend():
        cold = []
        for i in range(6):
            cold.append(curl_get(gw, admin_key, "/data/cold%d" % i, job="cold-reader",
                                 need="256M"))
        j = wait_gets(gw, "cold-reader", 6)
        state, cause = j["state"], j["cause"]  # read at once: the 10 s window holds the reads
        hot = [curl_get(gw, admin_key, "/data/cold%d" % i, job="cold-again") for i in range(6)]
        waited = sum(c[0] for c in cold) - sum(h[0] for h in hot)
        stall = j["stall_s"]
        print("       . cold reader: %.2f s of GETs, %.2f s as hits; client waited %.3f s, "
              "gateway stall %.3f s (%s), %s/%s"
              % (sum(c[0] for c in cold), sum(h[0] for h in hot), waited, stall,
                 {k: round(v, 3) for k, v in j["stall_by_cause_s"].items()}, state, cause))
        E.eq("state", state, "starved")
        E.eq("cause", cause, "backend")
        if abs(stall - waited) > 0.2 * waited:
            raise E.Fail("gateway stall %.3f s vs client wait %.3f s: more than 20 %% apart"
                         % (stall, waited))
        if j["stall_by_cause_s"]["backend"] < 0.8 * stall:
            raise E.Fail("backend is %.3f s of %.3f s" % (j["stall_by_cause_s"]["backend"], stall))
        if j["first_byte_s_avg"] <= 0 or j["hit_share"] != 0:
            raise E.Fail("first byte %.4f s, hit share %.3f" % (j["first_byte_s_avg"],
                                                               j["hit_share"]))

    def rate_limited_key():
        curl_get(gw, admin_key, "/data/limited", job="warm-up")
        tt, _, n = curl_get(gw, limited_key, "/data/limited", job="limited-reader")
        j = wait_gets(gw, "limited-reader", 1)
        rl = j["stall_by_cause_s"]["rate_limit"]
        print("       . limited key: %d bytes in %.2f s; stall %.2f s, rate_limit %.2f s, %s/%s"
              % (n, tt, j["stall_s"], rl, j["state"], j["cause"]))
        if rl < 0.5 * j["transfer_s"]:
            raise E.Fail("rate_limit %.2f s of %.2f s of transfer" % (rl, j["transfer_s"]))
        E.eq("main cause", j["main_cause_10s"], "rate_limit")
        E.eq("state", j["state"], "starved")
        E.eq("cause", j["cause"], "rate_limit")
        row = [c for c in gw.stats()["clients"] if c["client"] == L]
        if not row or row[0]["stall_by_cause_s"]["rate_limit"] < 0.5 * tt:
            raise E.Fail("the limited client's row: %s" % row)

    def boto3_hook_and_key_need():
        s3 = __import__("boto3").client(
            "s3", endpoint_url=gw.endpoint, aws_access_key_id=N, aws_secret_access_key=SN,
            region_name=E.REGION,
            config=__import__("botocore.config").config.Config(s3={"addressing_style": "path"}))
        signed = {}

        def add_job(request, **kw):
            request.headers["x-s3cached-job"] = "boto3-job"

        def check_signed(request, **kw):
            h = request.headers.get("Authorization", b"")
            signed["h"] = h.decode() if isinstance(h, bytes) else h
        s3.meta.events.register("before-sign.s3.GetObject", add_job)
        s3.meta.events.register("before-send.s3.GetObject", check_signed)
        body = s3.get_object(Bucket="data", Key="hot")["Body"].read()
        E.eq("bytes", len(body), 16 * MIB)
        if "x-s3cached-job" not in signed.get("h", ""):
            raise E.Fail("the header was not signed: %s" % signed)
        j = wait_gets(gw, "boto3-job", 1)
        E.eq("need from the key's need=", (j["need_bps"], j["need_source"]), (2800000000, "key"))
        s3.meta.events.unregister("before-sign.s3.GetObject", add_job)
        s3.get_object(Bucket="data", Key="hot")["Body"].read()  # no header: the key's job
        j = wait_gets(gw, N, 1)
        E.eq("default job", (j["job"], j["need_source"]), (N, "key"))

    def jobs_endpoint():
        st, body = admin(gw, "POST", "/_/jobs", {"job": "unet3d-8xh100", "need": "22.4e9"})
        E.eq("POST status", st, 200)
        d = json.loads(body)
        E.eq("declared", (d["job"], d["need_bps"], d["need_source"], d["declared"], d["state"]),
             ("unet3d-8xh100", 22400000000, "api", True, "idle"))
        st, body = admin(gw, "GET", "/_/jobs/unet3d-8xh100")
        E.eq("GET one", (st, json.loads(body)["need_bps"]), (200, 22400000000))
        st, body = admin(gw, "GET", "/_/jobs")
        names = [x["job"] for x in json.loads(body)["jobs"]]
        if "unet3d-8xh100" not in names or "cold-reader" not in names:
            raise E.Fail("GET /_/jobs: %s" % names)
        for bad, why in ((b'{"job":"a b","need_bps":1}', "letters"), (b'{"need_bps":1}', "job"),
                         (b'{"job":"x","need":"fast"}', "not a rate"), (b"[1]", "object"),
                         (b'{"job":"x","need_bps":-3}', "need_bps")):
            st, body = admin(gw, "POST", "/_/jobs", bad)
            if st != 400 or b"<Code>InvalidArgument</Code>" not in body or why.encode() not in body:
                raise E.Fail("POST %s: %s %s" % (bad, st, body[:300]))
        st, body = admin(gw, "DELETE", "/_/jobs/unet3d-8xh100")
        E.eq("DELETE", (st, json.loads(body)["declared"]), (200, False))
        st, _ = admin(gw, "DELETE", "/_/jobs/unet3d-8xh100")
        E.eq("DELETE again", st, 404)
        st, _ = admin(gw, "GET", "/_/jobs/nobody")
        E.eq("GET unknown", st, 404)
        r = gw.req("POST", "/_/jobs", ak=L, sk=SL, body=b'{"job":"x","need_bps":1}')
        E.eq("not an admin", r.status, 403)
        r = gw.req("GET", "/data/small", ak=A, sk=SA, headers={"x-s3cached-job": "bad name!"})
        if r.status != 400 or b"x-s3cached-job" not in r.body:
            raise E.Fail("bad job header: %s %s" % (r.status, r.body[:300]))
        r = gw.req("GET", "/data/small", ak=A, sk=SA, headers={"x-s3cached-job-need": "lots"})
        if r.status != 400 or b"x-s3cached-job-need" not in r.body:
            raise E.Fail("bad need header: %s %s" % (r.status, r.body[:300]))

    def need_owner_and_key_cap():
        """A job's need belongs to the key that declared it: another key's header does not
        change it. One key naming 260 jobs gets a few rows (the rest go to "other"), so another
        key's job declared after them still has a row and its need."""
        def get1(key, job_name, need=None):
            h = {"x-s3cached-job": job_name, "Range": "bytes=0-0"}
            if need:
                h["x-s3cached-job-need"] = need
            r = gw.req("GET", "/data/small", ak=key[0], sk=key[1], headers=h)
            E.eq("GET for job %s" % job_name, r.status, 206)
        get1(admin_key, "owned-job", "100M")
        wait_gets(gw, "owned-job", 1)
        get1(limited_key, "owned-job", "1")    # another key: served, need unchanged
        j = wait_gets(gw, "owned-job", 2)
        E.eq("need after another key's header", (j["need_bps"], j["need_source"]),
             (100 << 20, "header"))
        for i in range(260):
            get1(limited_key, "spam-%03d" % i, "1G")
        get1(needs_key, "real-job", "2G")
        j = wait_gets(gw, "real-job", 1)
        if not j:
            raise E.Fail("the real job has no row after another key's 260 job names: %s"
                         % [x["job"] for x in gw.stats()["jobs"]][-5:])
        E.eq("the real job's need", (j["need_bps"], j["need_source"]), (2 << 30, "header"))
        spam = [x["job"] for x in gw.stats()["jobs"] if x["job"].startswith("spam-")]
        if len(spam) > 32:
            raise E.Fail("one key made %d job rows (cap 32)" % len(spam))

    def stats_cli_and_metrics():
        p = subprocess.run([E.BIN, "stats", "--endpoint", gw.endpoint, "--admin-token", gw.token],
                           capture_output=True, timeout=30)
        out = p.stdout.decode()
        if p.returncode != 0 or "JOB" not in out or "cold-reader" not in out:
            raise E.Fail("s3cached stats: %s %s" % (out, p.stderr.decode()))
        line = [ln for ln in out.splitlines() if ln.startswith("slow-reader")]
        if not line or "64.0 MiB/s" not in line[0]:
            raise E.Fail("slow-reader's line: %s" % line)
        pc = subprocess.run([os.path.join(E.HERE, "promcheck.sh"), gw.endpoint + "/_/metrics",
                             gw.token], capture_output=True, timeout=60)
        if pc.returncode == 77:
            t.skip("promtool check of /_/metrics", "promtool not installed")
        elif pc.returncode != 0:
            raise E.Fail("promtool: %s" % pc.stderr.decode()[-2000:])
        rq = urllib.request.Request(gw.endpoint + "/_/metrics",
                                    headers={"Authorization": "Bearer " + gw.token})
        with urllib.request.urlopen(rq, timeout=10) as r:
            m = r.read().decode()
        dashboard_panels(m)
        for want in ('s3cached_job_stall_seconds_total{job="cold-reader",cause="backend"}',
                     's3cached_job_state{job="limited-reader",state="starved"}',
                     's3cached_client_stall_seconds_total{client="%s"' % L,
                     's3cached_job_need_bytes_per_second{job="slow-reader"} 67108864'):
            if want not in m:
                raise E.Fail("/_/metrics has no %s" % want)

    t.check("hits at a limited pace: idle, never starved, no stall", hits_at_a_limited_pace)
    t.check("cold reads through a 24 MiB/s backend: starved (backend), stall = client's wait "
            "within 20 %", cold_through_slow_backend)
    t.check("a key's rate= shows as stall with cause rate_limit", rate_limited_key)
    t.check("boto3 signs x-s3cached-job (event hook); need= of the key; the key's own job",
            boto3_hook_and_key_need)
    t.check("POST/GET/DELETE /_/jobs; bad names, needs and non-admins refused", jobs_endpoint)
    t.check("a job's need is its declaring key's; one key's 260 job names leave room for "
            "another's job", need_owner_and_key_cap)
    t.check("s3cached stats shows the jobs; /_/metrics passes promtool; the dashboard's job "
            "panels", stats_cli_and_metrics)
    gw.stop()

    # queueing: one worker; a GET whose lookup waits behind another's fetch
    q = E.Server(t, auth=["--credentials", creds], extra=backend + ["--workers", "1"]).start()

    def queued_behind_a_fetch():
        res = {}

        def big():
            res["big"] = curl_get(q, admin_key, "/data/big", job="q-big")

        th = threading.Thread(target=big)
        th.start()
        if not E.wait_until(lambda: q.stats()["backend"]["bytes_read"] >= 2 * MIB, timeout=20):
            raise E.Fail("the big fetch did not start")
        small = curl_get(q, admin_key, "/data/small", job="q-small")
        th.join()
        j = wait_gets(q, "q-small", 1)
        qs = j["stall_by_cause_s"]["queue"]
        print("       . small GET behind a 32 MiB fetch: %.2f s; stall %s"
              % (small[0], {k: round(v, 3) for k, v in j["stall_by_cause_s"].items()}))
        E.eq("main cause", j["main_cause_10s"], "queue")
        if qs < 0.5 * small[0]:
            raise E.Fail("queue %.3f s of a %.3f s GET" % (qs, small[0]))

    t.check("--workers 1: a lookup queued behind a fetch is stall with cause queue",
            queued_behind_a_fetch)
    q.stop()
    thr.terminate()
    thr.wait()
    up.stop()
    for s in (q, gw, tmp, up):
        s.cleanup()
    return t.finish()


if __name__ == "__main__":
    raise SystemExit(main())
