// tests/deploy/k8s-schema/validate.mjs: runs kubernetes-models' JSON-schema validators
// (ajv, compiled from the Kubernetes OpenAPI spec) over the documents on stdin, a JSON
// array of {file, index, doc}. Prints one "FAIL file#index kind: reason" per invalid
// document, "ok N" at the end; exit 1 when any failed. Unknown fields are tsc's part.
import { DaemonSet } from "kubernetes-models/apps/v1/DaemonSet";
import { Deployment } from "kubernetes-models/apps/v1/Deployment";
import { Service } from "kubernetes-models/v1/Service";
import { ConfigMap } from "kubernetes-models/v1/ConfigMap";
import { Secret } from "kubernetes-models/v1/Secret";
import fs from "node:fs";

const MODELS = { DaemonSet, Deployment, Service, ConfigMap, Secret };
const docs = JSON.parse(fs.readFileSync(0, "utf8"));
let bad = 0, n = 0;
for (const { file, index, doc } of docs) {
    const M = MODELS[doc.kind];
    if (!M) continue;
    n++;
    try {
        new M(doc).validate();
    } catch (e) {
        bad++;
        console.log(`FAIL ${file}#${index} ${doc.kind}: ${String(e.message).slice(0, 600)}`);
    }
}
console.log(`ok ${n - bad} of ${n}`);
process.exit(bad ? 1 : 0);
