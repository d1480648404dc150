"""tests/deploy/check_deploy.py: static checks of deploy/ (run by validate.sh with
/usr/bin/python3, which has python3-yaml).

  check_deploy.py REPO [S3CACHED_BIN]

Kubernetes manifests: apiVersion/kind/metadata.name, selectors that match the pod
labels, images, probes on /_/health at a declared port, volume mounts that name a
declared volume, ConfigMap/Secret references (names and keys) that exist in deploy/k8s,
Services whose selector matches a workload and whose targetPort is a container port,
prometheus.io annotations pointing at /_/metrics on a container port. compose.yaml:
services, build context/Dockerfile, volumes, secrets (and their files or .example),
health-gated depends_on, Prometheus config. Cluster mode: a workload with
S3CACHED_PEERS dns:NAME:PORT has a headless Service NAME over its pods, --self from the
pod IP on that port and a peer key; compose gateways share one --peers list, each --self
its own entry, all scraped by Prometheus. Dockerfile: stages, base image ARG, non-root
USER, HEALTHCHECK, VOLUME, COPY sources that exist (and every Makefile DIRS folder copied and
let through Dockerfile.dockerignore), runtime packages. systemd unit,
nginx.conf and envoy.yaml: the directives the README promises. Every S3CACHED_* name
used anywhere in deploy/ must be an option of `s3cached serve` (from `s3cached help`).
Prints ok/FAIL/skip lines and the last line "check_deploy: N passed, N failed".
"""
import os
import re
import subprocess
import sys

try:
    import yaml
except ImportError:  # pragma: no cover
    print("skip - python3-yaml not installed (apt-get install python3-yaml)")
    print("check_deploy: 0 passed, 0 failed")
    sys.exit(0)

REPO = sys.argv[1] if len(sys.argv) > 1 else "."
BIN = sys.argv[2] if len(sys.argv) > 2 else os.path.join(REPO, "build", "s3cached")
D = os.path.join(REPO, "deploy")
passed = failed = 0


def check(name, problems):
    """problems: list of strings; empty = pass."""
    global passed, failed
    if problems:
        failed += 1
        print("FAIL - %s" % name)
        for p in problems[:25]:
            print("       | %s" % p)
    else:
        passed += 1
        print("ok   - %s" % name)


def read(path):
    with open(path) as f:
        return f.read()


def load_all(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


# --- options s3cached knows ------------------------------------------------------------------
OPTIONS = None
if os.access(BIN, os.X_OK):
    try:
        h = subprocess.run([BIN, "help"], capture_output=True, text=True, timeout=10).stdout
        OPTIONS = {"S3CACHED_" + m.upper().replace("-", "_") for m in re.findall(r"^\s+--([a-z0-9-]+)", h, re.M)}
    except Exception:  # noqa: BLE001
        OPTIONS = None
# names that are not serve options but documented for the image
EXTRA_ENV = {"S3CACHED_HEALTH_URL"}


def env_names_ok(where, names):
    if OPTIONS is None:
        return []
    return ["%s: %s is not an option of `s3cached serve`" % (where, n)
            for n in sorted(set(names)) if n not in OPTIONS and n not in EXTRA_ENV]


# --- Kubernetes --------------------------------------------------------------------------------
K8S = os.path.join(D, "k8s")
docs = []
for fn in sorted(os.listdir(K8S)) if os.path.isdir(K8S) else []:
    if fn.endswith((".yaml", ".yml")):
        try:
            for d in load_all(os.path.join(K8S, fn)):
                docs.append((fn, d))
        except yaml.YAMLError as e:
            check("k8s/%s parses as YAML" % fn, [str(e)])

kinds = {}
for fn, d in docs:
    kinds.setdefault(d.get("kind"), []).append((fn, d))

API = {"ConfigMap": "v1", "Secret": "v1", "Service": "v1", "DaemonSet": "apps/v1",
       "Deployment": "apps/v1", "StatefulSet": "apps/v1",
       "Kustomization": "kustomize.config.k8s.io/v1beta1"}
probs = []
for fn, d in docs:
    k = d.get("kind")
    if k not in API:
        probs.append("%s: unexpected kind %r" % (fn, k))
    elif d.get("apiVersion") != API[k]:
        probs.append("%s: %s has apiVersion %r, want %r" % (fn, k, d.get("apiVersion"), API[k]))
    if k != "Kustomization" and not (d.get("metadata") or {}).get("name"):
        probs.append("%s: %s without metadata.name" % (fn, k))
check("k8s: every document has a known kind, its apiVersion and a name (%d documents)" % len(docs), probs)

for want in ("DaemonSet", "Deployment", "Service", "ConfigMap", "Secret"):
    check("k8s: a %s exists" % want, [] if kinds.get(want) else ["no %s in deploy/k8s" % want])

cms = {d["metadata"]["name"]: d for _, d in kinds.get("ConfigMap", [])}
secrets = {}
for _, d in kinds.get("Secret", []):
    secrets[d["metadata"]["name"]] = set((d.get("stringData") or {}).keys()) | set((d.get("data") or {}).keys())

probs = []
for fn, d in kinds.get("Kustomization", []):
    for r in d.get("resources", []):
        if not os.path.exists(os.path.join(K8S, r)):
            probs.append("%s lists %s, which does not exist" % (fn, r))
check("k8s: kustomization resources exist", probs)

workloads = kinds.get("DaemonSet", []) + kinds.get("Deployment", [])
all_env = []
pod_labels = []  # (labels, {port names}, {port numbers})
for fn, w in workloads:
    name = "%s %s" % (w["kind"], w["metadata"]["name"])
    spec = w.get("spec") or {}
    tmpl = spec.get("template") or {}
    labels = (tmpl.get("metadata") or {}).get("labels") or {}
    sel = ((spec.get("selector") or {}).get("matchLabels")) or {}
    probs = []
    if not sel:
        probs.append("no spec.selector.matchLabels")
    for k, v in sel.items():
        if labels.get(k) != v:
            probs.append("selector %s=%s does not match the template labels %s" % (k, v, labels))
    check("k8s %s: selector matches the pod template labels" % name, probs)

    pod = tmpl.get("spec") or {}
    vols = {v.get("name"): v for v in pod.get("volumes") or []}
    containers = pod.get("containers") or []
    inits = pod.get("initContainers") or []
    pnames, pnums = set(), set()
    probs = []
    if not containers:
        probs.append("no containers")
    for c in containers + inits:
        if not c.get("image"):
            probs.append("container %s has no image" % c.get("name"))
        for m in c.get("volumeMounts") or []:
            if m.get("name") not in vols:
                probs.append("container %s mounts volume %r, not declared in volumes" % (c.get("name"), m.get("name")))
            if not str(m.get("mountPath", "")).startswith("/"):
                probs.append("container %s: mountPath %r is not absolute" % (c.get("name"), m.get("mountPath")))
    for v in vols.values():
        if "secret" in v:
            sn = v["secret"].get("secretName")
            if sn not in secrets:
                probs.append("volume %s uses Secret %r, not defined in deploy/k8s" % (v["name"], sn))
            for it in v["secret"].get("items") or []:
                if it.get("key") not in secrets.get(sn, set()):
                    probs.append("volume %s: Secret %s has no key %r" % (v["name"], sn, it.get("key")))
        if "configMap" in v and v["configMap"].get("name") not in cms:
            probs.append("volume %s uses ConfigMap %r, not defined" % (v["name"], v["configMap"].get("name")))
        if "hostPath" in v and not str(v["hostPath"].get("path", "")).startswith("/"):
            probs.append("volume %s: hostPath path is not absolute" % v["name"])
    check("k8s %s: images, volume mounts and Secret/ConfigMap volumes resolve" % name, probs)

    probs = []
    for c in containers:
        for p in c.get("ports") or []:
            if p.get("name"):
                pnames.add(p["name"])
            pnums.add(p.get("containerPort"))
        for ef in c.get("envFrom") or []:
            if "configMapRef" in ef:
                cn = ef["configMapRef"].get("name")
                if cn not in cms:
                    probs.append("envFrom ConfigMap %r not defined" % cn)
                else:
                    all_env += list((cms[cn].get("data") or {}).keys())
            if "secretRef" in ef and ef["secretRef"].get("name") not in secrets:
                probs.append("envFrom Secret %r not defined" % ef["secretRef"].get("name"))
        for e in c.get("env") or []:
            all_env.append(e.get("name"))
            ref = (e.get("valueFrom") or {})
            if "secretKeyRef" in ref:
                sn, sk = ref["secretKeyRef"].get("name"), ref["secretKeyRef"].get("key")
                if sk not in secrets.get(sn, set()):
                    probs.append("env %s: Secret %s key %s not defined" % (e.get("name"), sn, sk))
            if "configMapKeyRef" in ref:
                cn, ck = ref["configMapKeyRef"].get("name"), ref["configMapKeyRef"].get("key")
                if ck not in ((cms.get(cn) or {}).get("data") or {}):
                    probs.append("env %s: ConfigMap %s key %s not defined" % (e.get("name"), cn, ck))
    check("k8s %s: env/envFrom reference existing Secret and ConfigMap keys" % name, probs)

    probs = []
    for c in containers:
        for kind in ("readinessProbe", "livenessProbe"):
            pr = c.get(kind)
            if not pr:
                probs.append("container %s has no %s" % (c.get("name"), kind))
                continue
            hg = pr.get("httpGet") or {}
            if hg.get("path") != "/_/health":
                probs.append("%s path %r, want /_/health" % (kind, hg.get("path")))
            port = hg.get("port")
            if port not in pnames and port not in pnums:
                probs.append("%s port %r is not a container port (%s %s)" % (kind, port, pnames, pnums))
        sc = c.get("securityContext") or {}
        psc = pod.get("securityContext") or {}
        if not (psc.get("runAsNonRoot") or sc.get("runAsNonRoot")) or (sc.get("runAsUser", psc.get("runAsUser")) == 0):
            probs.append("container %s may run as root" % c.get("name"))
        if sc.get("allowPrivilegeEscalation") is not False:
            probs.append("container %s: allowPrivilegeEscalation is not false" % c.get("name"))
        if c.get("args") and "serve" not in c["args"]:
            probs.append("container %s args %r do not run serve" % (c.get("name"), c["args"]))
        if "--credentials" in (c.get("args") or []):
            cp = c["args"][c["args"].index("--credentials") + 1]
            mounted = [m["mountPath"] for m in c.get("volumeMounts") or []]
            if not any(cp.startswith(m.rstrip("/") + "/") for m in mounted):
                probs.append("--credentials %s is not under a mounted volume %s" % (cp, mounted))
    check("k8s %s: readiness/liveness probes GET /_/health on a declared port; non-root" % name, probs)

    ann = (tmpl.get("metadata") or {}).get("annotations") or {}
    probs = []
    if ann.get("prometheus.io/scrape") != "true":
        probs.append("prometheus.io/scrape is %r, want \"true\"" % ann.get("prometheus.io/scrape"))
    if ann.get("prometheus.io/path") != "/_/metrics":
        probs.append("prometheus.io/path is %r, want /_/metrics" % ann.get("prometheus.io/path"))
    try:
        if int(ann.get("prometheus.io/port", "-1")) not in pnums:
            probs.append("prometheus.io/port %r is not a container port %s" % (ann.get("prometheus.io/port"), pnums))
    except ValueError:
        probs.append("prometheus.io/port %r is not a number" % ann.get("prometheus.io/port"))
    check("k8s %s: prometheus scrape annotations point at /_/metrics on a container port" % name, probs)
    pod_labels.append((labels, pnames, pnums))

    if w["kind"] == "DaemonSet":
        hp = [v for v in vols.values() if "hostPath" in v]
        cache_mounts = [m for c in containers for m in c.get("volumeMounts") or []
                        if m.get("mountPath") == "/var/cache/s3cached"]
        probs = []
        if not hp:
            probs.append("no hostPath volume")
        if not cache_mounts or cache_mounts[0]["name"] not in [v["name"] for v in hp]:
            probs.append("/var/cache/s3cached is not the hostPath volume")
        check("k8s DaemonSet: the cache is a hostPath (node NVMe) mounted at /var/cache/s3cached", probs)

probs = []
for fn, s in kinds.get("Service", []):
    spec = s.get("spec") or {}
    sel = spec.get("selector") or {}
    match = [pl for pl in pod_labels if sel and all(pl[0].get(k) == v for k, v in sel.items())]
    if not match:
        probs.append("Service %s selector %s matches no workload" % (s["metadata"]["name"], sel))
        continue
    for p in spec.get("ports") or []:
        tp = p.get("targetPort", p.get("port"))
        if not any(tp in m[1] or tp in m[2] for m in match):
            probs.append("Service %s targetPort %r is not a port of the selected pods" % (s["metadata"]["name"], tp))
check("k8s: Services select a workload and target one of its ports", probs)

probs = []
for name, d in cms.items():
    probs += env_names_ok("ConfigMap " + name, [k for k in (d.get("data") or {}) if k.startswith("S3CACHED_")])
probs += env_names_ok("k8s env", [n for n in all_env if n and n.startswith("S3CACHED_")])
check("k8s: every S3CACHED_* name is a serve option" + ("" if OPTIONS else " (skipped: no binary)"), probs)

# --- compose -----------------------------------------------------------------------------------
cpath = os.path.join(D, "compose.yaml")
try:
    comp = yaml.safe_load(read(cpath))
except Exception as e:  # noqa: BLE001
    comp = None
    check("compose.yaml parses", [str(e)])
if comp is not None:
    svcs = comp.get("services") or {}
    probs = []
    for want in ("gateway", "store", "prometheus"):
        if want not in svcs:
            probs.append("no service %r" % want)
    check("compose: services gateway, store, prometheus", probs)
    probs = []
    top_vols = set((comp.get("volumes") or {}).keys())
    top_secrets = comp.get("secrets") or {}
    env_names = []
    for sn, s in svcs.items():
        if not s.get("image") and not s.get("build"):
            probs.append("%s: neither image nor build" % sn)
        b = s.get("build")
        if isinstance(b, dict):
            ctx = os.path.normpath(os.path.join(D, b.get("context", ".")))
            df = os.path.join(ctx, b.get("dockerfile", "Dockerfile"))
            if not os.path.isfile(df):
                probs.append("%s: build dockerfile %s does not exist" % (sn, df))
        for v in s.get("volumes") or []:
            src = v.split(":")[0] if isinstance(v, str) else v.get("source")
            if src.startswith((".", "/")):
                if not os.path.exists(os.path.normpath(os.path.join(D, src))):
                    probs.append("%s: bind source %s does not exist" % (sn, src))
            elif src not in top_vols:
                probs.append("%s: volume %s not declared at top level" % (sn, src))
        for sec in s.get("secrets") or []:
            sname = sec if isinstance(sec, str) else sec.get("source")
            if sname not in top_secrets:
                probs.append("%s: secret %s not declared at top level" % (sn, sname))
        for dep, cond in (s.get("depends_on") or {}).items() if isinstance(s.get("depends_on"), dict) else \
                [(x, None) for x in s.get("depends_on") or []]:
            if dep not in svcs:
                probs.append("%s depends on unknown service %s" % (sn, dep))
        env = s.get("environment") or {}
        env_names += list(env.keys() if isinstance(env, dict) else [e.split("=")[0] for e in env])
        cmd = s.get("command")
        cmd_s = " ".join(cmd) if isinstance(cmd, list) else str(cmd or "")
        env_names += re.findall(r"\b(S3CACHED_[A-Z0-9_]+)=", cmd_s)
        for ref in re.findall(r"/run/secrets/([A-Za-z0-9_.-]+)", cmd_s):
            if ref not in [x if isinstance(x, str) else x.get("source") for x in s.get("secrets") or []]:
                probs.append("%s: command reads /run/secrets/%s but the service does not get that secret" % (sn, ref))
    for name, sec in top_secrets.items():
        f = sec.get("file")
        if f:
            p = os.path.normpath(os.path.join(D, f))
            if not (os.path.exists(p) or os.path.exists(p + ".example")):
                probs.append("secret %s: neither %s nor %s.example exists" % (name, f, f))
    check("compose: builds, volumes, secrets (or .example files) and depends_on resolve", probs)
    probs = []
    gw = svcs.get("gateway") or {}
    st = svcs.get("store") or {}
    genv = gw.get("environment") or {}
    if not str(genv.get("S3CACHED_BACKEND", "")).startswith("http://store:"):
        probs.append("gateway S3CACHED_BACKEND %r does not point at the store service" % genv.get("S3CACHED_BACKEND"))
    if not str((st.get("environment") or {}).get("S3CACHED_BACKEND", "")).startswith("file:///"):
        probs.append("store is not a file:// backend")
    if not any(":/srv/store" in v for v in st.get("volumes") or [] if isinstance(v, str)):
        probs.append("store has no volume on /srv/store")
    dep = gw.get("depends_on") or {}
    if not (isinstance(dep, dict) and (dep.get("store") or {}).get("condition") == "service_healthy"):
        probs.append("gateway does not wait for a healthy store")
    for sn in ("gateway", "store"):
        for p in (svcs.get(sn) or {}).get("ports") or []:
            if not str(p).startswith(("127.0.0.1:", "[::1]:")):
                probs.append("%s publishes %s beyond loopback" % (sn, p))
    check("compose: gateway → store (file volume), health-gated, loopback ports", probs)
    check("compose: every S3CACHED_* name is a serve option" + ("" if OPTIONS else " (skipped)"),
          env_names_ok("compose", [n for n in env_names if n.startswith("S3CACHED_")]))

    # Prometheus config mounted by compose
    probs = []
    pv = [v for v in (svcs.get("prometheus") or {}).get("volumes") or [] if isinstance(v, str) and v.startswith("./")]
    pconf = None
    for v in pv:
        if v.split(":")[1].endswith("prometheus.yml"):
            pconf = os.path.normpath(os.path.join(D, v.split(":")[0]))
    if not pconf or not os.path.isfile(pconf):
        probs.append("compose mounts no prometheus.yml that exists")
    else:
        pc = yaml.safe_load(read(pconf))
        jobs = pc.get("scrape_configs") or []
        job = [j for j in jobs if j.get("metrics_path") == "/_/metrics"]
        if not job:
            probs.append("no scrape job with metrics_path /_/metrics")
        else:
            j = job[0]
            auth = j.get("authorization") or {}
            cf = auth.get("credentials_file") or j.get("bearer_token_file")
            if not cf:
                probs.append("scrape job has no bearer token file")
            elif not cf.startswith("/run/secrets/") or cf.rsplit("/", 1)[1] not in \
                    [x if isinstance(x, str) else x.get("source") for x in (svcs.get("prometheus") or {}).get("secrets") or []]:
                probs.append("token file %s is not a secret given to the prometheus service" % cf)
            targets = [t for sc in j.get("static_configs") or [] for t in sc.get("targets") or []]
            if not any(t.split(":")[0] in svcs for t in targets):
                probs.append("targets %s name no compose service" % targets)
    check("compose: Prometheus scrapes /_/metrics with the admin_token secret as bearer", probs)

# --- Dockerfile -----------------------------------------------------------------------------------
dpath = os.path.join(D, "Dockerfile")
if not os.path.isfile(dpath):
    check("deploy/Dockerfile exists", ["missing"])
else:
    lines = []
    cur = ""
    for raw in read(dpath).splitlines():
        s = raw.strip()
        if not cur and (not s or s.startswith("#")):
            continue
        if s.startswith("#"):
            continue
        cur += (" " if cur else "") + s.rstrip("\\").strip()
        if not s.endswith("\\"):
            lines.append(cur)
            cur = ""
    instr = [(ln.split(None, 1)[0].upper(), ln.split(None, 1)[1] if " " in ln else "") for ln in lines]
    stages = []
    for i, (k, a) in enumerate(instr):
        if k == "FROM":
            stages.append({"from": a, "body": []})
        elif stages:
            stages[-1]["body"].append((k, a))
    probs = []
    if len(stages) < 2:
        probs.append("%d stages, want a build and a runtime stage" % len(stages))
    first_from = next(i for i, (k, _) in enumerate(instr) if k == "FROM")
    pre_args = [a.split("=")[0] for k, a in instr[:first_from] if k == "ARG"]
    if "BASE_IMAGE" not in pre_args:
        probs.append("no ARG BASE_IMAGE before the first FROM")
    for s in stages:
        if "${BASE_IMAGE}" not in s["from"] and "$BASE_IMAGE" not in s["from"]:
            probs.append("FROM %s does not use the BASE_IMAGE argument" % s["from"])
    default = [a for k, a in instr[:first_from] if k == "ARG" and a.startswith("BASE_IMAGE=")]
    if not default or "bookworm-slim" not in default[0]:
        probs.append("BASE_IMAGE default is not a Debian bookworm-slim image: %s" % default)
    check("Dockerfile: multi-stage, FROM ${BASE_IMAGE} (default bookworm-slim)", probs)

    if stages:
        rt = stages[-1]["body"]
        names = [re.search(r"\bAS\s+(\S+)", s["from"], re.I) for s in stages]
        names = [m.group(1) for m in names if m]
        probs = []
        users = [a for k, a in rt if k == "USER"]
        if not users:
            probs.append("the runtime stage sets no USER")
        elif users[-1].split(":")[0] in ("root", "0"):
            probs.append("the runtime stage runs as %s" % users[-1])
        check("Dockerfile: runtime stage runs as a non-root USER (%s)" % (users[-1] if users else "-"), probs)
        hc = [a for k, a in rt if k == "HEALTHCHECK"]
        check("Dockerfile: HEALTHCHECK curls /_/health",
              [] if hc and "curl" in hc[0] and ("/_/health" in hc[0] or "S3CACHED_HEALTH_URL" in hc[0]) else ["HEALTHCHECK: %s" % hc])
        health_env = " ".join(a for k, a in rt if k == "ENV")
        if hc and "S3CACHED_HEALTH_URL" in hc[0]:
            check("Dockerfile: S3CACHED_HEALTH_URL defaults to /_/health",
                  [] if re.search(r"S3CACHED_HEALTH_URL=\S*/_/health", health_env) else ["ENV: " + health_env])
        vols = " ".join(a for k, a in rt if k == "VOLUME")
        check("Dockerfile: the cache directory is a VOLUME and S3CACHED_CACHE_DIR points at it",
              [] if vols and re.search(r"S3CACHED_CACHE_DIR=(\S+)", health_env) and
              re.search(r"S3CACHED_CACHE_DIR=(\S+)", health_env).group(1) in vols else ["VOLUME %s, ENV %s" % (vols, health_env)])
        envs = re.findall(r"\b(S3CACHED_[A-Z0-9_]+)=", health_env)
        check("Dockerfile: ENV S3CACHED_* names are serve options" + ("" if OPTIONS else " (skipped)"),
              env_names_ok("Dockerfile", envs))
        runs = " ".join(a for k, a in rt if k == "RUN")
        probs = []
        for pkg in ("libgnutls30", "liblmdb0", "libcurl4", "libssl3", "zlib1g", "libexpat1",
                    "libjansson4", "ca-certificates", "curl"):
            if not re.search(r"(^|\s)%s(\s|$)" % re.escape(pkg), runs):
                probs.append("runtime stage does not install %s" % pkg)
        for bad in re.findall(r"\S+-dev\b|build-essential|\bgcc\b|\bmake\b", runs):
            probs.append("runtime stage installs build tool/package %s" % bad)
        check("Dockerfile: runtime stage installs only the runtime libraries", probs)

        probs = []
        for s in stages:
            for k, a in s["body"]:
                if k not in ("COPY", "ADD"):
                    continue
                toks = [t for t in a.split() if not t.startswith("--")]
                frm = re.search(r"--from=(\S+)", a)
                if frm:
                    if frm.group(1) not in names:
                        probs.append("COPY --from=%s: no such stage (%s)" % (frm.group(1), names))
                    continue
                for src in toks[:-1]:
                    if not os.path.exists(os.path.join(REPO, src)):
                        probs.append("COPY source %s does not exist in the build context (repo root)" % src)
        build_runs = " ".join(a for k, a in stages[0]["body"] if k == "RUN")
        if "make" not in build_runs:
            probs.append("the build stage does not run make")
        # every source folder the Makefile builds (DIRS) goes into the build stage and through
        # the .dockerignore (a new folder forgotten here breaks only the image build)
        mk = os.path.join(REPO, "Makefile")
        dm = re.search(r"^DIRS\s*:?=\s*(.*)$", read(mk), re.M) if os.path.isfile(mk) else None
        copied = {t.rstrip("/") for k, a in stages[0]["body"] if k == "COPY" and "--from" not in a
                  for t in a.split()[:-1]}
        ign = os.path.join(D, "Dockerfile.dockerignore")
        allowed = {ln.strip()[1:].rstrip("/") for ln in read(ign).splitlines()
                   if ln.strip().startswith("!")} if os.path.isfile(ign) else None
        for d in (dm.group(1).split() if dm else []):
            if d not in copied:
                probs.append("the Makefile builds %s/, which the build stage does not COPY" % d)
            if allowed is not None and d not in allowed:
                probs.append("Dockerfile.dockerignore keeps %s/ out of the build context" % d)
        check("Dockerfile: COPY sources exist in the repository and the build stage runs make", probs)
        ep = [a for k, a in rt if k in ("ENTRYPOINT", "CMD")]
        check("Dockerfile: ENTRYPOINT/CMD run s3cached serve",
              [] if any("s3cached" in a for a in ep) and any("serve" in a for a in ep) else ["%s" % ep])

# --- systemd unit (static) ------------------------------------------------------------------
upath = os.path.join(D, "systemd", "s3cached.service")
if os.path.isfile(upath):
    u = read(upath)
    kv = {}
    for ln in u.splitlines():
        m = re.match(r"^([A-Za-z]+)=(.*)$", ln.strip())
        if m:
            kv.setdefault(m.group(1), []).append(m.group(2))
    probs = []
    want = {"ProtectSystem": "strict", "NoNewPrivileges": "yes", "PrivateTmp": "yes",
            "CapabilityBoundingSet": "", "ProtectHome": "yes"}
    for k, v in want.items():
        if v not in kv.get(k, []):
            probs.append("%s=%s missing (have %s)" % (k, v, kv.get(k)))
    for k in ("ReadWritePaths", "EnvironmentFile", "ExecStart", "User"):
        if not kv.get(k):
            probs.append("%s= missing" % k)
    if not any("serve" in x for x in kv.get("ExecStart", [])):
        probs.append("ExecStart does not run serve")
    if not any("HUP" in x and "$MAINPID" in x for x in kv.get("ExecReload", [])):
        probs.append("ExecReload does not send SIGHUP to $MAINPID")
    cache = [x for x in kv.get("ReadWritePaths", []) if "/var/cache/s3cached" in x]
    if not cache:
        probs.append("ReadWritePaths does not include the cache directory /var/cache/s3cached")
    check("systemd unit: hardening, ReadWritePaths, EnvironmentFile, reload = SIGHUP", probs)
    envf = os.path.join(D, "systemd", "s3cached.env")
    if os.path.isfile(envf):
        names = re.findall(r"^#?\s*(S3CACHED_[A-Z0-9_]+)=", read(envf), re.M)
        check("systemd env file: S3CACHED_* names are serve options" + ("" if OPTIONS else " (skipped)"),
              env_names_ok("s3cached.env", names))

# --- cluster mode (--peers) ------------------------------------------------------------------
# A peered set-up must name the same members everywhere: a k8s workload with S3CACHED_PEERS
# dns:NAME:PORT needs a headless Service NAME over its own pods on a port that reaches
# them, --self from the pod's IP on that port, a peer key (--peer-secret or the admin token)
# and several replicas; compose gateways must list each other identically, each --self its
# own entry on the port it listens on, and Prometheus must scrape every one of them.


def env_value(c, name):
    for e in c.get("env") or []:
        if e.get("name") == name:
            return e
    return None


peered = 0
for fn, w in kinds.get("Deployment", []) + kinds.get("DaemonSet", []):
    tmpl = (w.get("spec") or {}).get("template") or {}
    labels = (tmpl.get("metadata") or {}).get("labels") or {}
    for c in (tmpl.get("spec") or {}).get("containers") or []:
        pe = env_value(c, "S3CACHED_PEERS")
        if not pe:
            continue
        peered += 1
        probs = []
        cports = {p.get("name"): p.get("containerPort") for p in c.get("ports") or []}
        m = re.match(r"^dns:([a-z0-9.-]+):(\d+)$", str(pe.get("value", "")))
        if not m:
            probs.append("S3CACHED_PEERS %r is not dns:NAME:PORT" % pe.get("value"))
        else:
            svc_name, port = m.group(1).split(".")[0], int(m.group(2))
            svc = [s for _, s in kinds.get("Service", []) if s["metadata"]["name"] == svc_name]
            if not svc:
                probs.append("no Service %s for --peers %s" % (svc_name, pe["value"]))
            else:
                sp = svc[0].get("spec") or {}
                if sp.get("clusterIP") != "None":
                    probs.append("Service %s is not headless (clusterIP: None): DNS would give one "
                                 "virtual IP, not every pod" % svc_name)
                if sp.get("publishNotReadyAddresses"):
                    probs.append("Service %s publishes pods that are not ready" % svc_name)
                sel = sp.get("selector") or {}
                if not sel or any(labels.get(k) != v for k, v in sel.items()):
                    probs.append("Service %s selector %s does not select this workload's pods" % (svc_name, sel))
                sports = [p for p in sp.get("ports") or [] if p.get("port") == port]
                if not sports:
                    probs.append("Service %s has no port %d" % (svc_name, port))
                else:
                    tp = sports[0].get("targetPort", port)
                    if cports.get(tp, tp) != port:
                        probs.append("Service %s port %d targets %r, not container port %d: the "
                                     "members' names would not be where they listen" % (svc_name, port, tp, port))
            se = env_value(c, "S3CACHED_SELF")
            sv = str((se or {}).get("value", ""))
            vm = re.match(r"^\$\(([A-Z0-9_]+)\):(\d+)$", sv)
            if not vm:
                probs.append("S3CACHED_SELF %r is not $(POD_IP_VAR):PORT" % sv)
            else:
                src = env_value(c, vm.group(1))
                fp = (((src or {}).get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath")
                if fp != "status.podIP":
                    probs.append("S3CACHED_SELF uses $(%s), which is not the pod's IP (fieldRef "
                                 "status.podIP)" % vm.group(1))
                elif [e.get("name") for e in c["env"]].index(vm.group(1)) > \
                        [e.get("name") for e in c["env"]].index("S3CACHED_SELF"):
                    probs.append("$(%s) is defined after S3CACHED_SELF (Kubernetes expands only "
                                 "earlier variables)" % vm.group(1))
                if int(vm.group(2)) != port:
                    probs.append("S3CACHED_SELF port %s differs from the --peers port %d" % (vm.group(2), port))
        if not (env_value(c, "S3CACHED_PEER_SECRET") or env_value(c, "S3CACHED_ADMIN_TOKEN")):
            probs.append("no S3CACHED_PEER_SECRET nor S3CACHED_ADMIN_TOKEN: peers cannot authenticate")
        if w["kind"] == "Deployment" and int((w.get("spec") or {}).get("replicas", 1)) < 2:
            probs.append("a peered Deployment with fewer than 2 replicas")
        check("k8s %s %s: peered through a headless Service over its own pods, --self the pod IP, "
              "a peer key" % (w["kind"], w["metadata"]["name"]), probs)
check("k8s: a workload runs in cluster mode (S3CACHED_PEERS)", [] if peered else ["none sets S3CACHED_PEERS"])

if comp is not None:
    svcs = comp.get("services") or {}
    probs = []
    gws = {sn: s.get("environment") or {} for sn, s in svcs.items()
           if isinstance(s.get("environment"), dict) and "S3CACHED_PEERS" in s["environment"]}
    if len(gws) < 2:
        probs.append("fewer than two compose services set S3CACHED_PEERS")
    lists = {sn: str(e["S3CACHED_PEERS"]).split(",") for sn, e in gws.items()}
    for sn, e in gws.items():
        if lists[sn] != lists[next(iter(lists))]:
            probs.append("%s lists %s, %s lists %s: every member must list the same servers"
                         % (sn, lists[sn], next(iter(lists)), lists[next(iter(lists))]))
        self_ = str(e.get("S3CACHED_SELF", ""))
        port = str(e.get("S3CACHED_LISTEN", "")).rsplit(":", 1)[-1]
        if self_ != "%s:%s" % (sn, port):
            probs.append("%s: S3CACHED_SELF %r, want %s:%s (its name and listening port)" % (sn, self_, sn, port))
        if self_ not in lists[sn]:
            probs.append("%s: S3CACHED_SELF %r is not in its S3CACHED_PEERS" % (sn, self_))
        if not str((svcs[sn].get("command") or "")).count("S3CACHED_ADMIN_TOKEN") and \
                "S3CACHED_PEER_SECRET" not in e:
            probs.append("%s: neither an admin token nor a peer secret: peers cannot authenticate" % sn)
    for sn, lst in lists.items():
        for ent in lst:
            if ent.split(":")[0] not in gws:
                probs.append("%s lists %s, which is not a peered compose service" % (sn, ent))
    pconf = os.path.join(D, "prometheus", "prometheus.yml")
    if os.path.isfile(pconf):
        pc = yaml.safe_load(read(pconf))
        targets = [t for j in pc.get("scrape_configs") or [] if j.get("metrics_path") == "/_/metrics"
                   for sc in j.get("static_configs") or [] for t in sc.get("targets") or []]
        for ent in next(iter(lists.values()), []):
            if ent not in targets:
                probs.append("Prometheus does not scrape %s (/_/metrics is per gateway)" % ent)
    check("compose: %d gateways peered with one list, each --self its own entry, all scraped" % len(gws), probs)

# --- scale-out ---------------------------------------------------------------------------------
npath = os.path.join(D, "scale-out", "nginx.conf")
if os.path.isfile(npath):
    n = re.sub(r"#[^\n]*", "", read(npath))
    probs = []
    for pat, what in ((r"hash\s+\$uri\s+consistent\s*;", "hash $uri consistent"),
                      (r"proxy_set_header\s+Host\s+\$http_host\s*;", "proxy_set_header Host $http_host"),
                      (r"proxy_request_buffering\s+off\s*;", "proxy_request_buffering off"),
                      (r"proxy_buffering\s+off\s*;", "proxy_buffering off"),
                      (r"client_max_body_size\s+0\s*;", "client_max_body_size 0"),
                      (r"proxy_next_upstream\s+error\s+timeout\s*;", "proxy_next_upstream error timeout"),
                      (r"proxy_pass\s+http://s3cached\s*;", "proxy_pass http://s3cached (no URI part: the path is passed unchanged)")):
        if not re.search(pat, n):
            probs.append("missing: " + what)
    if len(re.findall(r"^\s*server\s+\S+:\d+", n, re.M)) < 2:
        probs.append("fewer than two upstream servers")
    check("scale-out/nginx.conf: consistent hash on $uri, Host passthrough, streaming, retry", probs)
epath = os.path.join(D, "scale-out", "envoy.yaml")
if os.path.isfile(epath):
    probs = []
    try:
        e = yaml.safe_load(read(epath))
        cl = (e.get("static_resources") or {}).get("clusters") or []
        c = cl[0] if cl else {}
        if c.get("lb_policy") != "RING_HASH":
            probs.append("cluster lb_policy %r, want RING_HASH" % c.get("lb_policy"))
        eps = [x for la in (c.get("load_assignment") or {}).get("endpoints") or [] for x in la.get("lb_endpoints") or []]
        if len(eps) < 2:
            probs.append("fewer than two endpoints")
        txt = yaml.safe_dump(e)
        if "header_name: :path" not in txt and "header_name: ':path'" not in txt:
            probs.append("no hash_policy on the :path header")
        if "auto_host_rewrite: true" in txt or "host_rewrite_literal" in txt:
            probs.append("Host is rewritten (SigV4 would fail)")
        routes = re.findall(r"cluster: (\S+)", txt)
        if any(r != c.get("name") for r in routes):
            probs.append("a route names an unknown cluster: %s" % routes)
        if "/_/health" not in txt:
            probs.append("no health check on /_/health")
    except Exception as ex:  # noqa: BLE001
        probs.append("envoy.yaml: %s" % ex)
    check("scale-out/envoy.yaml: ring hash on :path, endpoints, health check, Host kept", probs)

print("check_deploy: %d passed, %d failed" % (passed, failed))
sys.exit(0 if failed == 0 else 1)
