#!/usr/bin/env bash
# On the GPU machine (the `device` tool): build the intercept and the CUDA test
# program, then run the named parts of check_intercept.py (default: all).
#   bash tests/gpu/run_intercept.sh [counts torch oom share bench]
set -euo pipefail
cd "$(dirname "$0")/../.."
make -s -C intercept
mkdir -p /tmp/alnair-gpu/shim/alnair
nvcc -O2 -arch=sm_90 -o /tmp/alnair-gpu/kernels tests/gpu/kernels.cu
for part in abi exporter collectors intercept; do ln -sfn "$PWD/$part" "/tmp/alnair-gpu/shim/alnair/$part"; done
for module in sdk/*.py; do ln -sfn "$PWD/$module" "/tmp/alnair-gpu/shim/alnair/${module#sdk/}"; done
export PYTHONPATH=/tmp/alnair-gpu/shim PYTHONUNBUFFERED=1 KERNELS_BINARY=/tmp/alnair-gpu/kernels
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
[ $# -gt 0 ] || set -- counts torch oom share bench
python3 tests/gpu/check_intercept.py "$@"
