#!/usr/bin/env bash
# Facts for GPU time per process (GPU sharing issue, item 1), on the GPU machine, from the repository root:
# the cost of an event record beside a launch, and what time-slicing does to two processes' kernels (from
# %globaltimer stamps inside the kernels, beside the events' elapsed time). JSON lines to
# $OUT/gpu_time_probe.jsonl (or /tmp); docs/intercept.md quotes them.
set -euo pipefail
out=${OUT:-/tmp}/gpu_time_probe.jsonl
probe=/tmp/probe_gpu_time
nvcc -O2 -arch=sm_90 -o "$probe" tests/gpu/probe_gpu_time.cu
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.sm --format=csv,noheader | sed 's/^/# /' | tee "$out"
"$probe" cost 200000 | tee -a "$out"
at() { echo $(( $(date +%s%N) + $1 )); }
for run in 1 2 3; do
    "$probe" spin 300 "$(at 1500000000)" | sed 's/^{/{"mode": "solo", /' | tee -a "$out"
done
for run in 1 2 3; do
    start=$(at 3000000000)
    "$probe" spin 300 "$start" | sed 's/^{/{"mode": "pair-a", /' > /tmp/pair-a.json &
    "$probe" spin 300 "$start" | sed 's/^{/{"mode": "pair-b", /' > /tmp/pair-b.json &
    wait
    cat /tmp/pair-a.json /tmp/pair-b.json | tee -a "$out"
done
