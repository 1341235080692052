#!/usr/bin/env bash
# The dataset cache against a Redis Cluster of 1, 3 and 6 shards on the GPU machine's host (bench/cache_loader.py
# --shards N: the loader in N processes beside redis-benchmark --cluster on N threads), from the repository root.
# That host has no Redis and no redis/hiredis/xxhash for Python, and no internet: they travel in
# .device/redis-bundle.tar.xz, made on the calling machine from its own Redis and pip:
#
#   bash tests/gpu/run_cache_cluster.sh --bundle     # here: .device/redis-bundle.tar.xz (redis-server, -cli,
#                                                    # -benchmark, their non-glibc libraries, the wheels)
#   OUT=... bash tests/gpu/run_cache_cluster.sh      # there (the run tool: carry [".device"]): $OUT gets
#                                                    # cache-cluster-N.json per shard count, cache-single.json (one
#                                                    # server, every row, SAMPLES/2), summary.txt and logs.tar.gz
#                                                    # (setup.log, each run's log): the device tool brings back at most 8 files
#
# Settings (environment): SHARDS ("1 3 6"), SAMPLES (8000), ROUNDS (5), RUN_SECONDS (1: each cluster run of a method
# lasts at least this long, redis-benchmark's twice that: bench/cache_loader.py --seconds), DEPTH (2: batches in
# flight per node in the N-process row, --depth), SIZE (102400),
# BUDGET_SECONDS (280, the whole script's: the bench runs share what the set-up leaves, each cut off at its share),
# SINGLE (1: the one-server run too).
# The Redis binaries run through wrappers that set LD_LIBRARY_PATH for them alone, so Python and torch keep the host's
# libraries. The host's own python3 runs the bench, as tests/gpu/run_campaign.sh runs the campaign there: the wheels
# (redis, hiredis, xxhash) unpacked into a directory put first on PYTHONPATH (before any PYTHONPATH the host sets),
# beside a symlink shim of the package; no venv, no setuptools. The first run's set-up (a venv, or else a PYTHONPATH
# that replaced the host's and put the bundle's setuptools first) hid the host's torch: its DataLoader rows said
# "torch not installed". setup.log says where python3 finds torch alone and where the bench's set-up does; if only
# the former does, the cluster rows still run, summary.txt says so and the script exits 1.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUNDLE=.device/redis-bundle.tar.xz

make_bundle() {
  local stage
  stage=$(mktemp -d)
  mkdir -p "$stage/redis/bin" "$stage/redis/libexec" "$stage/redis/lib" "$stage/redis/wheels"
  for binary in redis-server redis-cli redis-benchmark; do
    cp -L "$(command -v "$binary")" "$stage/redis/libexec/$binary"  # redis-server is a link to redis-check-rdb: argv[0] picks the mode
    cat > "$stage/redis/bin/$binary" <<EOF
#!/bin/sh
here=\$(dirname "\$(readlink -f "\$0")")
LD_LIBRARY_PATH="\$here/../lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}" exec "\$here/../libexec/$binary" "\$@"
EOF
    chmod +x "$stage/redis/bin/$binary"
    # every library it loads but glibc's own (libc, libm, the loader, ...), which the host has in a newer version
    ldd "$(command -v "$binary")" | awk '$3 ~ /^\// {print $3}' \
      | grep -Ev '/(libc|libm|libpthread|libdl|librt|ld-linux-x86-64)\.so' | xargs -r -I{} cp -L -n {} "$stage/redis/lib/"
  done
  for version in 3.12 3.11; do  # 3.12: the GPU host's python3; 3.11: this machine's, for trying the script here
    pip download -q --only-binary=:all: --python-version "$version" --implementation cp \
      --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
      -d "$stage/redis/wheels" "redis[hiredis]==8.1.0" "xxhash==4.1.0"
  done
  { "$stage/redis/bin/redis-server" --version; ls "$stage/redis/lib" "$stage/redis/wheels"; } > "$stage/redis/CONTENTS"
  mkdir -p .device
  tar -cJf "$BUNDLE" -C "$stage" redis
  rm -rf "$stage"
  ls -l "$BUNDLE"
}

if [ "${1:-}" = "--bundle" ]; then
  make_bundle
  exit 0
fi

OUT=${OUT:?set OUT to the directory for the results}
SHARDS=${SHARDS:-"1 3 6"}
SAMPLES=${SAMPLES:-8000}
ROUNDS=${ROUNDS:-5}
RUN_SECONDS=${RUN_SECONDS:-1}
DEPTH=${DEPTH:-2}
SIZE=${SIZE:-102400}
BUDGET_SECONDS=${BUDGET_SECONDS:-280}
SINGLE=${SINGLE:-1}
mkdir -p "$OUT"
WORK=$(mktemp -d /tmp/alnair-cache-cluster.XXXXXX)
LOGS=$WORK/logs
mkdir "$LOGS"
SET_UP=
trap 'status=$?; [ -n "$SET_UP" ] || tail -n 40 "$LOGS/setup.log"; tar -czf "$OUT/logs.tar.gz" -C "$WORK" logs || true
      rm -rf "$WORK"; exit "$status"' EXIT

{
  tar -xJf "$BUNDLE" -C "$WORK"
  export PATH="$WORK/redis/bin:$PATH"
  redis-server --version
  redis-cli --version
  PY=python3
  host_torch=$("$PY" -c 'import torch; print(torch.__file__)' 2>&1 | tail -n 1) || host_torch=
  echo "host $(command -v "$PY") ($("$PY" -V 2>&1)), PYTHONPATH=${PYTHONPATH:-unset}: torch ${host_torch:-absent}"
  "$PY" - "$WORK/redis/wheels" "$WORK/site" <<'EOF'
import sys, zipfile
from pathlib import Path
sys.path.insert(0, "tests/gpu")
from check_python_and_cuda_records import shim
wheels, site = Path(sys.argv[1]), Path(sys.argv[2])
this = f"cp{sys.version_info.major}{sys.version_info.minor}"
for wheel in sorted(wheels.glob("*.whl")):
    name, _, python = wheel.name.split("-")[:3]  # name-version-python-abi-platform.whl
    if python in ("py3", this) and name != "setuptools":  # setuptools builds wheels; unpacked, it would shadow the host's
        zipfile.ZipFile(wheel).extractall(site)
(shim(site) / "alnair" / "datacache").symlink_to(Path("datacache").resolve())  # the shim leaves the cache out
EOF
  export PYTHONPATH="$WORK/site${PYTHONPATH:+:$PYTHONPATH}"
  torch_hidden=
  HOST_TORCH=$host_torch "$PY" - <<'EOF' || { status=$?; [ "$status" = 3 ] || exit "$status"; torch_hidden=1; }
import os, platform, shutil, sys
import redis, hiredis, xxhash
import alnair.datacache
hidden = False  # python3 alone imports torch, the bench's set-up does not
try:
    import torch
    torch_version = f"{torch.__version__} ({torch.__file__})"
except ImportError as e:
    torch_version = f"absent, the DataLoader rows skipped: {e}"
    if os.environ["HOST_TORCH"].endswith(".py"):
        print(f"python3 alone imports torch from {os.environ['HOST_TORCH']}, the bench's set-up does not: {e}")
        hidden = True
print(f"python {platform.python_version()} ({sys.executable}), torch {torch_version}, redis-py {redis.__version__} ({redis.__file__}), "
      f"hiredis {hiredis.__version__}, xxhash {xxhash.VERSION}, alnair.datacache from {alnair.datacache.__file__}")
print(f"{os.cpu_count()} CPUs, load {os.getloadavg()}, /dev/shm free {shutil.disk_usage('/dev/shm').free >> 20} MiB")
sys.exit(3 if hidden else 0)
EOF
} > "$LOGS/setup.log" 2>&1
SET_UP=1
cat "$LOGS/setup.log"
status=0
if [ -n "$torch_hidden" ]; then  # the cluster rows still run; the script fails at the end
  echo "run_cache_cluster: the set-up hid the host's torch (setup.log): the DataLoader rows do not run" | tee -a "$OUT/summary.txt"
  status=1
fi
echo "run_cache_cluster: set up in ${SECONDS} s"
# The origin's files are written to /dev/shm (and the workers' batch slots live there): fewer samples if it is small.
fits=$("$PY" -c "import shutil; print(max(500, (shutil.disk_usage('/dev/shm').free - (512 << 20)) * 2 // 3 // $SIZE))")
if [ "$fits" -lt "$SAMPLES" ]; then
  echo "run_cache_cluster: /dev/shm holds $fits samples, not $SAMPLES"
  SAMPLES=$fits
fi

runs=$(( $(echo $SHARDS | wc -w) + SINGLE ))
bench() {  # name, then bench/cache_loader.py's arguments: one run, cut off at its share of what is left
  local name=$1 share=$(( (BUDGET_SECONDS - SECONDS) / runs ))
  shift
  runs=$((runs - 1))
  if [ "$share" -lt 20 ]; then
    echo "run_cache_cluster: no time left for $name" | tee -a "$OUT/summary.txt"
    status=1
    return
  fi
  echo "== $name: bench/cache_loader.py $*, at most $share s"
  timeout "$share" "$PY" -W ignore bench/cache_loader.py "$@" --json "$OUT/cache-$name.json" > "$LOGS/cache-$name.log" 2>&1 \
    || { echo "bench/cache_loader.py $* failed (exit $?)"; status=1; }
  cat "$LOGS/cache-$name.log"
}
for shards in $SHARDS; do
  bench "cluster-$shards" --shards "$shards" --clients $((4 * shards)) --samples "$SAMPLES" --size "$SIZE" --rounds "$ROUNDS" \
    --seconds "$RUN_SECONDS" --depth "$DEPTH"
done
if [ "$SINGLE" = 1 ]; then  # one server, every row: the DataLoader with 4 workers on an idle host among them
  bench single --samples $((SAMPLES / 2)) --size "$SIZE" --rounds "$ROUNDS"
fi

"$PY" - "$OUT" $SHARDS <<'EOF' | tee -a "$OUT/summary.txt"
import json, sys
from pathlib import Path
out, shards = Path(sys.argv[1]), [int(n) for n in sys.argv[2:]]
first = None  # (shards, loader's rate) of the first shard count with a result
for n in shards:
    path = out / f"cache-cluster-{n}.json"
    if not path.exists():
        print(f"{n} shards: no result")
        continue
    summary = json.loads(path.read_text())["summary"]
    benchmark = next(v for k, v in summary.items() if k.startswith("redis-benchmark"))["median"]
    loader = next(v for k, v in summary.items() if k.startswith("CachedDataset.batches"))["median"]
    first = first or (n, loader)
    torch_rows = " ".join(f"{k}: {v['median']:.0f}/s ({v['ratio']:.2f})" for k, v in summary.items() if k.startswith("torch"))
    print(f"{n} shards: loader in {n} processes {loader:.0f}/s, {loader / benchmark:.2f} of redis-benchmark's "
          f"{benchmark:.0f}/s, {loader / first[1]:.2f}x the {first[0]}-shard loader; {torch_rows}")
single = out / "cache-single.json"
if single.exists():
    summary = json.loads(single.read_text())["summary"]
    print("one server: " + "; ".join(f"{k}: {v['median']:.0f}/s ({v['ratio']:.2f})" for k, v in summary.items()
                                     if k.startswith(("redis-benchmark", "CacheLoader", "torch"))))
EOF
exit "$status"
