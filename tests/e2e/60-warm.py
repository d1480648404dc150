"""60-warm.py — warming the cache before an epoch: the CLI warms a prefix of 300 objects, after
which reading them all makes zero backend requests and every body is right; progress only grows
and ends at the totals; a key list with a missing key makes the CLI exit non-zero and lists it;
a manifest is warmed; cancel stops fetching; pinned objects survive eviction pressure; a live
read during a big warm-up is not queued behind it (as a ratio)."""
import json
import os
import shutil
import subprocess
import time
import urllib.request

import e2elib as E

B = "warmup"
KiB, MiB = 1024, 1 << 20


def main():
    t = E.Suite("60-warm.py")
    srv = E.Server(t, extra=["--cache-size", "96M", "--warm-concurrency", "4",
                             "--revalidate-after", "never"]).start()
    root = os.path.join(srv.store, B)
    sums = {}

    def put_file(key, size):
        p = os.path.join(root, key)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        b = os.urandom(size)
        with open(p, "wb") as f:
            f.write(b)
        sums[key] = E.sha(b)

    def admin(method, path, body=None, on=None):
        on = on or srv
        rq = urllib.request.Request(on.endpoint + path, method=method,
                                    data=json.dumps(body).encode() if body is not None else None,
                                    headers={"Authorization": "Bearer " + on.token})
        try:
            with urllib.request.urlopen(rq, timeout=30) as r:
                return r.status, json.loads(r.read() or b"null")
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def cli(*args):
        return subprocess.run([E.BIN, "warm", "--endpoint", srv.endpoint, "--admin-token",
                               srv.token] + list(args), capture_output=True, timeout=120)

    def wait_job(jid, limit=60):
        deadline = time.time() + limit
        while True:
            st, s = admin("GET", "/_/warm/" + jid)
            E.eq("GET /_/warm/" + jid, st, 200)
            if s["state"] not in ("queued", "running"):
                return s
            if time.time() > deadline:
                raise E.Fail("job did not finish: %r" % s)
            time.sleep(0.02)

    def page_cache_untouched():
        """A warm-up writes around the page cache (O_DIRECT, where the cache's file system
        allows it): of the warmed data files, only each one's last partial page is resident."""
        if not E.odirect_ok(srv.cache):
            return
        files = [os.path.join(d, f) for d, _, fs in os.walk(os.path.join(srv.cache, "data"))
                 for f in fs]
        res, size = E.page_cache_bytes(files)
        if not size or res > size // 4:
            raise E.Fail("after the warm-up %d of %d bytes of its data files are in the page "
                         "cache" % (res, size))

    def warm_prefix():
        for i in range(300):
            put_file("train/shard-%04d.tar" % i, 64 * KiB + i)
        p = cli("s3://%s/train/" % B)
        E.eq("CLI exit status", p.returncode, 0)
        if b"300/300" not in p.stdout:
            raise E.Fail("no final 300/300 progress line:\n" + p.stdout.decode()[-500:])
        _, jobs = admin("GET", "/_/warm")
        s = jobs["jobs"][0]
        E.eq("state", s["state"], "done")
        E.eq("objects done = total", (s["objects_done"], s["objects_total"]), (300, 300))
        total = sum(64 * KiB + i for i in range(300))
        E.eq("bytes done = total", (s["bytes_done"], s["bytes_total"]), (total, total))
        saved_path = os.path.join(srv.cache, "warm", s["job"] + ".json")

        def saved_state():
            with open(saved_path) as f:
                saved = json.load(f)
            return (saved["state"], saved["objects_done"])
        # the job reads "done" as soon as it finished; its file is written (fsync, rename)
        # right after, outside the job's lock: wait for it, bounded
        E.wait_until(lambda: saved_state() == ("done", 300), timeout=10)
        E.eq("saved job state", saved_state(), ("done", 300))
        E.eq("saved job state's mode (the owner's only)", "%o" % (os.stat(saved_path).st_mode & 0o777),
             "600")
        page_cache_untouched()
        before = srv.stats()["backend"]["requests"]
        for i in range(300):
            k = "train/shard-%04d.tar" % i
            r = srv.req("GET", "/%s/%s" % (B, k))
            E.eq("x-cache of %s" % k, r.h("x-cache"), "hit")
            E.eq("body of %s" % k, E.sha(r.body), sums[k])
        E.eq("backend requests while reading the warmed objects", srv.stats()["backend"]["requests"], before)

    def progress_and_errors():
        for i in range(40):
            put_file("val/%03d" % i, 256 * KiB)
        st, j = admin("POST", "/_/warm", {"bucket": B, "keys": ["val/%03d" % i for i in range(40)] + ["val/missing"]})
        E.eq("POST /_/warm", st, 202)
        last = (-1, -1)
        deadline = time.time() + 60
        while True:
            st, s = admin("GET", "/_/warm/" + j["job"])
            E.eq("GET /_/warm/ID", st, 200)
            cur = (s["objects_done"], s["bytes_done"])
            if cur < last:
                raise E.Fail("progress went backwards: %r then %r" % (last, cur))
            last = cur
            if s["state"] not in ("queued", "running"):
                break
            if time.time() > deadline:
                raise E.Fail("job did not finish: %r" % s)
            time.sleep(0.02)
        E.eq("state with a missing key", s["state"], "failed")
        E.eq("objects done", s["objects_done"], 40)
        E.eq("objects total", s["objects_total"], 41)
        E.eq("errors", [e["key"] for e in s["errors"]], ["val/missing"])
        E.eq("bytes done", s["bytes_done"], 40 * 256 * KiB)
        st, j = admin("POST", "/_/warm", {"bucket": B, "prefix": "val/"})
        s = wait_job(j["job"])
        E.eq("state of a re-warm", s["state"], "done")
        E.eq("re-warm: objects cached already", s["objects_cached_already"], 40)
        E.eq("re-warm: objects done", (s["objects_done"], s["objects_total"]), (40, 40))
        E.eq("re-warm: bytes", (s["bytes_done"], s["bytes_total"]), (40 * 256 * KiB, 40 * 256 * KiB))
        keys = os.path.join(srv.tmp, "keys.txt")
        with open(keys, "w") as f:
            f.write("val/000\nval/nope\n")
        p = cli("--keys", keys, "s3://%s" % B)
        if p.returncode == 0:
            raise E.Fail("CLI exited 0 although val/nope does not exist")
        if b"val/nope" not in p.stderr:
            raise E.Fail("CLI did not name the failed key:\n" + p.stderr.decode())

    def manifest():
        for i in range(20):
            put_file("m/%02d" % i, 32 * KiB)
        put_file("m/empty", 0)
        with open(os.path.join(root, "m.list"), "w") as f:
            f.write("\n".join(["m/empty"] + ["m/%02d" % i for i in reversed(range(20))]) + "\r\n\n")
        p = cli("--manifest", "s3://%s/m.list" % B)
        E.eq("CLI exit status (manifest)", p.returncode, 0)
        for i in range(20):
            E.eq("manifest key m/%02d cached" % i, srv.req("GET", "/%s/m/%02d" % (B, i)).h("x-cache"), "hit")

    def cancel():
        for i in range(60):
            put_file("big/%02d" % i, 1 * MiB)      # read by pin_survives too
        # The job must still be running when it is cancelled, however fast this machine warms
        # 60 MiB: a second gateway warms them from an upstream (an s3cached) through a relay
        # that lets 3 MiB through and then holds until the DELETE has been answered.
        up = E.Server(t).start()
        relay = E.Relay(up.port)
        gwc = E.Server(t, extra=["--backend", "http://127.0.0.1:%d" % relay.port,
                                 "--backend-access-key", up.ak, "--backend-secret-key", up.sk,
                                 "--warm-concurrency", "4", "--revalidate-after", "never"])
        try:
            shutil.copytree(os.path.join(root, "big"), os.path.join(up.store, B, "big"))
            gwc.start()
            relay.hold_after(3 * MiB)
            st, j = admin("POST", "/_/warm", {"bucket": B, "prefix": "big/"}, on=gwc)
            E.eq("POST", st, 202)
            relay.wait_held(30)
            t0 = time.time()
            st, _ = admin("DELETE", "/_/warm/" + j["job"], on=gwc)
            E.eq("DELETE /_/warm/ID", st, 200)
            relay.release()                          # the fetches in flight may end now
            deadline = time.time() + 30
            while True:
                _, s = admin("GET", "/_/warm/" + j["job"], on=gwc)
                if s["state"] not in ("queued", "running") or time.time() > deadline:
                    break
                time.sleep(0.05)
            E.eq("state after cancel", s["state"], "cancelled")
            if time.time() - t0 > 3:
                raise E.Fail("cancel took %.1f s" % (time.time() - t0))
            r0 = gwc.stats()["backend"]["bytes_read"]
            time.sleep(0.5)
            E.eq("backend bytes after the job stopped", gwc.stats()["backend"]["bytes_read"], r0)
            if s["objects_done"] >= 60:
                raise E.Fail("cancel stopped nothing: %r" % s)
            print("       . cancelled after %d of 60 objects" % s["objects_done"])
        finally:
            relay.cut()
            gwc.cleanup()
            up.cleanup()
            relay.close()
        st, _ = admin("GET", "/_/warm/nosuchjob")
        E.eq("unknown job", st, 404)
        st, _ = admin("POST", "/_/warm", {"bucket": B})
        E.eq("a body without a source", st, 400)
        st, _ = admin("POST", "/_/warm", {"bucket": "x", "prefix": ""})
        E.eq("an invalid bucket", st, 400)
        bad = [b"", b"{", b"[]", b"null", b'{"bucket":"warmup","keys":"a"}',
               b'{"bucket":"warmup","keys":[1,2]}', b'{"bucket":"warmup","keys":[""]}',
               b'{"bucket":"warmup","prefix":"a","keys":["a"]}', b'{"bucket":7,"prefix":"a"}',
               b'{"bucket":"warmup","manifest":""}', b'{"bucket":"warmup","prefix":"a"' + b"}" * 5,
               b'{"bucket":"warmup","keys":[' + b"[" * 5000 + b"]" * 5000 + b"]}", b"\xff\xfe\x00",
               b'{"bucket":"warmup","prefix":"a","prefix":"b"}', b'{"bucket":"warmup","prefix":"\xe9"}']
        for body in bad:
            for path in ("/_/warm", "/_/unpin"):
                rq = urllib.request.Request(srv.endpoint + path, method="POST", data=body,
                                            headers={"Authorization": "Bearer " + srv.token})
                try:
                    urllib.request.urlopen(rq, timeout=30)
                    raise E.Fail("%s accepted %r" % (path, body[:60]))
                except urllib.error.HTTPError as e:
                    E.eq("status of %s with %r" % (path, body[:40]), e.code, 400)
                    if b"<Code>" not in e.read():
                        raise E.Fail("no S3 XML error for %r" % body[:40])
        E.eq("health after bad bodies", srv.req("GET", "/_/health").status, 200)
        st, _ = admin("DELETE", "/_/warm/nosuchjob")
        E.eq("cancel of an unknown job", st, 404)

    def pin_survives():
        for i in range(8):
            put_file("pin/%d" % i, 2 * MiB)
        p = cli("--pin", "s3://%s/pin/" % B)
        E.eq("CLI exit status (--pin)", p.returncode, 0)
        if srv.stats()["cache"]["pinned_objects"] < 8:
            raise E.Fail("pinned objects: %r" % srv.stats()["cache"])
        for i in range(60):          # 120 MiB through a 96 MiB cache
            srv.req("GET", "/%s/big/%02d" % (B, i))
            srv.req("GET", "/%s/big/%02d" % (B, i))
        if srv.stats()["cache"]["evictions"] == 0:
            raise E.Fail("no eviction pressure happened")
        for i in range(8):
            r = srv.req("GET", "/%s/pin/%d" % (B, i))
            E.eq("pinned pin/%d after eviction pressure" % i, r.h("x-cache"), "hit")
        st, j = admin("POST", "/_/unpin", {"bucket": B, "prefix": "pin/"})
        E.eq("POST /_/unpin", st, 200)
        E.eq("unpinned", j["unpinned"], 8)

    def live_read_not_queued():
        for i in range(40):
            put_file("live/bg%02d" % i, 2 * MiB)
        put_file("live/probe-a", 512 * KiB)
        put_file("live/probe-b", 512 * KiB)
        t0 = time.time()
        srv.req("GET", "/%s/live/probe-a" % B)
        alone = time.time() - t0
        st, j = admin("POST", "/_/warm", {"bucket": B, "prefix": "live/bg"})
        E.eq("POST", st, 202)
        time.sleep(0.1)
        t0 = time.time()
        r = srv.req("GET", "/%s/live/probe-b" % B)
        during = time.time() - t0
        E.eq("probe status", r.status, 200)
        admin("DELETE", "/_/warm/" + j["job"])
        if during > max(10 * alone, 0.5):
            raise E.Fail("a cold read took %.3f s during the warm-up vs %.3f s alone" % (during, alone))

    def small_pool():
        s2 = E.Server(t, extra=["--workers", "2", "--warm-concurrency", "4",
                                "--revalidate-after", "never"]).start()
        try:
            r2 = os.path.join(s2.store, B)
            os.makedirs(os.path.join(r2, "bg"), exist_ok=True)
            for i in range(60):
                with open(os.path.join(r2, "bg/%02d" % i), "wb") as f:
                    f.write(os.urandom(2 * MiB))
            probes = {}
            for n in ("a", "b", "c"):
                probes[n] = os.urandom(1 * MiB)
                with open(os.path.join(r2, "probe-" + n), "wb") as f:
                    f.write(probes[n])
            t0 = time.time()
            s2.req("GET", "/%s/probe-a" % B)
            alone = time.time() - t0
            rq = urllib.request.Request(s2.endpoint + "/_/warm", method="POST",
                                        data=json.dumps({"bucket": B, "prefix": "bg/"}).encode(),
                                        headers={"Authorization": "Bearer " + s2.token})
            with urllib.request.urlopen(rq, timeout=30) as r:
                jid = json.loads(r.read())["job"]
            time.sleep(0.1)
            worst = 0
            for n in ("b", "c"):
                t0 = time.time()
                r = s2.req("GET", "/%s/probe-%s" % (B, n))
                worst = max(worst, time.time() - t0)
                E.eq("probe %s body" % n, E.sha(r.body), E.sha(probes[n]))
            if worst > max(10 * alone, 0.5):
                raise E.Fail("a cold read took %.3f s during the warm-up vs %.3f s alone" % (worst, alone))
            deadline = time.time() + 60
            while True:
                rq = urllib.request.Request(s2.endpoint + "/_/warm/" + jid,
                                            headers={"Authorization": "Bearer " + s2.token})
                with urllib.request.urlopen(rq, timeout=30) as r:
                    st = json.loads(r.read())
                if st["state"] not in ("queued", "running") or time.time() > deadline:
                    break
                time.sleep(0.05)
            E.eq("warm-up with 2 workers", (st["state"], st["objects_done"]), ("done", 60))
        finally:
            s2.stop()
            s2.cleanup()

    def capacity_and_fit():
        for i in range(30):
            put_file("bigpin/%02d" % i, 2 * MiB)    # 60 MiB: over the 48 MiB pin share
        p = cli("--pin", "s3://%s/bigpin/" % B)
        if p.returncode == 0:
            raise E.Fail("a pinned set over the pin share was accepted")
        if b"fit" not in p.stderr:
            raise E.Fail("no clear message:\n" + p.stderr.decode())
        st, j = admin("POST", "/_/warm", {"bucket": B, "prefix": "bigpin/", "pin": True, "fit": True})
        E.eq("POST with fit", st, 202)
        deadline = time.time() + 60
        while True:
            _, s = admin("GET", "/_/warm/" + j["job"])
            if s["state"] not in ("queued", "running") or time.time() > deadline:
                break
            time.sleep(0.05)
        E.eq("state with fit", s["state"], "done")
        if not s.get("objects_skipped"):
            raise E.Fail("nothing reported as skipped: %r" % s)
        st, _ = admin("POST", "/_/unpin", {"bucket": B, "prefix": "bigpin/"})
        E.eq("unpin", st, 200)

    def survives_restart():
        for i in range(80):
            put_file("rs/%02d" % i, 1 * MiB)
        st, j = admin("POST", "/_/warm", {"bucket": B, "prefix": "rs/"})
        E.eq("POST", st, 202)
        time.sleep(0.05)
        srv.stop()
        srv.start()
        st, s = admin("GET", "/_/warm/" + j["job"])
        E.eq("job after a restart", st, 200)
        if s["state"] not in ("interrupted", "done"):
            raise E.Fail("state after a restart: %r" % s)
        st, all_jobs = admin("GET", "/_/warm")
        if j["job"] not in [x["job"] for x in all_jobs["jobs"]]:
            raise E.Fail("GET /_/warm lacks the job")

    t.check("CLI warms a prefix of 300 objects; then 0 backend requests, bodies right", warm_prefix)
    t.check("progress only grows; a missing key fails the job and the CLI, and is listed", progress_and_errors)
    t.check("a manifest object is warmed", manifest)
    t.check("cancel stops fetching; bad requests are 4xx", cancel)
    t.check("pinned objects survive eviction pressure; unpin", pin_survives)
    t.check("a live cold read during a warm-up is not queued behind it", live_read_not_queued)
    t.check("--workers 2: a live cold read during a big warm-up is not starved", small_pool)
    t.check("a pinned set over the pin share fails up front; \"fit\" warms what fits", capacity_and_fit)
    t.check("a job survives a restart (interrupted or done, never gone)", survives_restart)
    srv.stop()
    srv.cleanup()
    return t.finish()


if __name__ == "__main__":
    raise SystemExit(main())
