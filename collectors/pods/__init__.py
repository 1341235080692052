"""Pod identity of any pid: cgroup-derived pod UID and container id, names from a node-scoped pod watch."""
