"""alnair.dataset: the open workload dataset as code. `profile` turns a Prometheus's Alnair series into one row
per job (`alnair profile`); `workloads` are the training programs the dataset is measured on."""
