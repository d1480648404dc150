#!/usr/bin/python3
"""doclinks.py (make lint): every relative link of the tracked Markdown pages leads somewhere.

For each [text](target) of README.md, HACKING.md, docs/*.md, bench/*.md, deploy/*.md and the
other tracked *.md files (node_modules and docs/pending/ aside): the file or folder exists, and a
#fragment names a heading of the target page (GitHub's anchors: lower case, punctuation dropped,
spaces as '-', a repeated heading suffixed -1, -2...). http(s) and mailto links are not
fetched. Prints one line per broken link and exits 1 if there is any.
  tests/tools/doclinks.py [FILE.md...]
"""
import os
import re
import subprocess
import sys

ROOT = os.path.realpath(os.path.join(os.path.dirname(__file__), "..", ".."))
LINK = re.compile(r"(?<!!)\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^\s*(```|~~~)")


def pages():
    out = subprocess.run(["git", "ls-files", "*.md"], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout.split()
    return [p for p in out if "node_modules/" not in p and not p.startswith("docs/pending/")]


def slug(heading, seen):
    s = re.sub(r"<[^>]+>", "", heading.strip().lower())
    s = re.sub(r"[^\w\- ]", "", s)
    s = s.replace(" ", "-")
    n = seen.get(s, 0)
    seen[s] = n + 1
    return s if n == 0 else "%s-%d" % (s, n)


def anchors(path, cache={}):
    if path not in cache:
        seen, found, fenced = {}, set(), False
        with open(path, encoding="utf-8") as f:
            for line in f:
                if FENCE.match(line):
                    fenced = not fenced
                    continue
                m = None if fenced else re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
                if m:
                    found.add(slug(m.group(1), seen))
        cache[path] = found
    return cache[path]


def links(path):
    fenced = False
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if FENCE.match(line):
                fenced = not fenced
                continue
            if fenced:
                continue
            line = re.sub(r"`[^`]*`", "``", line)  # no links inside code spans
            for m in LINK.finditer(line):
                yield n, m.group(1)


def main(argv):
    bad = 0
    for page in argv or pages():
        src = os.path.join(ROOT, page)
        for n, target in links(src):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):
                continue  # http:, https:, mailto:
            path, _, frag = target.partition("#")
            dest = os.path.normpath(os.path.join(os.path.dirname(src), path)) if path else src
            if not dest.startswith(ROOT) or not os.path.exists(dest):
                print("doclinks: %s:%d: %s: no such file" % (page, n, target))
                bad = 1
            elif frag and dest.endswith(".md") and frag not in anchors(dest):
                print("doclinks: %s:%d: %s: no heading #%s in %s" %
                      (page, n, target, frag, os.path.relpath(dest, ROOT)))
                bad = 1
    return bad


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
