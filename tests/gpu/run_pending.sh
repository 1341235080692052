#!/usr/bin/env bash
# On the GPU machine (the `device` tool): the GPU sharing issue's checks (and issue 37's, resolved), each bounded by
# its own timeout so one slow part cannot use up the call; logs and JSON under $OUT.
#   bash tests/gpu/run_pending.sh [caps] [caps-mixed] [lending] [steps] [trace] [trace3] [gputime] [kernel-time] [nvml-stamps]
#                                 [stack] [gpm] [kernels] [profile] [ab] [ab-no-turns] [ab-cap-bank] [gputime-ab]
# Default: caps (issue 34 (a): 30/70 five times per loop, the solo rate measured beside every set; about 8 minutes,
# a call of its own); then `caps-mixed lending` (30 beside an unlimited process, 20/30/50, and (b)) and
# `gputime stack` ((c), and (d) the whole stack's ABBA cost with the limits and the share) take a call each;
# `steps trace` (caps and shares at steps near 5 and 50 ms; the capped side's published figures traced) one more.
# `ab`: every caps set under this tree's library and right after under another build, carried as
# .device/libalnair-baseline.so (or $ALNAIR_BASELINE_LIBRARY), beside the same solo rate. Built here from a commit:
#   git worktree add /tmp/base <commit> && make -C /tmp/base/intercept && cp /tmp/base/intercept/build/libalnair.so \
#       .device/libalnair-baseline.so
# `gputime-ab`: (c) under this tree's library and right after under that other build, loop by loop: where the GPU
# time read under NVML's busy time on 2026-12-07 (ResNet-18) and where it did not (the transformer). With the tree
# rebuilt reading NVML every 500 ms (ROUND_NS 500000000ull and IDLE_ROUNDS 2 in nvml_reader.c) as the other build:
# whether 500 ms reads come as close to NVML as 100 ms ones (2026-12-08, with the check reading after the warm-up's
# samples: as close; the caps held less well on them, so reads stay every 100 ms).
set -uo pipefail
cd "$(dirname "$0")/../.."
export LIBCC=gcc PYTHONUNBUFFERED=1 OUT=${OUT:-/tmp/alnair-out}  # LIBCC: the device has no ziglang
mkdir -p "$OUT"
make -s -C intercept || exit 1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"

run() {
    local name=$1 budget=$2
    shift 2
    echo "== $name (at most $budget s)"
    timeout "$budget" "$@" 2>&1 | tee "$OUT/$name.log"
    echo "== $name: exit ${PIPESTATUS[0]}"
}

[ $# -gt 0 ] || set -- caps
for part; do
    case $part in
        caps) run caps 570 python3 tests/gpu/check_limits_training.py --name caps_limits_training \
            --loops resnet18:128,transformer:32 --sets c30/c70 --runs 5 --seconds 5 ;;
        caps-mixed) run caps-mixed 300 python3 tests/gpu/check_limits_training.py --name caps-mixed_limits_training \
            --loops resnet18:128,transformer:32 --sets c30/-,c20/c30/c50 --seconds 5 ;;
        lending) run lending 200 python3 tests/gpu/check_share_lending.py --loops resnet18:128,transformer:32 --seconds 8 ;;
        gputime) run gputime 200 python3 tests/gpu/check_gpu_time.py --loops resnet18:128,transformer:32,resnet18:32 \
            --seconds 6 ;;
        # steps near 5 and 50 ms (ResNet-18 b128: 12, transformer b32: 25). Below ~9 ms ResNet-18 is launch-bound
        # (b32: 9.5 ms, the GPU 47% busy), and so is the transformer at b6 (17 ms): the 2-layer transformer at
        # b32 is the guess for a GPU-bound ~6 ms step
        steps) run steps 570 python3 tests/gpu/check_limits_training.py --name steps_limits_training \
            --loops transformer2:32,transformer:64 --sets c30/c70,s30/s70 --seconds 6 ;;
        # a capped pair's published figures every 20 ms and the turn words every ms: how long turns, holds and handovers last
        trace) run trace 300 python3 tests/gpu/check_limits_training.py --name trace_limits_training \
            --loops resnet18:128 --sets c30/c70 --runs 2 --seconds 5 --trace ;;
        # the 20/30/50 caps traced, whose 50% side fell 4-6 points short on an H100: whether the GPU idled in the
        # others' turns while it held (the simulation's loss) or ran busy and switched
        trace3) run trace3 300 python3 tests/gpu/check_limits_training.py --name trace3_limits_training \
            --loops resnet18:128,transformer:32 --sets c20/c30/c50 --seconds 5 --trace ;;
        # whether CUPTI's kernel records divide a time-sliced GPU (error 3: on an H100 they did not)
        kernel-time) run kernel-time 300 python3 tests/gpu/probe_kernel_time_shared.py ;;
        # NVML's samples against torch.profiler, how far their stamps are from the time they measured (error 7), and
        # whether samples read every 500 ms differ from those read every 100 ms, and whether check_gpu_time's own polling
        # of the utilization rates changes them (error 9)
        nvml-stamps) run nvml-stamps 180 python3 tests/gpu/probe_nvml_samples.py resnet18:128 ;;
        gpm) run gpm 90 python3 tests/gpu/check_gpm.py ;;
        kernels) run kernels 150 python3 tests/gpu/check_kernel_names.py ;;
        profile) run profile 300 python3 tests/gpu/check_profile.py ;;
        stack) run stack 570 python3 bench/stack_overhead.py --pairs 20 --limits --budget-seconds 540 --json "$OUT/stack.json" ;;
        ab) run ab 570 python3 tests/gpu/check_limits_training.py --name ab_limits_training \
            --loops resnet18:128,transformer:32 --sets c30/c70,c30/-,c20/c30/c50 --seconds 5 \
            --baseline-library "${ALNAIR_BASELINE_LIBRARY:-$PWD/.device/libalnair-baseline.so}" ;;
        # every caps set under the tree and right after under the tree with tests/gpu/patches/NAME.patch (build_variant.sh):
        # no-turns (decide_turns given 0; the traces of 2026-12-07 and -08 saw the GPU run 9-17 points less of the time
        # while a turn was due or taken), cap-bank (a cap's wait, turns on, pays back its cap's part of 50 ms more, so
        # a turn runs that long rather than until the accounting catches up: the H100's turns were 7-9 ms, shorter
        # than a step; the simulator's last a step)
        ab-no-turns | ab-cap-bank) variant=$(bash tests/gpu/build_variant.sh "${part#ab-}") || exit 1
            run "$part" 570 python3 tests/gpu/check_limits_training.py --name "${part}_limits_training" \
            --loops resnet18:128,transformer:32 --sets c30/c70,c20/c30/c50 --seconds 5 --baseline-library "$variant" ;;
        gputime-ab) run gputime-ab 400 python3 tests/gpu/check_gpu_time.py --loops resnet18:128,resnet18:32,transformer:32 \
            --seconds 6 --baseline-library "${ALNAIR_BASELINE_LIBRARY:-$PWD/.device/libalnair-baseline.so}" ;;
        *) echo "unknown part $part" >&2; exit 2 ;;
    esac
done
