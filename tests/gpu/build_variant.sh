#!/usr/bin/env bash
# The tree's intercept with tests/gpu/patches/NAME.patch applied, built under DIR/intercept (default
# /tmp/variant-NAME): the other side of an A/B on the GPU machine (run_pending.sh ab-NAME), and what
# tests/intercept/test_gpu_variants.py checks on every CI run. Prints the library's path.
#   bash tests/gpu/build_variant.sh NAME [DIR]
set -euo pipefail
cd "$(dirname "$0")/../.."
name=$1 dir=${2:-/tmp/variant-$1} diff=$PWD/tests/gpu/patches/$1.patch
rm -rf "$dir" && mkdir -p "$dir" && cp -r intercept "$dir/" && rm -rf "$dir/intercept/build"
if command -v patch >/dev/null; then patch -s -p1 -d "$dir" <"$diff"; else (cd "$dir" && git apply -p1 "$diff"); fi ||
    { echo "$name.patch does not apply to the tree" >&2; exit 1; }
LIBCC=${LIBCC:-gcc} make -s -C "$dir/intercept" ABI="$PWD/abi" build/libalnair.so >&2
echo "$dir/intercept/build/libalnair.so"
