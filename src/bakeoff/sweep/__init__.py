"""Coverage sweeps: a population of workloads on the same targets, one stored cell per workload."""
