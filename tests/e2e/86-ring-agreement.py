#!/usr/bin/env python3
"""86-ring-agreement: the owner a gateway computes for a key (ring/ring.c through
build/ring-owner) is the server real nginx sends it to.

nginx runs deploy/scale-out/nginx.conf with its ports rewritten: the upstream block
(its `hash ... consistent` directive and the parameters of its `server` lines as
shipped) gets 4 servers on loopback, which are extra `server` blocks of the same nginx
answering `$server_port`; the proxy's `location /` is the shipped one (proxy_pass with
no URI part). Its access log records nginx's $uri of each request (escape=default).
  - 10,000 request-targets (S3 keys with percent-encoded bytes, spaces, UTF-8 raw and
    encoded, '+', '//', '/./', '/../', %2F, %2E, %25, %3F, %23, query strings,
    fragments, keys of up to 6 KiB): the owner and nginx's $uri agree for each;
  - 20 targets nginx refuses with 400 (bad %XX, %00, ".." above the root, a raw space
    or DEL): the tool says EINVAL for each;
  - the same upstream with weight=3, weight=2 and a `down` server (2,000 keys);
  - two servers with one point in common (a port pair found by search), listed in
    both orders: keys landing on that point go to the server listed first, as nginx's
    stable sort keeps it (plus 1,000 keys around the ring).
Skipped (reported, not passed) without nginx.
"""
import os
import random
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2elib as E  # noqa: E402

t = E.Suite("86-ring-agreement")
NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if os.access("/usr/sbin/nginx", os.X_OK) else None)
TOOL = os.path.join(os.path.dirname(os.path.abspath(E.BIN)), "ring-owner")
CONF_SRC = os.path.join(E.REPO, "deploy", "scale-out", "nginx.conf")
NKEYS = int(os.environ.get("RING_KEYS", "10000"))

if not NGINX:
    t.skip("ring agreement with nginx", "nginx not installed (apt-get install nginx)")
    sys.exit(t.finish())
if not os.access(TOOL, os.X_OK):
    t.record("build/ring-owner exists beside S3CACHED_BIN (make all builds it)", False, TOOL)
    sys.exit(t.finish())

tmp = tempfile.mkdtemp(prefix="s3c-e2e-ring.", dir=os.environ.get("TMPDIR", "/tmp"))
ngx = None


def cleanup():
    global ngx
    if ngx is not None and ngx.poll() is None:
        ngx.send_signal(signal.SIGTERM)  # nginx's fast shutdown, by pid
        try:
            ngx.wait(10)
        except subprocess.TimeoutExpired:
            ngx.kill()
            ngx.wait()
    ngx = None
    if not os.environ.get("E2E_KEEP"):
        shutil.rmtree(tmp, ignore_errors=True)


import atexit  # noqa: E402
atexit.register(cleanup)


# --- a tiny independent ring (tie search, key search; the C code is what is tested) ---------

def ring_points(names):
    """nginx's points of `server` names (weight 1), sorted, first of equal hashes kept."""
    pts = []
    for si, name in enumerate(names):
        host, _, port = name.rpartition(":")
        base = zlib.crc32(host.encode() + b"\0" + port.encode())
        prev = 0
        for _ in range(160):
            h = zlib.crc32(struct.pack("<I", prev), base)
            pts.append((h, len(pts), si))
            prev = h
    pts.sort()
    out = []
    for h, _, si in pts:
        if not out or out[-1][0] != h:
            out.append((h, si))
    return out


def port_free(p):
    s = socket.socket()
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", p))
        return True
    except OSError:
        return False
    finally:
        s.close()


def find_tie():
    """Two free loopback ports whose servers share a point, and that point's hash."""
    seen = {}
    for p in range(20000, 32000):
        base = zlib.crc32(b"127.0.0.1\0" + str(p).encode())
        prev = 0
        for _ in range(160):
            h = zlib.crc32(struct.pack("<I", prev), base)
            prev = h
            q = seen.get(h)
            if q is None:
                seen[h] = p
            elif q != p and port_free(q) and port_free(p):
                return q, p, h
    return None


# --- keys ------------------------------------------------------------------------------

def gen_keys(n, rnd):
    words = ["train", "shard", "ckpt", "run7", "step-1000", "data", "a", "b", "x.y", "..a", ".hidden",
             "dir.", "photos", "2024", "déjà vu", "日本語", "emoji-😀", "a b", "a+b", "c%d", "q?r", "h#i"]
    enc_specials = ["%20", "%2F", "%2f", "%25", "%3F", "%3f", "%23", "%2E", "%2e", "%2E%2E", "%7E",
                    "%C3%A9", "%e6%97%a5", "%F0%9F%98%80", "%0A", "%09", "%01", "%7F", "%FF", "%80",
                    "+", "%2B", "%3D", "%26", "%5C", "%22", "%27", "%3C%3E"]
    keys = []

    def quote(seg, mode):
        out = []
        for ch in seg:
            b = ch.encode()
            if mode == 0:  # as a careful client: percent-encode everything outside unreserved
                for x in b:
                    c = chr(x)
                    out.append(c if (c.isalnum() and x < 128) or c in "-._~" else "%%%02X" % x)
            elif mode == 1:  # raw UTF-8 where allowed, encode only what the request line forbids
                if ch in " ?#%":
                    out.append("".join("%%%02x" % x for x in b))
                else:
                    out.append(ch)
            else:  # mixed case hex, '+' for spaces
                if ch == " ":
                    out.append("+")
                elif ch in "?#%" or not ch.isascii():
                    out.append("".join("%%%02x" % x if rnd.random() < 0.5 else "%%%02X" % x for x in b))
                else:
                    out.append(ch)
        return "".join(out)

    while len(keys) < n:
        kind = rnd.randrange(10)
        nseg = rnd.randrange(1, 6)
        segs = []
        for _ in range(nseg):
            r = rnd.random()
            if r < 0.45:
                segs.append(quote(rnd.choice(words) + str(rnd.randrange(1000)), rnd.randrange(3)))
            elif r < 0.75:
                segs.append(quote(rnd.choice(words), rnd.randrange(3)) + rnd.choice(enc_specials)
                            + quote(rnd.choice(words), rnd.randrange(3)))
            elif r < 0.85:
                segs.append(rnd.choice([".", "..", "", "%2E", "%2e%2E", "..."]))
            else:
                segs.append("".join(rnd.choice(enc_specials) for _ in range(rnd.randrange(1, 4))))
        path = "/bucket" + str(rnd.randrange(3)) + "/" + "/".join(segs)
        if kind == 0:
            path = path.replace("/", "//", rnd.randrange(1, 3))
        elif kind == 1:
            path += rnd.choice(["/", "/.", "/..", "//", "/./", "%2F", "%2F..", "/%2E"])
        elif kind == 2:  # long keys (nginx's default large_client_header_buffers: 8k lines)
            path += "/" + "".join(rnd.choice("abcdefgh/%20.") if rnd.random() < 0.97 else "%2F"
                                  for _ in range(rnd.randrange(500, 6000)))
        if rnd.random() < 0.25:
            path += rnd.choice(["?partNumber=1&uploadId=abc", "?x=%zz", "?a=/../..", "?", "?acl",
                                "?list-type=2&prefix=a%2Fb", "#frag", "?q#f"])
        path = re.sub(r"%(?![0-9A-Fa-f]{2})", "%25", path)  # any stray '%' -> a valid escape
        if "%00" in path:
            continue
        keys.append(path)
    return keys


# the valid targets of tests/unit/test_ring.c's $uri table: real nginx checks them too
FIXED = ["/", "/a/b", "/a//b", "//a///b//", "/a/./b", "/./", "/.", "/a/.", "/a/..", "/a/b/../c", "/a/bb/..",
         "/a/b/c/../../d", "/a/.b", "/a/..b", "/a/...", "/a./b.", "/a%2Fb", "/a%2f%2F/b", "/a/%2e%2E/b", "/%2e/x",
         "/a/b/%2E%2E%2F%2E%2E%2Fc", "/a%25b", "/a%2541", "/a%252e%252e", "/a/%25/..", "/a%3Fb?c", "/a%3f/../b",
         "/a%23b#c", "/a?b/../c", "/a?%zz", "/a#b", "/a/.#b", "/a/..?x", "/x%20y+z", "/%C3%A9",
         "/\u00e9/\u65e5", "/a%0Ab%09"]

INVALID = ["/..", "/../a", "/a/../..", "/a/b/../../..", "/%2E%2E", "/.%2e/x", "/%zz", "/a%", "/a%4",
           "/a%0", "/%00", "/a%00b", "/x/%2e%2E/..", "/%2F..%2F..", "/a/%2E%2E%2F%2E%2E", "/%2E%2E%2Fetc",
           "/a%4g", "/a b", "/a\x7f", "/a?b c"]


def nginx_unescape(s):
    """nginx's access-log escape (default): \\xHH for '"', '\\' and bytes outside 0x20-0x7e."""
    return re.sub(rb"\\x([0-9A-Fa-f]{2})", lambda m: bytes([int(m.group(1), 16)]), s)


def tool_unescape(s):
    return re.sub(rb"\\x([0-9a-f]{2})", lambda m: bytes([int(m.group(1), 16)]), s)


# --- nginx ---------------------------------------------------------------------------------

def build_conf(src, listen_port, upstreams, backends, logpath):
    """The shipped config with: our temp paths; the `upstream s3cached` block's servers
    replaced by upstreams['s3cached'] (keeping the shipped server parameters); one more copy
    of the upstream + proxy server per extra entry of @upstreams; a `server` per backend
    port answering its port. Returns the text and the shipped server parameters."""
    text = src
    m = re.search(r"(?ms)^([ \t]*)upstream s3cached \{\n(.*?)^\1\}\n", text)
    if not m:
        raise E.Fail("no `upstream s3cached { ... }` block in deploy/scale-out/nginx.conf")
    ind, body = m.group(1), m.group(2)
    hm = re.search(r"^\s*hash\s+(.+?)\s*;", body, re.M)
    if not hm:
        raise E.Fail("no hash directive in the upstream block")
    srv_lines = re.findall(r"^\s*server\s+(\S+)((?:\s+[^;\s]+)*)\s*;", body, re.M)
    params = srv_lines[0][1].strip() if srv_lines else ""
    other = [ln for ln in body.splitlines() if ln.strip() and not re.match(r"\s*server\s", ln)]

    def upstream(name, servers):
        lines = [ind + "upstream %s {" % name]
        lines += [ln for ln in other]
        lines += [ind + "    server %s;" % s for s in servers]
        return "\n".join(lines + [ind + "}"]) + "\n"

    text = text[:m.start()] + upstream("s3cached", upstreams["s3cached"]) + text[m.end():]
    sm = re.search(r"(?ms)^([ \t]*)server \{\n.*?^\1\}\n", text)
    if not sm:
        raise E.Fail("no proxy `server { ... }` block")
    proxy = sm.group(0)
    if not re.search(r"listen 127\.0\.0\.1:8080;", proxy):
        raise E.Fail("the proxy server block does not listen on 127.0.0.1:8080")
    logdir = "    access_log %s ring;\n" % logpath
    extra = []
    for uname, spec in upstreams.items():
        if uname == "s3cached":
            continue
        port, servers = spec
        extra.append(upstream(uname, servers))
        extra.append(proxy.replace("127.0.0.1:8080", "127.0.0.1:%d" % port)
                     .replace("http://s3cached", "http://" + uname))
    proxy_main = proxy.replace("127.0.0.1:8080", "127.0.0.1:%d" % listen_port)
    proxy_main = proxy_main.replace("server {\n", "server {\n" + sm.group(1) + logdir, 1)
    text = text[:sm.start()] + proxy_main + "".join(extra) + text[sm.end():]
    back = "".join("%sserver {\n%s    listen 127.0.0.1:%d;\n%s    access_log off;\n"
                   "%s    location / { return 200 \"$server_port\\n\"; }\n%s}\n"
                   % (sm.group(1), sm.group(1), p, sm.group(1), sm.group(1), sm.group(1)) for p in backends)
    t_ = os.path.join(tmp, "ngx")
    head = ("    client_body_temp_path %s/body;\n    proxy_temp_path %s/proxy;\n"
            "    fastcgi_temp_path %s/f;\n    uwsgi_temp_path %s/u;\n    scgi_temp_path %s/s;\n"
            "    log_format ring '$uri';\n") % ((t_,) * 5)
    text = re.sub(r"(?m)^http \{\n", lambda _: "http {\n" + head + back, text, count=1)
    text = re.sub(r"(?m)^worker_processes .*;", "worker_processes 2;", text)
    return text, hm.group(1), params


class Conn:
    """One keep-alive HTTP/1.1 connection sending raw request-targets."""

    def __init__(self, port):
        self.port = port
        self.sock = None
        self.buf = b""

    def get(self, target):
        if self.sock is None:
            self.sock = socket.create_connection(("127.0.0.1", self.port), timeout=20)
            self.buf = b""
        self.sock.sendall(b"GET " + target + b" HTTP/1.1\r\nHost: ring.test\r\n\r\n")
        while b"\r\n\r\n" not in self.buf:
            d = self.sock.recv(65536)
            if not d:
                raise E.Fail("connection closed before the response to %r" % target[:100])
            self.buf += d
        head, _, self.buf = self.buf.partition(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        m = re.search(rb"(?im)^content-length:\s*(\d+)", head)
        n = int(m.group(1)) if m else 0
        while len(self.buf) < n:
            d = self.sock.recv(65536)
            if not d:
                break
            self.buf += d
        body, self.buf = self.buf[:n], self.buf[n:]
        if re.search(rb"(?im)^connection:\s*close", head):
            self.close()
        return status, body

    def close(self):
        if self.sock:
            self.sock.close()
        self.sock = None


def tool(peers, targets):
    r = subprocess.run([TOOL, "--uri", "--peers", peers], input=b"".join(x + b"\n" for x in targets),
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
    if r.returncode != 0:
        raise E.Fail("ring-owner exit %d: %s" % (r.returncode, r.stderr.decode(errors="replace")[-500:]))
    lines = r.stdout.split(b"\n")[:-1]
    if len(lines) != len(targets):
        raise E.Fail("ring-owner answered %d lines for %d keys" % (len(lines), len(targets)))
    # nginx answers 400 where the tool says EINVAL: that is agreement too
    return [[b"status 400"] + ln.split(b"\t", 1)[1:] if ln.startswith(b"!EINVAL") else ln.split(b"\t", 1)
            for ln in lines]


# --- setup ---------------------------------------------------------------------------------

src = open(CONF_SRC).read()
rnd = random.Random(86)
ports = []
while len(ports) < 4:
    p = E.free_port()
    if p not in ports:
        ports.append(p)
tie = find_tie()
t.record("found two free ports whose servers share a point (port search 20000-31999)", tie is not None)
back_ports = ports + ([tie[0], tie[1]] if tie else [])
name = ["127.0.0.1:%d" % p for p in back_ports]
lp = {k: E.free_port() for k in ("main", "weighted", "tie_ab", "tie_ba")}
holder = {}


def setup():
    shipped = [ln for ln in open(CONF_SRC) if re.match(r"\s*server\s+127", ln)]
    params = re.match(r"\s*server\s+\S+((?:\s+[^;\s]+)*)\s*;", shipped[0]).group(1).strip() if shipped else ""
    main_servers = ["%s %s" % (n, params) if params else n for n in name[:4]]
    ups = {"s3cached": main_servers,
           "ring_weighted": (lp["weighted"], ["%s weight=3" % name[0], name[1], "%s down" % name[2],
                                              "%s weight=2 max_fails=1" % name[3]])}
    if tie:
        ups["ring_tie_ab"] = (lp["tie_ab"], [name[4], name[5], name[2], name[3]])
        ups["ring_tie_ba"] = (lp["tie_ba"], [name[5], name[4], name[2], name[3]])
    logpath = os.path.join(tmp, "ngx", "uri.log")
    conf, hashdir, _ = build_conf(src, lp["main"], ups, back_ports, logpath)
    E.eq("the shipped hash directive", hashdir, "$uri consistent")
    os.makedirs(os.path.join(tmp, "ngx", "logs"))
    cpath = os.path.join(tmp, "ngx", "nginx.conf")
    with open(cpath, "w") as f:
        f.write(conf)
    g = "pid %s/ngx/nginx.pid; error_log %s/ngx/logs/error.log warn; daemon off;" % (tmp, tmp)
    if os.getuid() == 0:
        g += " user root;"
    r = subprocess.run([NGINX, "-t", "-p", os.path.join(tmp, "ngx"), "-c", cpath, "-g", g],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=30)
    if r.returncode != 0:
        raise E.Fail("nginx -t:\n" + r.stdout.decode(errors="replace")[-1500:])
    global ngx
    ngx = subprocess.Popen([NGINX, "-p", os.path.join(tmp, "ngx"), "-c", cpath, "-g", g],
                           stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while True:
        try:
            st, body = Conn(lp["main"]).get(b"/_/ready")
            if st == 200:
                break
        except OSError:
            pass
        if ngx.poll() is not None or time.monotonic() > deadline:
            err = open(os.path.join(tmp, "ngx", "logs", "error.log"), errors="replace").read()[-1500:]
            raise E.Fail("nginx did not answer within 10 s:\n" + err)
        time.sleep(0.05)
    holder["ups"] = ups
    holder["log"] = logpath
    holder["main_peers"] = ",".join(main_servers)


t.check("setup: nginx runs deploy/scale-out/nginx.conf (ports rewritten) with 6 answering servers", setup)
if t.failed:
    cleanup()
    sys.exit(t.finish())
port_name = {str(p).encode(): n.encode() for p, n in zip(back_ports, name)}


def through_nginx(port, targets):
    """Each target through the proxy on @port: the name of the server that answered."""
    c = Conn(port)
    out = []
    for x in targets:
        st, body = c.get(x)
        out.append(port_name.get(body.strip(), b"status %d" % st) if st == 200 else b"status %d" % st)
    c.close()
    return out


def error_log_tail():
    try:
        with open(os.path.join(tmp, "ngx", "logs", "error.log"), errors="replace") as f:
            return "".join(f.readlines()[-10:])
    except OSError:
        return ""


def log_lines():
    with open(holder["log"], "rb") as f:
        return f.read().split(b"\n")[:-1]


# --- 10,000 keys through the shipped upstream -----------------------------------------------

keys = [k.encode() for k in FIXED + gen_keys(NKEYS - len(FIXED), rnd)]
res = {}


def main_agreement():
    n0 = len(log_lines())
    got = through_nginx(lp["main"], keys)
    # nginx writes a request's access-log line after its response went out: the last ones may
    # not be there yet when the client has its answer
    E.wait_until(lambda: len(log_lines()) - n0 >= len(keys), timeout=10)
    logged = log_lines()[n0:]
    mine = tool(holder["main_peers"], keys)
    own_ok = sum(1 for g, m in zip(got, mine) if g == m[0])
    uri_ok = sum(1 for lg, m in zip(logged, mine) if len(m) > 1 and nginx_unescape(lg) == tool_unescape(m[1]))
    res["own"], res["uri"] = own_ok, uri_ok
    share = {}
    for g in got:
        share[g] = share.get(g, 0) + 1
    print("       owner agreement: %d/%d keys (%d of them 400 in both); $uri agreement: %d/%d; "
          "per server: %s"
          % (own_ok, len(keys), got.count(b"status 400"), uri_ok, len(logged),
             ", ".join("%s=%d" % (k.decode(), v) for k, v in sorted(share.items()))))
    bad = [(k, g, m) for k, g, m in zip(keys, got, mine) if g != m[0]][:5]
    if own_ok != len(keys):
        raise E.Fail("owners differ for %d keys, e.g. %r\nnginx's error.log (a failed upstream moves its "
                     "keys for fail_timeout):\n%s" % (len(keys) - own_ok, bad, error_log_tail()))
    if len(logged) != len(keys):
        raise E.Fail("access log has %d lines for %d requests" % (len(logged), len(keys)))
    badu = [(k, lg, m) for k, lg, m in zip(keys, logged, mine)
            if len(m) < 2 or nginx_unescape(lg) != tool_unescape(m[1])][:5]
    if uri_ok != len(keys):
        raise E.Fail("$uri differs for %d keys, e.g. %r" % (len(keys) - uri_ok, badu))
    if len([k for k in share if not k.startswith(b"status")]) != 4:
        raise E.Fail("not every server got keys: %r" % share)


t.check("%d keys: the owner ring-owner computes is the server nginx chose, and $uri is nginx's" % NKEYS,
        main_agreement)


def kinds_covered():
    want = {"%2F": b"%2F", "%25": b"%25", "%3F": b"%3F", "%23": b"%23", "//": b"//", "/./": b"/./",
            "/../": b"/../", "raw UTF-8": "é".encode(), "encoded UTF-8": b"%C3%A9", "+": b"+",
            "query": b"?", "#": b"#", "space %20": b"%20"}
    missing = [k for k, v in want.items() if not any(v in x for x in keys)]
    long_ = sum(1 for x in keys if len(x) > 2000)
    if missing or long_ < 50:
        raise E.Fail("keys lack %r; %d keys over 2000 bytes" % (missing, long_))


t.check("the keys include %2F %25 %3F %23 // /./ /../ UTF-8 (raw, encoded) + ? # and long keys", kinds_covered)


def invalid_targets():
    bad = []
    mine = tool(holder["main_peers"], [x.encode() for x in INVALID])
    for x, m in zip(INVALID, mine):
        st, _ = Conn(lp["main"]).get(x.encode())
        if st != 400 or m[0] != b"status 400":
            bad.append((x, st, m[0]))
    if bad:
        raise E.Fail("nginx status vs ring-owner: %r" % bad)


t.check("%d targets nginx answers 400: ring-owner says EINVAL for each" % len(INVALID), invalid_targets)


# --- weights and down ------------------------------------------------------------------------

def weighted():
    ks = keys[:2000]
    servers = holder["ups"]["ring_weighted"][1]
    got = through_nginx(lp["weighted"], ks)
    mine = tool(",".join(servers), ks)
    ok = sum(1 for g, m in zip(got, mine) if g == m[0])
    share = {}
    for g in got:
        share[g] = share.get(g, 0) + 1
    print("       weight=3 / 1 / down / weight=2: %d/%d agree; per server %s"
          % (ok, len(ks), ", ".join("%s=%d" % (k.decode(), v) for k, v in sorted(share.items()))))
    if ok != len(ks):
        raise E.Fail("%d keys differ, e.g. %r" % (len(ks) - ok, [(k, g, m) for k, g, m in zip(ks, got, mine)
                                                                   if g != m[0]][:5]))
    if name[2].encode() in share:
        raise E.Fail("the down server got keys")


t.check("weight=3, weight=2, down: 2,000 keys agree with nginx", weighted)


# --- two servers sharing a point -----------------------------------------------------------

def tie_case():
    a, b, h = tie
    for label, first, up in (("A first", name[4], "ring_tie_ab"), ("B first", name[5], "ring_tie_ba")):
        servers = holder["ups"][up][1]
        pts = ring_points(servers)
        idx = [i for i, (ph, _) in enumerate(pts) if ph == h][0]
        lo = pts[idx - 1][0] if idx > 0 else -1
        on_tie = []
        i = 0
        while len(on_tie) < 20:
            k = b"/tie/%d" % i
            i += 1
            c = zlib.crc32(k)
            if lo < c <= h:
                on_tie.append(k)
        ks = on_tie + keys[:1000]
        got = through_nginx(holder["ups"][up][0], ks)
        mine = tool(",".join(servers), ks)
        ok = sum(1 for g, m in zip(got, mine) if g == m[0])
        tie_to = set(got[:20])
        print("       %s (%s): the 20 keys on the shared point went to %s; %d/%d agree"
              % (label, ",".join(s.split(":")[1] for s in servers),
                 b",".join(sorted(tie_to)).decode(), ok, len(ks)))
        if tie_to != {first.encode()}:
            raise E.Fail("nginx sent the shared point's keys to %r, not the first listed %s" % (tie_to, first))
        if ok != len(ks):
            raise E.Fail("%d keys differ" % (len(ks) - ok))


if tie:
    t.check("a point shared by two servers belongs to the one listed first (both orders, 1,020 keys each)",
            tie_case)

cleanup()
sys.exit(t.finish())
