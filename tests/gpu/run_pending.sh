#!/usr/bin/env bash
# On the GPU machine (the `device` tool): the GPU sharing issue's checks (and issue 37's, resolved), each bounded by
# its own timeout so one slow part cannot use up the call; logs and JSON under $OUT.
#   bash tests/gpu/run_pending.sh [caps] [caps-mixed] [lending] [gputime] [stack] [gpm] [kernels] [profile]
# Default: caps (issue 34 (a): 30/70 five times per loop, the solo rate measured beside every set; about 8 minutes,
# a call of its own); then `caps-mixed lending` (30 beside an unlimited process, 20/30/50, and (b)) and
# `gputime stack` ((c), and (d) the whole stack's ABBA cost with the limits and the share) take a call each.
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
        caps) run caps 570 python3 tests/gpu/check_limits_training.py --loops resnet18:128,transformer:32 \
            --sets c30/c70 --runs 5 --seconds 5 ;;
        caps-mixed) run caps-mixed 300 python3 tests/gpu/check_limits_training.py --loops resnet18:128,transformer:32 \
            --sets c30/-,c20/c30/c50 --seconds 5 ;;
        lending) run lending 200 python3 tests/gpu/check_share_lending.py --loops resnet18:128,transformer:32 --seconds 8 ;;
        gputime) run gputime 200 python3 tests/gpu/check_gpu_time.py --loops resnet18:128,transformer:32,resnet18:32 \
            --seconds 6 ;;
        gpm) run gpm 90 python3 tests/gpu/check_gpm.py ;;
        kernels) run kernels 150 python3 tests/gpu/check_kernel_names.py ;;
        profile) run profile 300 python3 tests/gpu/check_profile.py ;;
        stack) run stack 570 python3 bench/stack_overhead.py --pairs 20 --limits --budget-seconds 540 --json "$OUT/stack.json" ;;
        *) echo "unknown part $part" >&2; exit 2 ;;
    esac
done
