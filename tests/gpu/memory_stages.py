"""Where a PyTorch process's device memory comes from, stage by stage: a child runs the
stages and pauses; the parent reads the intercept's bytes_in_use at each pause.

    python tests/gpu/memory_stages.py [NAME=VALUE ...]   (PYTHONPATH with alnair, LD_PRELOAD-able
                                                          library built; NAME=VALUE: extra environment)
"""

from __future__ import annotations

import sys

STAGES = """
import sys, torch
def mark(name):
    torch.cuda.synchronize()
    print("mark", name, torch.cuda.memory_reserved(), flush=True)
    sys.stdin.readline()
torch.zeros(1, device="cuda"); mark("context_and_first_tensor")
a = torch.randn(1024, 1024, device="cuda"); mark("4MiB_tensor")
a @ a; mark("first_fp32_matmul")
a.half() @ a.half(); mark("first_fp16_matmul")
m = torch.nn.Linear(1024, 1024).cuda(); m(a).sum().backward(); mark("linear_backward")
"""

if __name__ == "__main__":
    from check_intercept import env, settled, spawn

    extra = dict(arg.split("=", 1) for arg in sys.argv[1:])
    print("environment:", extra or "default")
    child = spawn([sys.executable, "-c", STAGES], env=env(**extra))
    for line in child.stdout:
        _, stage, reserved = line.split()
        in_use = settled(child.pid)[0].bytes_in_use
        print(
            f"{stage:28s} memory_reserved={int(reserved):>11d} intercept={in_use:>11d} "
            f"outside_pytorch={in_use - int(reserved)}"
        )
        child.stdin.write("go\n")
        child.stdin.flush()
    child.wait()
