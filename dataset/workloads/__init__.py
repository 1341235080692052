"""The dataset's workloads: the original dataset's five families in PyTorch, on synthetic inputs shaped like the
originals' (no downloads), from random weights, each training a given number of steps with a fixed seed.

    python -m alnair_dataset.workloads classify --model resnet50 --batch-size 32 --steps 100 --device cuda --seed 1

`grid.configurations()` is the parameter grid the campaign runs."""
