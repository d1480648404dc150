#!/usr/bin/env bash
# bench/tar.sh: lib/tar's costs on a WebDataset-like shard of SHARD_MIB MiB (default 1024) of
# SAMPLE_KIB KiB samples (default 112), made with Python's tarfile in a temp dir (removed after):
# header walk with pread, warm and cold, the index blob's size per member, lookups.
# Usage: make build/tar-bench && bench/tar.sh   (TAR_BENCH_BIN overrides the tool's path)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${TAR_BENCH_BIN:-$PWD/build/tar-bench}
SHARD_MIB=${SHARD_MIB:-1024}
SAMPLE_KIB=${SAMPLE_KIB:-112}
[ -x "$BIN" ] || { echo "tar.sh: $BIN missing (make build/tar-bench)"; exit 1; }
dir=$(mktemp -d /tmp/tar-bench.XXXXXX)
trap 'rm -rf "$dir"' EXIT
timeout 600 /usr/bin/python3 - "$dir/shard.tar" "$SHARD_MIB" "$SAMPLE_KIB" <<'PY'
import io, os, sys, tarfile
path, mib, kib = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
n = (mib << 20) // ((kib << 10) + 512)
with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tf:
    for i in range(n):
        d = os.urandom(kib << 10)
        t = tarfile.TarInfo(f"sample-{i:06d}.jpg")
        t.size = len(d)
        t.mtime = 1700000000
        tf.addfile(t, io.BytesIO(d))
with open(path, "rb+") as f:
    os.fsync(f.fileno())  # clean pages: the tool's fadvise(DONTNEED) can drop them
print(f"made {path}: {n} samples of {kib} KiB")
PY
timeout 600 "$BIN" "$dir/shard.tar" 5
