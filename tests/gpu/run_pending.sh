#!/usr/bin/env bash
# On the GPU machine (the `device` tool): the checks issues 34 and 37 still owe a real GPU, each bounded by its own
# timeout so one slow part cannot use up the call; logs and JSON under $OUT.
#   bash tests/gpu/run_pending.sh [gpm] [kernels] [profile] [stack]
# Default: gpm kernels profile (about 8 minutes); `stack`, the whole stack's ABBA cost with the limits and the share
# (issue 34 (d)), takes a call of its own.
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

[ $# -gt 0 ] || set -- gpm kernels profile
for part; do
    case $part in
        gpm) run gpm 90 python3 tests/gpu/check_gpm.py ;;
        kernels) run kernels 150 python3 tests/gpu/check_kernel_names.py ;;
        profile) run profile 300 python3 tests/gpu/check_profile.py ;;
        stack) run stack 570 python3 bench/stack_overhead.py --pairs 20 --limits --budget-seconds 540 --json "$OUT/stack.json" ;;
        *) echo "unknown part $part" >&2; exit 2 ;;
    esac
done
