"""e2elib.py: shared helpers of the Python e2e tests (run with /usr/bin/python3).

Owns: starting/stopping build/s3cached by pid (like lib.sh), a pure-Python
SigV4 signer (header auth, presigned URLs, aws-chunked streaming frames), raw
HTTP requests over a socket (any path, any header, disconnect mid-body), and a
tiny pass/fail harness whose last line is "NAME: N passed, N failed".
Also a CLI used by the shell tests: `e2elib.py req --help`.
"""
import base64
import binascii
import datetime
import hashlib
import hmac
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
import urllib.parse
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
BIN = os.environ.get("S3CACHED_BIN", os.path.join(REPO, "build", "s3cached"))
REGION = "us-east-1"
EMPTY_SHA = hashlib.sha256(b"").hexdigest()

for _v in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "AWS_CA_BUNDLE",
           "AWS_PROFILE", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
           "AWS_ENDPOINT_URL"):
    os.environ.pop(_v, None)
os.environ["NO_PROXY"] = os.environ["no_proxy"] = "*"
os.environ["AWS_EC2_METADATA_DISABLED"] = "true"


# --- harness ------------------------------------------------------------------------------

class Fail(Exception):
    pass


class Suite:
    """check(name, fn): fn raises (AssertionError/Fail/anything) to fail; prints ok/FAIL.
    skip(name, why): a check that cannot run here, counted as skipped, never as passed."""

    def __init__(self, name=None):
        self.name = name or os.path.basename(sys.argv[0])
        self.passed = 0
        self.failed = 0
        self.skipped = 0

    def check(self, name, fn, *a, **kw):
        try:
            fn(*a, **kw)
        except Exception as e:  # noqa: BLE001 - a test failure of any kind
            self.failed += 1
            print("FAIL - %s" % name)
            msg = "%s: %s" % (type(e).__name__, e) if not isinstance(e, (Fail, AssertionError)) else str(e)
            for line in msg.splitlines()[:25]:
                print("       | " + line)
            if not isinstance(e, (Fail, AssertionError)):
                tb = traceback.format_exc().splitlines()
                for line in tb[-6:-1]:
                    print("       | " + line)
        else:
            self.passed += 1
            print("ok   - %s" % name)
        sys.stdout.flush()

    def record(self, name, ok, msg=""):
        def f():
            if not ok:
                raise Fail(msg)
        self.check(name, f)

    def skip(self, name, why):
        self.skipped += 1
        print("skip - %s: %s" % (name, why))
        sys.stdout.flush()

    def finish(self):
        print("%s: %d passed, %d failed%s" % (self.name, self.passed, self.failed,
                                             ", %d skipped" % self.skipped if self.skipped else ""))
        sys.stdout.flush()
        return 0 if self.failed == 0 else 1


def eq(what, got, want):
    if got != want:
        raise Fail("%s: expected %r, got %r" % (what, want, got))


def wait_until(pred, timeout=30, every=0.05):
    """Polls @pred() until it returns a true value (returned) or @timeout seconds pass (then the
    last value is returned, so the caller's own assertion reports what was seen). The way to
    wait for something the server does in the background, instead of sleeping and hoping."""
    deadline = time.time() + timeout
    while True:
        v = pred()
        if v or time.time() > deadline:
            return v
        time.sleep(every)


def sha(b):
    return hashlib.sha256(b).hexdigest()


def in_memory(path):
    """Whether @path is on tmpfs or ramfs (Debian 13 mounts /tmp so): a cache directory there
    fills through the page cache, never through a fill window (cache/fillwin.c)."""
    r = subprocess.run(["stat", "-f", "-c", "%T", path], capture_output=True, text=True)
    return r.stdout.strip() in ("tmpfs", "ramfs")


def odirect_ok(cache_dir):
    """Whether the file system of @cache_dir takes O_DIRECT (tmpfs does not): where it does
    not, warm-ups write through the page cache and tests cannot check that they go around it."""
    probe = os.path.join(cache_dir, "tmp", "odirect-probe")
    try:
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_DIRECT, 0o644))
        return True
    except OSError:
        print("       # the cache's file system refuses O_DIRECT: page cache not checked")
        return False
    finally:
        if os.path.exists(probe):
            os.unlink(probe)


def page_cache_bytes(files):
    """(bytes resident in the page cache, bytes in all) of @files, by fincore."""
    if not files:
        return 0, 0
    out = subprocess.run(["fincore", "--bytes", "--noheadings", "--output", "RES,SIZE"] + files,
                         capture_output=True, timeout=60).stdout.decode().split()
    return sum(map(int, out[0::2])), sum(map(int, out[1::2]))


def sha_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for blk in iter(lambda: f.read(1 << 20), b""):
            h.update(blk)
    return h.hexdigest()


def same_bytes(what, got, want):
    if got != want:
        raise Fail("%s: bytes differ: got %d bytes sha256 %s, want %d bytes sha256 %s"
                   % (what, len(got), sha(got)[:16], len(want), sha(want)[:16]))


def client_error(fn, *a, **kw):
    """Calls a boto3 method that must fail; returns (status, code, request_id_header, err)."""
    import botocore.exceptions
    try:
        r = fn(*a, **kw)
    except botocore.exceptions.ClientError as e:
        md = e.response.get("ResponseMetadata", {})
        return (md.get("HTTPStatusCode"), e.response.get("Error", {}).get("Code"),
                md.get("HTTPHeaders", {}).get("x-amz-request-id"), e)
    raise Fail("expected an error, the call succeeded: %r" % (r,))


def expect_client_error(what, fn, status, code, *a, **kw):
    st, c, _, e = client_error(fn, *a, **kw)
    if st != status or c != code:
        raise Fail("%s: expected %s %s, got %s %s (%s)" % (what, status, code, st, c, e))


# --- server -------------------------------------------------------------------------------

_LIVE = []


def _atexit():
    # a test that crashed still stops (by pid) the servers it started and prints a tally
    for srv in list(_LIVE):
        if srv.proc is not None or os.path.isdir(srv.tmp):
            try:
                srv.cleanup()
            except Exception:  # noqa: BLE001
                pass


def _on_term(signum, frame):
    raise SystemExit(128 + signum)


import atexit  # noqa: E402
atexit.register(_atexit)
signal.signal(signal.SIGTERM, _on_term)


def setup_or_die(t, srv, fn):
    """Runs fixture code as a check; if it fails, stops the server and exits with the tally."""
    before = t.failed
    t.check("setup", fn)
    if t.failed != before:
        srv.stop()
        srv.cleanup()
        sys.exit(t.finish())

def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


class Server:
    """One s3cached on a temp store/cache. Use: srv = Server(suite); srv.start(); ...; srv.stop()."""

    def __init__(self, suite, auth=None, extra=(), env=None, port=None):
        self.suite = suite
        self.fixed_port = port  # restarts listen on the same port (an upstream others point at)
        self.tmp = tempfile.mkdtemp(prefix="s3c-e2e-py.", dir=os.environ.get("TMPDIR", "/tmp"))
        self.store = os.path.join(self.tmp, "store")
        self.cache = os.path.join(self.tmp, "cache")
        os.makedirs(self.store)
        os.makedirs(self.cache)
        self.ak = "AKPY" + binascii.hexlify(os.urandom(6)).decode().upper()
        self.sk = binascii.hexlify(os.urandom(20)).decode()
        self.token = "tok" + binascii.hexlify(os.urandom(8)).decode()
        self.auth = auth if auth is not None else ["--access-key", self.ak, "--secret-key", self.sk]
        self.extra = list(extra)
        self.env = dict(env or {})  # added to the server's environment (e.g. LD_PRELOAD)
        self.proc = None
        self.port = None
        self.n = 0
        _LIVE.append(self)

    @property
    def endpoint(self):
        return "http://127.0.0.1:%d" % self.port

    def start(self):
        if not os.access(BIN, os.X_OK):
            raise SystemExit(self._fatal("no executable at S3CACHED_BIN=%s (run make)" % BIN))
        for _ in range(3):
            self.n += 1
            self.port = self.fixed_port or free_port()
            self.log = os.path.join(self.tmp, "server.%d.log" % self.n)
            cmd = [BIN, "serve", "--listen", "127.0.0.1:%d" % self.port,
                   "--backend", "file://" + self.store, "--cache-dir", self.cache,
                   "--region", REGION, "--admin-token", self.token, "--log-level", "debug"]
            cmd += self.auth + self.extra
            with open(self.log, "wb") as lf:
                self.proc = subprocess.Popen(cmd, stdout=lf, stderr=subprocess.STDOUT,
                                             stdin=subprocess.DEVNULL,
                                             env=dict(os.environ, **self.env) if self.env else None)
            deadline = time.time() + 10
            while time.time() < deadline:
                if self.proc.poll() is not None:
                    break
                try:
                    with urllib.request.urlopen(self.endpoint + "/_/health", timeout=1) as r:
                        if r.status == 200 and r.read().startswith(b"ok"):
                            return self
                except Exception:  # noqa: BLE001 - not up yet
                    pass
                time.sleep(0.1)
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
                raise SystemExit(self._fatal("no 'ok' from /_/health within 10 s; log tail:\n"
                                             + self.log_tail()))
            if b"in use" in open(self.log, "rb").read().lower():
                continue
            break
        raise SystemExit(self._fatal("s3cached exited during startup (status %s); log tail:\n%s"
                                     % (self.proc.returncode, self.log_tail())))

    def _fatal(self, msg):
        self.suite.record("start server", False, msg)
        self.cleanup()
        return self.suite.finish() or 1

    def log_tail(self, n=20):
        try:
            return "\n".join(open(self.log, errors="replace").read().splitlines()[-n:])
        except OSError:
            return "(no log)"

    def stop(self, sig=signal.SIGTERM):
        """Signal, wait ≤5 s, KILL; records a check that the exit status is 0."""
        p, self.proc = self.proc, None
        if p is None:
            return
        if p.poll() is not None:
            lines = open(self.log, errors="replace").read().splitlines()
            other = [ln for ln in lines if " access " not in ln][-8:]
            acc = [ln for ln in lines if " access " in ln][-4:]
            self.suite.record("server exits 0 on %s" % signal.Signals(sig).name, False,
                              "the server had already died (status %s) before the signal; log (non-access):\n%s\n"
                              "--- last access lines:\n%s" % (p.returncode, "\n".join(other), "\n".join(acc)))
            return
        p.send_signal(sig)
        try:
            rc = p.wait(5)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            self.suite.record("server exits 0 on %s" % signal.Signals(sig).name, False,
                              "still running 5 s after the signal; killed. log tail:\n" + self.log_tail(10))
            return
        self.suite.record("server exits 0 on %s" % signal.Signals(sig).name, rc == 0,
                          "exit status %s; log tail:\n%s" % (rc, self.log_tail(10)))

    def cleanup(self):
        if self.proc is not None:
            self.stop()
        if self in _LIVE:
            _LIVE.remove(self)
        if os.environ.get("E2E_KEEP") == "1":
            print("kept temp dir: " + self.tmp)
        else:
            shutil.rmtree(self.tmp, ignore_errors=True)

    def boto3(self, **cfg):
        import boto3
        import botocore.config
        conf = dict(s3={"addressing_style": "path"}, retries={"max_attempts": 1},
                    connect_timeout=10, read_timeout=60)
        conf.update(cfg)
        return boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id=self.ak,
                            aws_secret_access_key=self.sk, region_name=REGION,
                            config=botocore.config.Config(**conf))

    def stats(self):
        import json
        rq = urllib.request.Request(self.endpoint + "/_/stats",
                                    headers={"Authorization": "Bearer " + self.token})
        with urllib.request.urlopen(rq, timeout=10) as r:
            return json.load(r)

    def settled_stats(self, client=None, timeout=10):
        """/_/stats once no request of @client (default: this server's access key) is in
        flight. The server charges a request's bytes and counts it in the cache counters as it
        lets go of it, after the client has its last byte and just before the client's
        in_flight drops: a counter sampled right after a request may still grow by it (clean-
        clone runs on a loaded machine saw it in e2e 50 and 57). Take before/after samples
        here. Raises Fail after @timeout s."""
        client = client or self.ak

        def idle():
            st = self.stats()
            busy = [c for c in st["clients"] if c["client"] == client and c["in_flight"]]
            return None if busy else st
        st = wait_until(idle, timeout=timeout)
        if st is None:
            raise Fail("%s still has requests in flight after %d s" % (client, timeout))
        return st

    def req(self, method, path, **kw):
        kw.setdefault("ak", self.ak)
        kw.setdefault("sk", self.sk)
        return request(self.endpoint, method, path, **kw)


# --- pausable TCP relay ------------------------------------------------------------------

def build_helper(name, src, extra, tmp):
    """A helper built beside the server (make builds it: @name under the binary's directory),
    else compiled from @src with @extra flags into @tmp. Its path."""
    have = os.path.join(os.path.dirname(os.path.abspath(BIN)), name)
    if os.access(have, os.R_OK) and os.path.getmtime(have) >= os.path.getmtime(src):
        return have
    out = os.path.join(tmp, os.path.basename(name))
    subprocess.run(["cc", "-std=gnu11", "-O2", "-D_GNU_SOURCE", "-o", out, src] + extra,
                   check=True, timeout=120)
    return out


def fault_shim(tmp):
    """A FaultShim over tests/faults/faultinj.c, built beside the server or in @tmp."""
    so = build_helper("faults/faultinj.so", os.path.join(REPO, "tests", "faults", "faultinj.c"),
                      ["-fPIC", "-shared", "-ldl"], tmp)
    return FaultShim(so, tmp)


class FaultShim:
    """The fault shim (tests/faults/faultinj.c, built as @so) for a server, its rules in a control
    file under @tmp changed at run time. Start the server with env=shim.env."""

    def __init__(self, so, tmp):
        self.so = so
        self.ctl = os.path.join(tmp, "fault.ctl")
        self.log = os.path.join(tmp, "fault.log")
        open(self.ctl, "w").close()
        self.env = {"LD_PRELOAD": so, "S3C_FAULT_CTL": self.ctl, "S3C_FAULT_LOG": self.log}

    def rules(self, srv, text, n):
        """Puts @text in force (@n rules) in @srv; waits for the shim to say so (the shim reads
        its control file when the server makes a call it watches: a request's log line)."""
        before = open(self.log).read().count("rules ") if os.path.exists(self.log) else 0
        with open(self.ctl + ".new", "w") as f:
            f.write(text + "\n")
        os.rename(self.ctl + ".new", self.ctl)

        def loaded():
            try:
                urllib.request.urlopen(srv.endpoint + "/_/health", timeout=5).read()
            except Exception:  # noqa: BLE001 - only a poke
                pass
            if not os.path.exists(self.log):
                return False
            lines = [ln for ln in open(self.log).read().splitlines() if ln.startswith("rules ")]
            return len(lines) > before and lines[-1] == "rules %d" % n
        return wait_until(loaded, timeout=10)


class Relay:
    """A TCP relay on 127.0.0.1 between clients (a gateway) and a target port (its upstream),
    so a test decides exactly when the upstream "dies" mid-body, whatever the machine's speed.
    Transparent until hold_after(n): once n more bytes have gone from the target to the clients
    (all connections together), nothing more goes that way (the target's writes back up) and
    wait_held() returns. cut() then closes every connection in flight at both ends, as the
    kernel of a dead upstream would, and ends the hold; release() ends it with nothing cut. A connection the target refuses is
    reset. Use: r = Relay(up.port); gateway --backend http://127.0.0.1:r.port; r.close()."""

    def __init__(self, target_port):
        import threading
        self.target = target_port          # may change (an upstream restarted elsewhere)
        self.cv = threading.Condition()
        self.budget = None                 # bytes target->client left before the hold; None: no hold
        self.held = threading.Event()
        self.conns = set()                 # (client, upstream) socket pairs in flight
        self.n_conns = 0                   # connections accepted so far
        self.lsock = socket.socket()
        self.lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.lsock.bind(("127.0.0.1", 0))
        self.lsock.listen(256)
        self.port = self.lsock.getsockname()[1]
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        import threading
        while True:
            try:
                c, _ = self.lsock.accept()
            except OSError:
                return
            try:
                u = socket.create_connection(("127.0.0.1", self.target), timeout=10)
                u.settimeout(None)
            except OSError:
                c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                c.close()
                continue
            pair = (c, u)
            with self.cv:
                if self._closed:
                    c.close()
                    u.close()
                    return
                self.conns.add(pair)
                self.n_conns += 1
            threading.Thread(target=self._pump, args=(c, u, pair, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(u, c, pair, True), daemon=True).start()

    def _allow(self, n):
        """How many of @n target->client bytes may go now; blocks while held. (k, spent)."""
        with self.cv:
            while True:
                if self.budget is None:
                    return n, False
                if self.budget > 0:
                    k = min(n, self.budget)
                    self.budget -= k
                    return k, self.budget == 0
                self.cv.wait()

    def _pump(self, src, dst, pair, down):
        try:
            while True:
                data = src.recv(1 << 18)
                if not data:
                    break
                while data:
                    k, spent = self._allow(len(data)) if down else (len(data), False)
                    dst.sendall(data[:k])
                    data = data[k:]
                    if spent:
                        self.held.set()
        except OSError:
            pass
        if not down:                       # the client is done sending: pass the half-close on
            try:
                dst.shutdown(socket.SHUT_WR)
            except OSError:
                pass
            return
        with self.cv:                      # the target's side ended: so does the connection
            self.conns.discard(pair)
        self._end(pair)

    @staticmethod
    def _end(pair):
        for s in pair:
            try:
                s.shutdown(socket.SHUT_RDWR)   # wakes the other pump's recv
            except OSError:
                pass
            s.close()

    def hold_after(self, n):
        """From now on, let @n more bytes go from the target to the clients, then hold."""
        with self.cv:
            self.held.clear()
            self.budget = n
            self.cv.notify_all()

    def release(self):
        """Ends a hold (or a hold to come): everything flows again."""
        with self.cv:
            self.budget = None
            self.cv.notify_all()

    def wait_held(self, timeout=30):
        if not self.held.wait(timeout):
            raise Fail("relay: %s bytes not forwarded within %d s" % (self.budget, timeout))

    def cut(self):
        """Closes every connection in flight (both ends) and ends the hold."""
        with self.cv:
            pairs, self.conns = list(self.conns), set()
            self.budget = None
            self.cv.notify_all()
        for pair in pairs:
            self._end(pair)

    def close(self):
        with self.cv:
            self._closed = True
        try:
            self.lsock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.lsock.close()
        self.cut()


# --- SigV4 --------------------------------------------------------------------------------

def _h(key, msg):
    return hmac.new(key, msg.encode() if isinstance(msg, str) else msg, hashlib.sha256).digest()


def signing_key(sk, date, region=REGION, service="s3"):
    return _h(_h(_h(_h(("AWS4" + sk).encode(), date), region), service), "aws4_request")


def uri_encode(s, slash=True):
    return urllib.parse.quote(s, safe="-_.~" + ("/" if not slash else ""))


def canonical_query(query):
    """query: raw string 'a=b&c' (already percent-encoded as it goes on the wire)."""
    if not query:
        return ""
    pairs = []
    for part in query.split("&"):
        if part == "":
            continue
        k, _, v = part.partition("=")
        k = uri_encode(urllib.parse.unquote(k), slash=True)
        v = uri_encode(urllib.parse.unquote(v), slash=True)
        pairs.append((k, v))
    pairs.sort()
    return "&".join("%s=%s" % kv for kv in pairs)


def amz_now(offset_s=0):
    t = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=offset_s)
    return t.strftime("%Y%m%dT%H%M%SZ")


def sign_headers(method, path, query, headers, payload_hash, ak, sk, amz_date=None,
                 region=REGION, signed=None, no_spaces=False):
    """Adds x-amz-date, x-amz-content-sha256 and Authorization to @headers (a dict with
    lower-case names, Host included). @path is the raw wire path (used as the canonical URI).
    Returns (signature, scope, amz_date)."""
    amz_date = amz_date or amz_now()
    date = amz_date[:8]
    headers["x-amz-date"] = amz_date
    if payload_hash is not None:
        headers["x-amz-content-sha256"] = payload_hash
    names = sorted(signed if signed is not None else headers.keys())
    canon_h = "".join("%s:%s\n" % (n, " ".join(str(headers[n]).strip().split())) for n in names)
    sh = ";".join(names)
    creq = "\n".join([method, path, canonical_query(query), canon_h, sh,
                      payload_hash if payload_hash is not None else EMPTY_SHA])
    scope = "%s/%s/s3/aws4_request" % (date, region)
    sts = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope, sha(creq.encode())])
    sig = hmac.new(signing_key(sk, date, region), sts.encode(), hashlib.sha256).hexdigest()
    sep = "," if no_spaces else ", "
    headers["authorization"] = "AWS4-HMAC-SHA256 Credential=%s/%s%sSignedHeaders=%s%sSignature=%s" % (
        ak, scope, sep, sh, sep, sig)
    return sig, scope, amz_date


def presign(endpoint, method, path, ak, sk, expires=300, amz_date=None, query="", region=REGION):
    """A presigned URL (UNSIGNED-PAYLOAD, only host signed)."""
    amz_date = amz_date or amz_now()
    date = amz_date[:8]
    host = urllib.parse.urlsplit(endpoint).netloc
    scope = "%s/%s/s3/aws4_request" % (date, region)
    q = [("X-Amz-Algorithm", "AWS4-HMAC-SHA256"), ("X-Amz-Credential", "%s/%s" % (ak, scope)),
         ("X-Amz-Date", amz_date), ("X-Amz-Expires", str(expires)), ("X-Amz-SignedHeaders", "host")]
    qs = "&".join("%s=%s" % (k, uri_encode(v)) for k, v in q)
    if query:
        qs = query + "&" + qs
    creq = "\n".join([method, path, canonical_query(qs), "host:%s\n" % host, "host", "UNSIGNED-PAYLOAD"])
    sts = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope, sha(creq.encode())])
    sig = hmac.new(signing_key(sk, date, region), sts.encode(), hashlib.sha256).hexdigest()
    return "%s%s?%s&X-Amz-Signature=%s" % (endpoint, path, qs, sig)


# --- aws-chunked ----------------------------------------------------------------------------

def chunk_sig(sk, amz_date, scope, prev_sig, data, region=REGION):
    sts = "\n".join(["AWS4-HMAC-SHA256-PAYLOAD", amz_date, scope, prev_sig, EMPTY_SHA, sha(data)])
    return hmac.new(signing_key(sk, amz_date[:8], region), sts.encode(), hashlib.sha256).hexdigest()


def trailer_sig(sk, amz_date, scope, prev_sig, trailer_text, region=REGION):
    sts = "\n".join(["AWS4-HMAC-SHA256-TRAILER", amz_date, scope, prev_sig, sha(trailer_text.encode())])
    return hmac.new(signing_key(sk, amz_date[:8], region), sts.encode(), hashlib.sha256).hexdigest()


def crc32_b64(data):
    return base64.b64encode((binascii.crc32(data) & 0xFFFFFFFF).to_bytes(4, "big")).decode()


def aws_chunked_body(chunks, sk, amz_date, scope, seed_sig, trailer=None, tamper=None):
    """Signed aws-chunked frames for @chunks (list of bytes). @trailer: (name, value) for
    the -TRAILER variant. @tamper: 'data' flips a byte of chunk 0 after signing, 'sig' flips
    a hex digit of chunk 0's signature, 'trailer-sig' flips the trailer signature."""
    out = []
    prev = seed_sig
    for i, c in enumerate(list(chunks) + [b""]):
        s = chunk_sig(sk, amz_date, scope, prev, c)
        prev = s
        if tamper == "sig" and i == 0:
            s = ("0" if s[0] != "0" else "1") + s[1:]
        data = c
        if tamper == "data" and i == 0 and c:
            data = bytes([c[0] ^ 1]) + c[1:]
        if c:
            out.append(b"%x;chunk-signature=%s\r\n" % (len(data), s.encode()) + data + b"\r\n")
        else:
            out.append(b"0;chunk-signature=%s\r\n" % s.encode())
    if trailer is None:
        out.append(b"\r\n")
    else:
        name, value = trailer
        text = "%s:%s\n" % (name, value)
        ts = trailer_sig(sk, amz_date, scope, prev, text)
        if tamper == "trailer-sig":
            ts = ("0" if ts[0] != "0" else "1") + ts[1:]
        out.append(("%s:%s\r\nx-amz-trailer-signature:%s\r\n\r\n" % (name, value, ts)).encode())
    return b"".join(out)


def unsigned_chunked_body(chunks, trailer=None):
    out = [b"%x\r\n" % len(c) + c + b"\r\n" for c in chunks if c]
    out.append(b"0\r\n")
    if trailer:
        out.append(("%s:%s\r\n" % trailer).encode())
    out.append(b"\r\n")
    return b"".join(out)


# --- raw HTTP -------------------------------------------------------------------------------

class Resp:
    def __init__(self, status, headers, body):
        self.status = status
        self.headers = headers          # dict, lower-case names
        self.body = body

    def h(self, name):
        return self.headers.get(name.lower())

    def code(self):
        import re
        m = re.search(rb"<Code>([^<]*)</Code>", self.body or b"")
        return m.group(1).decode() if m else None

    def request_id_ok(self):
        import re
        m = re.search(rb"<RequestId>([^<]*)</RequestId>", self.body or b"")
        return bool(m) and m.group(1).decode() == (self.h("x-amz-request-id") or "")

    def __repr__(self):
        return "<%s %s %r>" % (self.status, self.code(), (self.body or b"")[:300])


def expect_error(what, r, status, code):
    if r.status != status or r.code() != code:
        raise Fail("%s: expected %s %s, got %s %s body=%r" % (what, status, code, r.status, r.code(),
                                                           (r.body or b"")[:300]))
    if not r.request_id_ok():
        raise Fail("%s: <RequestId> in the error XML must equal x-amz-request-id (%r); body=%r"
                   % (what, r.h("x-amz-request-id"), r.body[:300]))


def _read_response(sock, method, timeout=60):
    sock.settimeout(timeout)
    f = sock.makefile("rb")
    while True:
        line = f.readline(65537)
        if not line:
            raise Fail("connection closed before a status line")
        parts = line.decode("latin-1").split(" ", 2)
        status = int(parts[1])
        headers = {}
        while True:
            hl = f.readline(65537).decode("latin-1")
            if hl in ("\r\n", "\n", ""):
                break
            k, _, v = hl.partition(":")
            headers[k.strip().lower()] = v.strip()
        if status == 100:
            continue
        break
    body = b""
    if method == "HEAD" or status in (204, 304):
        pass
    elif headers.get("transfer-encoding", "").lower() == "chunked":
        while True:
            n = int(f.readline().split(b";")[0], 16)
            if n == 0:
                while f.readline() not in (b"\r\n", b"\n", b""):
                    pass
                break
            body += f.read(n)
            f.readline()
    elif "content-length" in headers:
        body = f.read(int(headers["content-length"]))
    else:
        body = f.read()
    return Resp(status, headers, body)


def request(endpoint, method, path, query="", headers=None, body=b"", ak=None, sk=None,
            payload="signed", anon=False, amz_date=None, no_spaces=False, tamper_sig=False,
            send_bytes=None, close_after_send=False, te_chunked=False, host=None,
            no_content_length=False, signed=None, timeout=60):
    """One HTTP/1.1 request on a fresh connection. @path is sent exactly as given.
    payload: 'signed' (hex sha256 of body), 'unsigned' (UNSIGNED-PAYLOAD), None (no header),
    or any literal string (e.g. a STREAMING-* value or a wrong hash).
    send_bytes: send only this many body bytes; close_after_send: then close without reading.
    te_chunked: send @body with HTTP Transfer-Encoding: chunked (in 8 KiB pieces)."""
    u = urllib.parse.urlsplit(endpoint)
    hdrs = {"host": host or u.netloc}
    for k, v in (headers or {}).items():
        hdrs[k.lower()] = v
    if te_chunked:
        hdrs["transfer-encoding"] = "chunked"
    elif not no_content_length and (body or method in ("PUT", "POST")):
        hdrs.setdefault("content-length", str(len(body)))
    if not anon:
        if payload == "signed":
            ph = sha(body)
        elif payload == "unsigned":
            ph = "UNSIGNED-PAYLOAD"
        else:
            ph = payload
        sig_headers = dict(hdrs)
        if signed is None:
            # sign what SDKs sign: host, x-amz-*, content-type/md5/encoding/length
            signed = [k for k in sig_headers if k in ("host", "content-type", "content-md5",
                      "content-encoding", "content-length", "range", "if-match", "if-none-match")
                      or k.startswith("x-amz-")] + ["x-amz-date"] + (["x-amz-content-sha256"] if ph else [])
            signed = [k for k in dict.fromkeys(signed) if k != "transfer-encoding"]
        sign_headers(method, path, query, sig_headers, ph, ak, sk, amz_date=amz_date,
                     signed=signed, no_spaces=no_spaces)
        if tamper_sig:
            a = sig_headers["authorization"]
            last = a[-1]
            sig_headers["authorization"] = a[:-1] + ("0" if last != "0" else "1")
        hdrs = sig_headers
    target = path + ("?" + query if query else "")
    head = "%s %s HTTP/1.1\r\n" % (method, target)
    head += "".join("%s: %s\r\n" % (k, v) for k, v in hdrs.items())
    head += "connection: close\r\n\r\n"
    s = socket.create_connection((u.hostname, u.port), timeout=timeout)
    try:
        s.sendall(head.encode("latin-1"))
        data = body if send_bytes is None else body[:send_bytes]
        if te_chunked:
            for i in range(0, len(data), 8192):
                piece = data[i:i + 8192]
                s.sendall(b"%x\r\n" % len(piece) + piece + b"\r\n")
            if send_bytes is None:
                s.sendall(b"0\r\n\r\n")
        else:
            try:
                s.sendall(data)
            except (BrokenPipeError, ConnectionResetError):
                pass   # the server may answer early (e.g. 403 before the body) and close
        if close_after_send:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            return None
        if send_bytes is not None:
            s.shutdown(socket.SHUT_WR)
        return _read_response(s, method, timeout)
    finally:
        s.close()


# --- CLI for the shell tests ------------------------------------------------------------------

def _cli_req(argv):
    import argparse
    ap = argparse.ArgumentParser(prog="e2elib.py req", description=(
        "Send one SigV4-signed (or anonymous) request; print the status code. "
        "The path is sent exactly as given (no normalisation)."))
    ap.add_argument("--endpoint", required=True)
    ap.add_argument("--ak")
    ap.add_argument("--sk")
    ap.add_argument("-X", "--method", default="GET")
    ap.add_argument("path")
    ap.add_argument("-q", "--query", default="", help="raw query string, without '?'")
    ap.add_argument("-H", "--header", action="append", default=[], help="'Name: value'")
    ap.add_argument("-d", "--data", help="body string")
    ap.add_argument("-T", "--data-file", help="body from file")
    ap.add_argument("-o", "--output", help="body to this file (default: discarded)")
    ap.add_argument("-D", "--dump-header", help="response headers to this file")
    ap.add_argument("--payload", default="signed", help="signed|unsigned|none|LITERAL")
    ap.add_argument("--anon", action="store_true")
    ap.add_argument("--date", help="x-amz-date to sign with (YYYYMMDDTHHMMSSZ)")
    ap.add_argument("--date-offset", type=int, default=0, help="seconds added to now for x-amz-date")
    ap.add_argument("--no-spaces", action="store_true", help="Authorization without spaces after commas")
    ap.add_argument("--tamper-sig", action="store_true")
    ap.add_argument("--host", help="Host header to send (and sign)")
    ap.add_argument("--send-bytes", type=int, help="send only this many body bytes")
    ap.add_argument("--close", action="store_true", help="close right after sending (RST), print 000")
    ap.add_argument("--presign", type=int, metavar="EXPIRES", help="print a presigned URL instead")
    args = ap.parse_args(argv)
    if args.presign is not None:
        print(presign(args.endpoint, args.method, args.path, args.ak, args.sk, args.presign,
                      amz_date=args.date or amz_now(args.date_offset), query=args.query))
        return 0
    headers = {}
    for h in args.header:
        k, _, v = h.partition(":")
        headers[k.strip()] = v.strip()
    body = b""
    if args.data is not None:
        body = args.data.encode()
    if args.data_file:
        with open(args.data_file, "rb") as f:
            body = f.read()
    payload = None if args.payload == "none" else args.payload
    try:
        r = request(args.endpoint, args.method, args.path, query=args.query, headers=headers,
                    body=body, ak=args.ak, sk=args.sk, payload=payload, anon=args.anon,
                    amz_date=args.date or (amz_now(args.date_offset) if args.date_offset else None),
                    no_spaces=args.no_spaces, tamper_sig=args.tamper_sig, host=args.host,
                    send_bytes=args.send_bytes, close_after_send=args.close)
    except (OSError, Fail) as e:
        sys.stderr.write("e2elib req: %s\n" % e)
        print("000")
        return 0
    if r is None:
        print("000")
        return 0
    if args.output:
        with open(args.output, "wb") as f:
            f.write(r.body)
    if args.dump_header:
        with open(args.dump_header, "w") as f:
            f.write("HTTP/1.1 %d\r\n" % r.status)
            for k, v in r.headers.items():
                f.write("%s: %s\r\n" % (k, v))
    print(r.status)
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "req":
        sys.exit(_cli_req(sys.argv[2:]))
    sys.stderr.write("usage: e2elib.py req --help\n")
    sys.exit(2)
