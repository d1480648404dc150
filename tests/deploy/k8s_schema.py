"""tests/deploy/k8s_schema.py: writes deploy/k8s's documents out for the schema check.

  k8s_schema.py ts   FILE... > manifests.ts    one typed constant per document
  k8s_schema.py json FILE... > docs.json       [{file, index, doc}] for validate.mjs

The .ts form assigns each document, as an object literal, to its kubernetes-models
interface (IDaemonSet, ...): `tsc --strict` then rejects unknown or misspelt fields
(excess property checks reach every nested literal), wrong types and missing required
fields. Kinds without a model here (Kustomization) are left out.
"""
import json
import os
import sys

import yaml

MODELS = {
    ("apps/v1", "DaemonSet"): ("kubernetes-models/apps/v1/DaemonSet", "IDaemonSet"),
    ("apps/v1", "Deployment"): ("kubernetes-models/apps/v1/Deployment", "IDeployment"),
    ("v1", "Service"): ("kubernetes-models/v1/Service", "IService"),
    ("v1", "ConfigMap"): ("kubernetes-models/v1/ConfigMap", "IConfigMap"),
    ("v1", "Secret"): ("kubernetes-models/v1/Secret", "ISecret"),
}


def documents(paths):
    for path in paths:
        with open(path) as f:
            for i, d in enumerate(x for x in yaml.safe_load_all(f) if x is not None):
                yield os.path.basename(path), i, d


def main():
    mode, paths = sys.argv[1], sys.argv[2:]
    if mode == "json":
        json.dump([{"file": f, "index": i, "doc": d} for f, i, d in documents(paths)], sys.stdout)
        return
    imports, body = set(), []
    for n, (f, i, d) in enumerate(documents(paths)):
        m = MODELS.get((d.get("apiVersion"), d.get("kind")))
        if not m:
            continue
        imports.add(m)
        body.append("// %s, document %d\nexport const doc%d: %s = %s;"
                    % (f, i, n, m[1], json.dumps(d, indent=2)))
    for mod, typ in sorted(imports):
        print('import type { %s } from "%s";' % (typ, mod))
    print("\n".join(body))


if __name__ == "__main__":
    main()
