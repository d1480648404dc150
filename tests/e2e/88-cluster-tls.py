#!/usr/bin/env python3
"""88-cluster-tls: two gateways peered into one cache (--peers, --self) that serve HTTPS
(--tls-cert) with certificates a throwaway CA (openssl) signed for IP 127.0.0.1, verified
with --peer-ca, over an origin s3cached (plain HTTP) as their S3 backend, --revalidate-after
never.
  - an object B owns, cached on B (a hit there), overwritten through A: the next read through
    B has the new bytes (A's write notice reached B over HTTPS), for 5 keys; A counts no
    failed notice; a read of B's key through A is proxied to B over HTTPS;
  - a DELETE through A: B answers 404 at once;
  - serve refuses, with a message, what cannot work: a certificate that does not verify
    against --peer-ca for the host of --self (the others would refuse this gateway), --peers
    entries with a scheme, --peer-ca without --tls-cert.
Before the fix the gateways called each other over plain http:// (every notice reset) and B
served the old bytes. Skipped (reported, not passed) without openssl.
"""
import http.client
import json
import os
import shutil
import ssl
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2elib as E  # noqa: E402

t = E.Suite("88-cluster-tls")
OPENSSL = shutil.which("openssl")
TOOL = os.path.join(os.path.dirname(os.path.abspath(E.BIN)), "ring-owner")
AK, SK = "AKTLSC" + os.urandom(3).hex().upper(), os.urandom(20).hex()
PEER_SECRET = "peer" + os.urandom(8).hex()

if not OPENSSL:
    t.skip("a TLS cluster of two gateways", "openssl not installed (apt-get install openssl)")
    sys.exit(t.finish())

tmp = tempfile.mkdtemp(prefix="s3c-e2e-ctls.", dir=os.environ.get("TMPDIR", "/tmp"))


def cleanup():
    if not os.environ.get("E2E_KEEP"):
        shutil.rmtree(tmp, ignore_errors=True)


import atexit  # noqa: E402
atexit.register(cleanup)


# --- a CA, a certificate for 127.0.0.1 it signed, and a CA that signed nothing of ours --------

def run(cmd):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
    if r.returncode != 0:
        raise E.Fail("%s: %s" % (" ".join(cmd[:3]), r.stdout.decode(errors="replace")[-400:]))


def ca(name):
    run([OPENSSL, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
         "-subj", "/CN=s3cached e2e %s" % name, "-keyout", os.path.join(tmp, name + ".key"),
         "-out", os.path.join(tmp, name + ".pem"),
         "-addext", "basicConstraints=critical,CA:TRUE",
         "-addext", "keyUsage=critical,keyCertSign,cRLSign"])


def mkpki():
    ca("ca")
    ca("rogue")
    run([OPENSSL, "req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1",
         "-keyout", os.path.join(tmp, "key.pem"), "-out", os.path.join(tmp, "gw.csr")])
    with open(os.path.join(tmp, "ext.cnf"), "w") as f:
        f.write("basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
                "extendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1\n")
    run([OPENSSL, "x509", "-req", "-in", os.path.join(tmp, "gw.csr"),
         "-CA", os.path.join(tmp, "ca.pem"), "-CAkey", os.path.join(tmp, "ca.key"),
         "-CAcreateserial", "-days", "2", "-extfile", os.path.join(tmp, "ext.cnf"),
         "-out", os.path.join(tmp, "cert.pem")])
    run([OPENSSL, "verify", "-CAfile", os.path.join(tmp, "ca.pem"), os.path.join(tmp, "cert.pem")])


t.check("openssl makes a CA and a certificate for IP 127.0.0.1", mkpki)
CA, CERT, KEY = (os.path.join(tmp, n) for n in ("ca.pem", "cert.pem", "key.pem"))
ROGUE = os.path.join(tmp, "rogue.pem")
if not os.path.exists(CERT):
    sys.exit(t.finish())
# the test's own clients (E.Server's health probe, stats) trust the CA; the gateways are
# given it explicitly (--peer-ca)
os.environ["SSL_CERT_FILE"] = CA
CTX = ssl.create_default_context(cafile=CA)


class TLSServer(E.Server):
    @property
    def endpoint(self):
        return "https://127.0.0.1:%d" % self.port


# --- the origin and two gateways ---------------------------------------------------------------

origin = E.Server(t)
origin.start()
os.makedirs(os.path.join(origin.store, "tlsb"), exist_ok=True)
ports = []
while len(ports) < 2:
    p = E.free_port()
    if p not in ports:
        ports.append(p)
names = ["127.0.0.1:%d" % p for p in ports]
PEERS = ",".join(names)


def gw_args(self_name, peers=PEERS, tls=True, ca_file=CA):
    a = ["--backend", "http://127.0.0.1:%d" % origin.port,
         "--backend-access-key", origin.ak, "--backend-secret-key", origin.sk,
         "--peers", peers, "--self", self_name, "--peer-secret", PEER_SECRET,
         "--peer-timeout", "3s", "--revalidate-after", "never", "--backend-timeout", "20s"]
    if tls:
        a += ["--tls-cert", CERT, "--tls-key", KEY]
    if ca_file:
        a += ["--peer-ca", ca_file]
    return a


gws = [TLSServer(t, auth=["--access-key", AK, "--secret-key", SK], port=p, extra=gw_args(n))
       for p, n in zip(ports, names)]
for g in gws:
    g.start()
A, B = gws


def req(g, method, path, body=b""):
    hdrs = {"host": "127.0.0.1:%d" % g.port}
    if body or method in ("PUT", "POST"):
        hdrs["content-length"] = str(len(body))
    E.sign_headers(method, path, "", hdrs, E.sha(body), AK, SK)
    c = http.client.HTTPSConnection("127.0.0.1", g.port, context=CTX, timeout=30)
    try:
        c.request(method, path, body=body, headers=hdrs)
        r = c.getresponse()
        data = r.read()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, data
    finally:
        c.close()


def owned_by(idx, n):
    """@n keys of bucket tlsb that gateway @idx owns (build/ring-owner)."""
    cand = ["key-%03d" % i for i in range(200)]
    r = subprocess.run([TOOL, "--uri", "--peers", PEERS],
                       input="".join("/tlsb/%s\n" % k for k in cand).encode(),
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
    if r.returncode != 0:
        raise E.Fail("ring-owner: %s" % r.stderr.decode(errors="replace")[-300:])
    own = [ln.split("\t")[0] for ln in r.stdout.decode().splitlines()]
    keys = [k for k, o in zip(cand, own) if o == names[idx]][:n]
    if len(keys) < n:
        raise E.Fail("fewer than %d of 200 keys are owned by %s" % (n, names[idx]))
    return keys


KEYS = []


def overwrite_seen_through_owner():
    KEYS.extend(owned_by(1, 5))
    before = A.stats()["cluster"]
    for k in KEYS:
        old = ("old bytes of %s " % k).encode() * 200
        st, _, body = req(B, "PUT", "/tlsb/" + k, old)
        E.eq("PUT %s through B (its owner): %s" % (k, body[:300]), st, 200)
        req(B, "GET", "/tlsb/" + k)
        st, h, body = req(B, "GET", "/tlsb/" + k)
        E.eq("%s read through B: the old bytes, from B's cache" % k,
             (st, body == old, h.get("x-cache")), (200, True, "hit"))
    t0 = time.time()
    for k in KEYS:
        new = ("NEW bytes of %s " % k).encode() * 300
        st, _, _ = req(A, "PUT", "/tlsb/" + k, new)
        E.eq("overwrite of %s through A" % k, st, 200)
        st, _, body = req(B, "GET", "/tlsb/" + k)
        E.eq("%s read through B after the overwrite through A: the new bytes" % k,
             (st, body == new), (200, True))
        st, h, body = req(A, "GET", "/tlsb/" + k)
        E.eq("%s read through A: proxied to B over HTTPS, the new bytes" % k,
             (st, body == new, h.get("x-s3cached-owner")), (200, True, names[1]))
    after = A.stats()["cluster"]
    E.eq("A's notices to B: sent, none failed, B not behind",
         (after["invalidations_sent"] - before["invalidations_sent"] >= len(KEYS),
          after["invalidations_failed"] - before["invalidations_failed"], after["peers_behind"]),
         (True, 0, 0))
    print("       # %d overwrites through A and reads through B in %.1f s"
          % (len(KEYS), time.time() - t0))


t.check("TLS cluster: an overwrite through A is seen through B, which had cached the key "
        "(--revalidate-after never)", overwrite_seen_through_owner)


def delete_seen_through_owner():
    k = KEYS[0]
    st, _, _ = req(B, "GET", "/tlsb/" + k)
    E.eq("%s cached on B" % k, st, 200)
    st, _, _ = req(A, "DELETE", "/tlsb/" + k)
    E.eq("DELETE through A", st, 204)
    st, _, _ = req(B, "GET", "/tlsb/" + k)
    E.eq("read through B after the DELETE through A", st, 404)


t.check("TLS cluster: a DELETE through A is seen through B at once", delete_seen_through_owner)


def refused(what, args, needle):
    d = os.path.join(tmp, "refused-%d" % len(os.listdir(tmp)))
    os.makedirs(os.path.join(d, "cache"))
    cmd = [E.BIN, "serve", "--listen", "127.0.0.1:%d" % E.free_port(), "--cache-dir",
           os.path.join(d, "cache"), "--region", E.REGION, "--admin-token", "tok",
           "--access-key", AK, "--secret-key", SK] + args
    try:
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=15)
    except subprocess.TimeoutExpired:
        raise E.Fail("%s: serve started (still running after 15 s)" % what)
    out = r.stdout.decode(errors="replace")
    if r.returncode == 0 or needle not in out:
        raise E.Fail("%s: exit %s, want non-zero with %r; output:\n%s"
                     % (what, r.returncode, needle, out[-600:]))


def refuses_what_cannot_work():
    me = "127.0.0.1:%d" % E.free_port()
    peers = PEERS + "," + me
    refused("a certificate that does not verify against --peer-ca",
            gw_args(me, peers=peers, ca_file=ROGUE), "does not verify for 127.0.0.1")
    refused("--peers entries with a scheme",
            gw_args("127.0.0.1:%d" % ports[0], peers="https://%s,https://%s" % tuple(names)),
            "without a scheme")
    refused("--peer-ca without --tls-cert", gw_args(me, peers=peers, tls=False),
            "--peer-ca needs --tls-cert")


t.check("serve refuses a TLS cluster that cannot work, saying why", refuses_what_cannot_work)

for g in gws:
    g.stop()
origin.stop()
sys.exit(t.finish())
