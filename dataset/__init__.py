"""alnair_dataset: the open workload dataset as code. `workloads` are the training programs the dataset is measured
on; the campaign profiles each with `alnair profile`'s functions (alnair.profiler)."""
