#!/usr/bin/env bash
# One block of the dataset campaign on the GPU machine (the `run` tool, kind nvidia-h200), from the repository
# root, with Debian's prometheus binary carried as .device/prometheus.xz (carry: [".device/prometheus.xz"]):
#
#   ALNAIR_GIT_COMMIT=<sha of HEAD> BLOCK_SECONDS=470 bash tests/gpu/run_campaign.sh [campaign flags ...]   (timeout_s 500)
#   e.g. ... bash tests/gpu/run_campaign.sh --families classify dqn --repeats 3 --pairs auto:30
#
# The GPU sharing issue's share campaign is the preset `share` (further campaign flags may follow it):
#
#   ALNAIR_GIT_COMMIT=<sha of HEAD> BLOCK_SECONDS=552 bash tests/gpu/run_campaign.sh share   (timeout_s 600)
#
# = --pairs-only --pairs auto:30 --pair-modes timeslice,share-50-50,share-30-70 --other-modes-pairs 10: the 30 auto
# pairs at share-50-50 (time-sliced again in the same block where that ran on another GPU), the first
# 10 of them (the 4 measured at limit-30-70 among them) at share-30-70 in the same block as their 50/50 run, every
# pair against solo baselines on its own GPU. The same command every call: it resumes from the rows of the GPU's
# model, dataset/data/h200/ or dataset/data/h100/ (the run tool may lend either for kind nvidia-h200; a pair's modes
# are compared on one GPU: where its time-sliced row ran on another, it is time-sliced again in the same block; copy
# each call's rows there before the next). What fits, from the committed rows'
# wall times (`python -m alnair_dataset.campaign --plan --out dataset/data/h200 --pairs auto:30 --pairs-only
# --pair-modes timeslice,share-50-50,share-30-70 --other-modes-pairs 10 --block-seconds 520` prints it, each block
# as if on a new GPU): one call (some 520 s of campaign) on a GPU the rows have not seen runs 4 pairs at both shares
# with their 8 baselines (~440 s expected); later calls on the same warm machine reuse the baselines, so a session
# (30 min of device time: the machine's start and three calls) runs about 25 of the 40 pair runs (the 10 pairs at
# both shares, 5 more at 50/50). The other 15 need a second session of two or three calls, whose GPU measures its
# own baselines (~0.8 h in all if every call got another GPU). These counts predate the time-sliced runs again
# (some 30 s a pair more), which --plan now counts.
#
# Nothing is installed: the intercept is built with make and the package is a shim of symlinks to this checkout
# (tests/gpu/check_python_and_cuda_records.py's, plus alnair_dataset). The campaign resumes from the rows committed
# under the model's folder (copied into $OUT/campaign, which comes back to the calling machine: copy its runs.csv,
# pairs.csv, *.parquet, logs-*.tar.gz and prometheus-*.tar.xz, the block's Prometheus data (with earlier blocks' on a
# machine kept warm), into that folder and commit them). The segments stay in /tmp. The campaign gets what is
# left of BLOCK_SECONDS (the run's timeout_s, less a margin) after the set-up, so it stops before the block's end with
# every row finished or marked incomplete.
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ "${1:-}" = share ]; then  # the preset above
  shift
  set -- --pairs-only --pairs auto:30 --pair-modes timeslice,share-50-50,share-30-70 --other-modes-pairs 10 "$@"
fi
# The run tool sends the working tree with the .git of an earlier checkout: there `git rev-parse HEAD` names a commit
# the tree has moved past (block 3's rows say 778f379 for 6bfd23b's tree). Rows must name the tree that made them.
if head=$(git rev-parse HEAD 2>/dev/null) && [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ] \
    && { [ -z "${ALNAIR_GIT_COMMIT:-}" ] || [ "$ALNAIR_GIT_COMMIT" = "$head" ]; }; then
  echo "run_campaign: this tree differs from its HEAD ${head:0:7}: set ALNAIR_GIT_COMMIT to the sending checkout's commit" >&2
  exit 2
fi
BLOCK_SECONDS=${BLOCK_SECONDS:-470}
OUT=${OUT:-/tmp/alnair-campaign-out}
# One folder of rows per GPU model: a pair's modes compared on one model, its time-sliced run measured again there.
model=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | grep -oiE 'h100|h200' | tr A-Z a-z || true)
DATA=${CAMPAIGN_DATA:-dataset/data/${model:-h200}}
echo "run_campaign: rows from and for $DATA"
make -s -C intercept
xz -d -k -f .device/prometheus.xz   # Debian's prometheus 2.42, carried from the calling machine
chmod +x .device/prometheus
python3 - <<'EOF'
import sys
from pathlib import Path
sys.path.insert(0, "tests/gpu")
from check_python_and_cuda_records import REPO, shim
site = Path("/tmp/alnair-campaign/site")
if not site.exists():
    shim(site)
    (site / "alnair_dataset").symlink_to(REPO / "dataset")
EOF
mkdir -p "$OUT/campaign"
for file in runs.csv pairs.csv; do  # the rows so far: the campaign skips what they hold
  if [ -f "$DATA/$file" ] && [ ! -f "$OUT/campaign/$file" ]; then cp "$DATA/$file" "$OUT/campaign/$file"; fi
done
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
budget=$((BLOCK_SECONDS - SECONDS - 10))
echo "run_campaign: ${budget} s of campaign (set-up took ${SECONDS} s)"
export PYTHONPATH=/tmp/alnair-campaign/site PYTHONUNBUFFERED=1 ALNAIR_GIT_COMMIT=${ALNAIR_GIT_COMMIT:-}
python3 -m alnair_dataset.campaign --out "$OUT/campaign" --scratch /tmp/alnair-campaign/scratch --device cuda \
  --prometheus-binary "$PWD/.device/prometheus" --budget-seconds "$budget" "$@" || status=$?
# The run tool brings back a handful of files: the jobs' logs travel as one archive.
stamp=$(date -u +%Y%m%dT%H%M%SZ)
tar -czf "$OUT/campaign/logs-$stamp.tar.gz" -C "$OUT/campaign" logs && rm -rf "$OUT/campaign/logs" "$OUT/campaign/prometheus.yml"
# Prometheus's data (stopped with the campaign, its WAL complete) comes back too, so that the block's rows can be
# profiled again when the profiler changes: unpacked, `prometheus --config.file=/dev/null
# --storage.tsdb.path=prometheus-data --storage.tsdb.retention.time=100y` serves it.
if [ -d /tmp/alnair-campaign/scratch/prometheus-data ]; then
  tar -cJf "$OUT/campaign/prometheus-$stamp.tar.xz" -C /tmp/alnair-campaign/scratch prometheus-data
fi
exit "${status:-0}"
