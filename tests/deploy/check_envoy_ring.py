#!/usr/bin/env python3
"""check_envoy_ring.py ENVOY_YAML: the settings of deploy/scale-out/envoy.yaml that a
gateway's copy of Envoy's ring (ring/ring_envoy.c) assumes, checked statically (Envoy
is not packaged in Debian, so it cannot run here). Run by tests/deploy/validate.sh, which
also feeds it broken copies. Prints one line per problem and exits 1 if there is any;
otherwise prints the ring the gateways must build: the endpoint list and minimum size.

What must hold, and why (ring_envoy.h):
  - one cluster, lb_policy RING_HASH; ring_hash_lb_config.hash_function XX_HASH (or unset:
    the default); minimum_ring_size set; maximum_ring_size unset or >= the minimum and
    <= 8M; no use_hostname_for_hashing, no hash_balance_factor (bounded load moves keys by
    load), no locality-weighted balancing (it rescales weights per locality);
  - endpoints: socket addresses with an IP literal (the ring hashes "IP:PORT", as Envoy
    prints it), one priority, weights (load_balancing_weight) 1..1000 if any;
  - every route to the cluster hashes exactly `:path` with regex_rewrite `\\?.*$` -> ""
    (the query stripped), nothing else;
  - the connection manager leaves the path as sent: normalize_path false, merge_slashes
    false, no path_with_escaped_slashes_action other than KEEP_UNCHANGED.
"""
import ipaddress
import sys

import yaml


def walk(o, key):
    """every value of @key anywhere in @o"""
    if isinstance(o, dict):
        for k, v in o.items():
            if k == key:
                yield v
            yield from walk(v, key)
    elif isinstance(o, list):
        for v in o:
            yield from walk(v, key)


def main(path):
    probs = []
    with open(path) as f:
        e = yaml.safe_load(f)
    sr = (e or {}).get("static_resources") or {}
    clusters = sr.get("clusters") or []
    if len(clusters) != 1:
        probs.append("want exactly one cluster, found %d" % len(clusters))
        c = clusters[0] if clusters else {}
    else:
        c = clusters[0]
    if c.get("lb_policy") != "RING_HASH":
        probs.append("lb_policy is %r, want RING_HASH" % c.get("lb_policy"))
    rh = c.get("ring_hash_lb_config") or {}
    if rh.get("hash_function", "XX_HASH") != "XX_HASH":
        probs.append("ring_hash_lb_config.hash_function is %r: the gateways reproduce XX_HASH only"
                     % rh.get("hash_function"))
    mn = rh.get("minimum_ring_size")
    if not isinstance(mn, int) or mn < 1:
        probs.append("ring_hash_lb_config.minimum_ring_size must be set (an integer; the gateways "
                     "are given the same number), got %r" % mn)
        mn = 1024
    mx = rh.get("maximum_ring_size")
    if mx is not None and (not isinstance(mx, int) or mx < mn or mx > 8 << 20):
        probs.append("maximum_ring_size %r: want unset, or between minimum_ring_size and 8M" % mx)
    for k in ("use_hostname_for_hashing", "hash_balance_factor"):
        if list(walk(c, k)):
            probs.append("%s is set: the gateways' ring does not model it" % k)
    if list(walk(c.get("common_lb_config") or {}, "locality_weighted_lb_config")):
        probs.append("locality_weighted_lb_config rescales weights per locality: not modelled")
    if c.get("lb_policy") and list(walk(c, "load_balancing_policy")):
        probs.append("load_balancing_policy (typed extension) also set: ambiguous")

    names = []
    la = c.get("load_assignment") or {}
    for grp in la.get("endpoints") or []:
        if grp.get("priority", 0) != 0:
            probs.append("an endpoint group has priority %r: the gateways model one priority" % grp.get("priority"))
        if "load_balancing_weight" in grp:
            probs.append("a locality load_balancing_weight is set: not modelled")
        for ep in grp.get("lb_endpoints") or []:
            sa = (((ep.get("endpoint") or {}).get("address") or {}).get("socket_address")) or {}
            addr, port = sa.get("address"), sa.get("port_value")
            try:
                ip = ipaddress.ip_address(addr)
            except (ValueError, TypeError):
                probs.append("endpoint address %r is not an IP literal: Envoy hashes the resolved "
                             "IP:PORT, which the gateways cannot know from a name" % addr)
                continue
            if not isinstance(port, int):
                probs.append("endpoint %s has no port_value" % addr)
                continue
            w = ep.get("load_balancing_weight", 1)
            if not isinstance(w, int) or not 1 <= w <= 1000:
                probs.append("endpoint %s weight %r: want 1..1000" % (addr, w))
            name = ("[%s]:%d" if ip.version == 6 else "%s:%d") % (ip.compressed, port)
            names.append(name + (" weight=%d" % w if w != 1 else ""))
    if len(names) < 2:
        probs.append("fewer than two endpoints")

    routes = [r for r in walk(sr.get("listeners") or [], "route") if isinstance(r, dict)
              and r.get("cluster") == c.get("name")]
    if not routes:
        probs.append("no route sends to cluster %r" % c.get("name"))
    for r in routes:
        hp = r.get("hash_policy") or []
        ok = (len(hp) == 1 and set(hp[0]) == {"header"}
              and (hp[0]["header"] or {}).get("header_name") == ":path"
              and ((hp[0]["header"].get("regex_rewrite") or {}).get("pattern") or {}).get("regex") == "\\?.*$"
              and hp[0]["header"]["regex_rewrite"].get("substitution", None) == "")
        if not ok:
            probs.append("route hash_policy %r: want exactly one header policy on :path with "
                         "regex_rewrite {pattern: {regex: '\\?.*$'}, substitution: ''}" % (hp,))

    hcms = [f.get("typed_config") or {} for f in walk(sr.get("listeners") or [], "filters")
            for f in (f if isinstance(f, list) else []) if "http_connection_manager" in str(f.get("name"))]
    if not hcms:
        probs.append("no http_connection_manager")
    for h in hcms:
        if h.get("normalize_path") is not False:
            probs.append("normalize_path must be false (got %r): the ring hashes the path as sent"
                         % h.get("normalize_path"))
        if h.get("merge_slashes") is not False:
            probs.append("merge_slashes must be false (got %r)" % h.get("merge_slashes"))
        act = h.get("path_with_escaped_slashes_action", "KEEP_UNCHANGED")
        if act not in ("KEEP_UNCHANGED", "IMPLEMENTATION_SPECIFIC_DEFAULT"):
            probs.append("path_with_escaped_slashes_action %r changes the hashed path" % act)

    for p in probs:
        print("envoy ring: " + p)
    if probs:
        return 1
    print("envoy ring: RING_HASH/XX_HASH, minimum_ring_size %d, :path without the query; the gateways' "
          "list: %s" % (mn, ",".join(names)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
