// 25-jssdk: the newest @aws-sdk/client-s3 (node, default checksums) — PutObject with a
// Buffer (x-amz-checksum-crc32 header) and with a file stream (aws-chunked +
// STREAMING-UNSIGNED-PAYLOAD-TRAILER), GetObject with ChecksumMode ENABLED, Range,
// HeadObject, ListObjectsV2 (GET /b/?list-type=2), ListObjectVersions, GetObjectAttributes,
// CopyObject, DeleteObject(s), lib-storage Upload (5 MiB parts, queue 4). Starts its own
// s3cached (like lib.sh). Needs tests/e2e/node_modules (make deps-test).
import { spawn } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import net from "node:net";
import { fileURLToPath } from "node:url";
import { createRequire } from "node:module";

const here = path.dirname(fileURLToPath(import.meta.url));
const BIN = process.env.S3CACHED_BIN || path.join(here, "..", "..", "build", "s3cached");
const NAME = "25-jssdk.mjs";
const requireHere = createRequire(path.join(here, "index.js"));
let passed = 0, failed = 0;
const sha = (b) => createHash("sha256").update(b).digest("hex");

function finish() {
  console.log(`${NAME}: ${passed} passed, ${failed} failed`);
  process.exitCode = failed ? 1 : 0;
}
async function check(name, fn) {
  try {
    await fn();
    passed++;
    console.log(`ok   - ${name}`);
  } catch (e) {
    failed++;
    console.log(`FAIL - ${name}`);
    const msg = (e && e.name && e.$metadata)
      ? `${e.name} (HTTP ${e.$metadata.httpStatusCode}): ${e.message}` : String(e && e.stack || e);
    for (const l of msg.split("\n").slice(0, 12)) console.log(`       | ${l}`);
  }
}
function eq(what, got, want) {
  const g = JSON.stringify(got), w = JSON.stringify(want);
  if (g !== w) throw new Error(`${what}: expected ${w}, got ${g}`);
}
async function bodyBuf(stream) {
  const parts = [];
  for await (const c of stream) parts.push(c);
  return Buffer.concat(parts);
}
function sameBytes(what, got, want) {
  if (!got.equals(want)) {
    throw new Error(`${what}: got ${got.length} bytes sha256 ${sha(got).slice(0, 16)}, ` +
                    `want ${want.length} bytes sha256 ${sha(want).slice(0, 16)}`);
  }
}

let mods;
try {
  mods = {
    s3: requireHere("@aws-sdk/client-s3"),
    storage: requireHere("@aws-sdk/lib-storage"),
  };
} catch (e) {
  failed++;
  console.log("FAIL - load @aws-sdk/client-s3 and @aws-sdk/lib-storage");
  console.log(`       | ${e.message}`);
  console.log("       | run: make deps-test (or cd tests/e2e && npm install @aws-sdk/client-s3 @aws-sdk/lib-storage)");
  finish();
  process.exit(1);
}
const { S3Client, PutObjectCommand, GetObjectCommand, HeadObjectCommand, ListObjectsV2Command,
        CopyObjectCommand, DeleteObjectCommand, DeleteObjectsCommand, CreateBucketCommand,
        ListObjectVersionsCommand, GetObjectAttributesCommand } = mods.s3;
const { Upload } = mods.storage;

// --- server (same contract as lib.sh) ---
const freePort = () => new Promise((res, rej) => {
  const s = net.createServer();
  s.listen(0, "127.0.0.1", () => { const p = s.address().port; s.close(() => res(p)); });
  s.on("error", rej);
});
const tmp = fs.mkdtempSync(path.join(process.env.TMPDIR || os.tmpdir(), "s3c-e2e-js."));
const store = path.join(tmp, "store"), cache = path.join(tmp, "cache");
fs.mkdirSync(store); fs.mkdirSync(cache);
const AK = "AKJS" + randomBytes(6).toString("hex").toUpperCase();
const SK = randomBytes(20).toString("hex");
const port = await freePort();
const endpoint = `http://127.0.0.1:${port}`;
const logPath = path.join(tmp, "server.log");
const logFd = fs.openSync(logPath, "w");
const srv = spawn(BIN, ["serve", "--listen", `127.0.0.1:${port}`, "--backend", `file://${store}`,
  "--cache-dir", cache, "--access-key", AK, "--secret-key", SK, "--region", "us-east-1",
  "--log-level", "debug"], { stdio: ["ignore", logFd, logFd] });
let exitCode = null, exitSignal = null;
const exited = new Promise((res) => srv.on("exit", (c, s) => { exitCode = c; exitSignal = s; res(); }));
const logTail = () => { try { return fs.readFileSync(logPath, "utf8").split("\n").slice(-15).join("\n"); } catch { return ""; } };

async function cleanup() {
  if (exitCode === null && exitSignal === null) {
    srv.kill("SIGTERM");
    const t = setTimeout(() => srv.kill("SIGKILL"), 5000);
    await exited;
    clearTimeout(t);
    if (exitCode === 0) { passed++; console.log("ok   - server exits 0 on SIGTERM"); }
    else { failed++; console.log(`FAIL - server exits 0 on SIGTERM\n       | exit ${exitCode} signal ${exitSignal}\n${logTail()}`); }
  }
  if (process.env.E2E_KEEP === "1") console.log(`kept temp dir: ${tmp}`);
  else fs.rmSync(tmp, { recursive: true, force: true });
}
process.on("SIGTERM", async () => { await cleanup(); finish(); process.exit(143); });

let up = false;
for (let i = 0; i < 100 && exitCode === null; i++) {
  try {
    const r = await fetch(`${endpoint}/_/health`, { signal: AbortSignal.timeout(1000) });
    if (r.status === 200 && (await r.text()).startsWith("ok")) { up = true; break; }
  } catch { /* not yet */ }
  await new Promise((r) => setTimeout(r, 100));
}
if (!up) {
  failed++;
  console.log(`FAIL - start server\n       | no ok from /_/health within 10 s (exit ${exitCode}); log tail:\n${logTail()}`);
  await cleanup();
  finish();
  process.exit(1);
}

const s3 = new S3Client({ endpoint, region: "us-east-1", forcePathStyle: true, maxAttempts: 1,
  credentials: { accessKeyId: AK, secretAccessKey: SK } });
const B = "jsb";
const src = path.join(tmp, "src");
fs.mkdirSync(src);

await check("CreateBucket", async () => {
  await s3.send(new CreateBucketCommand({ Bucket: B }));
  if (!fs.existsSync(path.join(store, B))) throw new Error("no bucket dir in the store");
});

const small = randomBytes(100 * 1024 + 7);
await check("PutObject Buffer (x-amz-checksum-crc32), GetObject ChecksumMode ENABLED", async () => {
  const r = await s3.send(new PutObjectCommand({ Bucket: B, Key: "buf/small.bin", Body: small,
    ContentType: "application/x-js", Metadata: { origin: "node" } }));
  eq("ETag", r.ETag, `"${createHash("md5").update(small).digest("hex")}"`);
  sameBytes("store file", fs.readFileSync(path.join(store, B, "buf/small.bin")), small);
  const g = await s3.send(new GetObjectCommand({ Bucket: B, Key: "buf/small.bin", ChecksumMode: "ENABLED" }));
  sameBytes("GetObject body", await bodyBuf(g.Body), small);
  eq("ContentType", g.ContentType, "application/x-js");
  eq("Metadata", g.Metadata, { origin: "node" });
});

const streamed = randomBytes(3 * 1024 * 1024 + 12345);
const streamedPath = path.join(src, "streamed.bin");
fs.writeFileSync(streamedPath, streamed);
await check("PutObject fs stream (aws-chunked, unsigned payload + crc32 trailer)", async () => {
  await s3.send(new PutObjectCommand({ Bucket: B, Key: "stream/file.bin",
    Body: fs.createReadStream(streamedPath), ContentLength: streamed.length }));
  sameBytes("store file", fs.readFileSync(path.join(store, B, "stream/file.bin")), streamed);
  const h = await s3.send(new HeadObjectCommand({ Bucket: B, Key: "stream/file.bin" }));
  eq("ContentLength (decoded)", h.ContentLength, streamed.length);
  if (h.ContentEncoding && h.ContentEncoding.includes("aws-chunked")) {
    throw new Error(`aws-chunked leaked into the stored Content-Encoding: ${h.ContentEncoding}`);
  }
  const g = await s3.send(new GetObjectCommand({ Bucket: B, Key: "stream/file.bin", ChecksumMode: "ENABLED" }));
  sameBytes("GetObject body", await bodyBuf(g.Body), streamed);
});

await check("GetObject Range", async () => {
  const g = await s3.send(new GetObjectCommand({ Bucket: B, Key: "stream/file.bin", Range: "bytes=1000000-1000999" }));
  sameBytes("range body", await bodyBuf(g.Body), streamed.subarray(1000000, 1001000));
  eq("ContentRange", g.ContentRange, `bytes 1000000-1000999/${streamed.length}`);
});

const big = randomBytes(17 * 1024 * 1024 + 3);
const bigPath = path.join(src, "big.bin");
fs.writeFileSync(bigPath, big);
await check("lib-storage Upload 17 MiB stream (5 MiB parts, queue 4)", async () => {
  const u = new Upload({ client: s3, queueSize: 4, partSize: 5 * 1024 * 1024,
    params: { Bucket: B, Key: "mp/big.bin", Body: fs.createReadStream(bigPath) } });
  const r = await u.done();
  if (!/-4"$/.test(r.ETag || "")) throw new Error(`ETag should end in -4", got ${r.ETag}`);
  eq("store sha256", sha(fs.readFileSync(path.join(store, B, "mp/big.bin"))), sha(big));
  const g = await s3.send(new GetObjectCommand({ Bucket: B, Key: "mp/big.bin", ChecksumMode: "ENABLED" }));
  eq("GetObject sha256", sha(await bodyBuf(g.Body)), sha(big));
});

await check("lib-storage Upload of a Buffer below one part (single PutObject)", async () => {
  const u = new Upload({ client: s3, params: { Bucket: B, Key: "mp/one.bin", Body: small } });
  await u.done();
  sameBytes("store file", fs.readFileSync(path.join(store, B, "mp/one.bin")), small);
});

await check("ListObjectsV2 (GET /b/?list-type=2) with prefix, delimiter, pagination", async () => {
  let r = await s3.send(new ListObjectsV2Command({ Bucket: B, Delimiter: "/" }));
  eq("CommonPrefixes", (r.CommonPrefixes || []).map((p) => p.Prefix), ["buf/", "mp/", "stream/"]);
  r = await s3.send(new ListObjectsV2Command({ Bucket: B, Prefix: "mp/" }));
  eq("keys under mp/", (r.Contents || []).map((o) => [o.Key, o.Size]),
     [["mp/big.bin", big.length], ["mp/one.bin", small.length]]);
  r = await s3.send(new ListObjectsV2Command({ Bucket: B, MaxKeys: 2 }));
  eq("page 1", (r.Contents || []).map((o) => o.Key), ["buf/small.bin", "mp/big.bin"]);
  eq("IsTruncated", r.IsTruncated, true);
  r = await s3.send(new ListObjectsV2Command({ Bucket: B, MaxKeys: 2, ContinuationToken: r.NextContinuationToken }));
  eq("page 2", (r.Contents || []).map((o) => o.Key), ["mp/one.bin", "stream/file.bin"]);
});

await check("ListObjectVersions (unversioned: each object once, VersionId null), paginated", async () => {
  const got = [];
  let KeyMarker, VersionIdMarker, pages = 0;
  for (;;) {
    const r = await s3.send(new ListObjectVersionsCommand({ Bucket: B, MaxKeys: 2, KeyMarker,
                                                            VersionIdMarker }));
    pages++;
    for (const v of r.Versions || []) got.push([v.Key, v.VersionId, v.IsLatest, v.Size]);
    eq("DeleteMarkers", r.DeleteMarkers || [], []);
    if (!r.IsTruncated) break;
    KeyMarker = r.NextKeyMarker;
    VersionIdMarker = r.NextVersionIdMarker;
  }
  eq("versions", got, [["buf/small.bin", "null", true, small.length],
                       ["mp/big.bin", "null", true, big.length],
                       ["mp/one.bin", "null", true, small.length],
                       ["stream/file.bin", "null", true, streamed.length]]);
  eq("pages", pages, 2);
});

await check("GetObjectAttributes (ETag, ObjectSize, StorageClass, ObjectParts)", async () => {
  const r = await s3.send(new GetObjectAttributesCommand({ Bucket: B, Key: "mp/big.bin",
    ObjectAttributes: ["ETag", "ObjectSize", "StorageClass", "ObjectParts"], MaxParts: 3 }));
  if (!/-4$/.test(r.ETag || "")) throw new Error(`ETag should end in -4 (unquoted), got ${r.ETag}`);
  eq("ObjectSize", r.ObjectSize, big.length);
  eq("StorageClass", r.StorageClass, "STANDARD");
  eq("TotalPartsCount", r.ObjectParts.TotalPartsCount, 4);
  const mb5 = 5 * 1024 * 1024;
  eq("parts", (r.ObjectParts.Parts || []).map((p) => [p.PartNumber, p.Size]),
     [[1, mb5], [2, mb5], [3, mb5]]);
  eq("IsTruncated", r.ObjectParts.IsTruncated, true);
  const r2 = await s3.send(new GetObjectAttributesCommand({ Bucket: B, Key: "mp/big.bin",
    ObjectAttributes: ["ObjectParts"], PartNumberMarker: r.ObjectParts.NextPartNumberMarker }));
  eq("last part", (r2.ObjectParts.Parts || []).map((p) => [p.PartNumber, p.Size]),
     [[4, big.length - 3 * mb5]]);
});

await check("CopyObject, DeleteObject, DeleteObjects (crc32, no MD5)", async () => {
  await s3.send(new CopyObjectCommand({ Bucket: B, Key: "copy/small.bin", CopySource: `${B}/buf/small.bin` }));
  const g = await s3.send(new GetObjectCommand({ Bucket: B, Key: "copy/small.bin" }));
  sameBytes("copied bytes", await bodyBuf(g.Body), small);
  await s3.send(new DeleteObjectCommand({ Bucket: B, Key: "copy/small.bin" }));
  if (fs.existsSync(path.join(store, B, "copy/small.bin"))) throw new Error("copy/small.bin still stored");
  const r = await s3.send(new DeleteObjectsCommand({ Bucket: B, Delete: { Objects: [
    { Key: "mp/one.bin" }, { Key: "buf/small.bin" }] } }));
  eq("Deleted", (r.Deleted || []).map((d) => d.Key).sort(), ["buf/small.bin", "mp/one.bin"]);
  eq("Errors", r.Errors || [], []);
  try {
    await s3.send(new HeadObjectCommand({ Bucket: B, Key: "mp/one.bin" }));
    throw new Error("HeadObject after DeleteObjects succeeded");
  } catch (e) {
    if (!e.$metadata) throw e;
    eq("HeadObject status after delete", e.$metadata.httpStatusCode, 404);
  }
});

await check("GetObject of a missing key: NoSuchKey", async () => {
  try {
    await s3.send(new GetObjectCommand({ Bucket: B, Key: "nope" }));
    throw new Error("GetObject of a missing key succeeded");
  } catch (e) {
    if (!e.$metadata) throw e;
    eq("error", [e.$metadata.httpStatusCode, e.name], [404, "NoSuchKey"]);
  }
});

await check("wrong secret: SignatureDoesNotMatch", async () => {
  const bad = new S3Client({ endpoint, region: "us-east-1", forcePathStyle: true, maxAttempts: 1,
    credentials: { accessKeyId: AK, secretAccessKey: "x" + SK } });
  try {
    await bad.send(new PutObjectCommand({ Bucket: B, Key: "bad/x", Body: "x" }));
    throw new Error("PutObject with a wrong secret succeeded");
  } catch (e) {
    if (!e.$metadata) throw e;
    eq("error", [e.$metadata.httpStatusCode, e.name], [403, "SignatureDoesNotMatch"]);
  }
  if (fs.existsSync(path.join(store, B, "bad/x"))) throw new Error("bad/x was written");
});

s3.destroy();
await cleanup();
finish();
