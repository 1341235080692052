#!/usr/bin/env bash
# On the GPU machine (the `device` tool): check_intercept.py's launchbound part with this tree's compute limit,
# then with the compute_limit.c from before the launch-cost fix, carried as .device/compute_limit-before.c:
#
#   git show 781c624^:intercept/compute_limit.c > .device/compute_limit-before.c   (here; carry that path)
#   LAUNCHBOUND_RUNS=3 bash tests/gpu/run_launchbound_before_after.sh
#
# The fix changed compute_limit.c alone, so the rest of the tree builds with either. Results: $OUT/intercept.json
# (this tree) and $OUT/before/intercept.json.
set -euo pipefail
cd "$(dirname "$0")/../.."
[ -f .device/compute_limit-before.c ] || { echo "no .device/compute_limit-before.c: carry it" >&2; exit 2; }
bash tests/gpu/run_intercept.sh launchbound || echo "launchbound (this tree): rc $?"  # a failed check still runs the other
before=/tmp/alnair-before
rm -rf "$before" && mkdir -p "$before" "$OUT/before"
tar --exclude=./.git -cf - . | tar -xf - -C "$before"
cp .device/compute_limit-before.c "$before/intercept/compute_limit.c"
echo "--- before the launch-cost fix"
OUT="$OUT/before" bash "$before/tests/gpu/run_intercept.sh" launchbound
