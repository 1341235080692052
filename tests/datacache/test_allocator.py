"""glibc's malloc keeps the memory of freed batches, so the next batch costs no page faults, unless the
program chose malloc options of its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from alnair.datacache import allocator

BATCHES = """
import json, resource
from concurrent.futures import ThreadPoolExecutor
from alnair.datacache import allocator

fetcher = ThreadPoolExecutor(1)  # as in the loader: a thread allocates a batch, the consumer frees it

def faults_per_batch():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(50):
        batch = fetcher.submit(lambda: [bytes(100 * 1024) for _ in range(32)]).result()  # 32 samples of 100 KB
        del batch
    return (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 50

faults_per_batch()
default = faults_per_batch()
tuned = allocator.keep_freed_memory()
faults_per_batch()  # the heap grows once to hold a batch
print(json.dumps([default, tuned, faults_per_batch()]))
"""


def run_batches(**environment: str) -> list:
    clean = {k: v for k, v in os.environ.items() if k not in allocator.MALLOC_ENVIRONMENT and k != "GLIBC_TUNABLES"}
    done = subprocess.run(
        [sys.executable, "-c", BATCHES], env=clean | environment, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_freed_batches_are_kept_and_reused_without_page_faults():
    before, tuned, after = run_batches()
    assert tuned is True
    assert before > 32 * 10  # glibc's default: every freed batch went back to the kernel
    assert after < 1


def test_malloc_options_of_the_program_are_left_alone():
    before, tuned, after = run_batches(MALLOC_TOP_PAD_="0")
    assert tuned is False
    assert after > 32 * 10
