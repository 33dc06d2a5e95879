"""Scenarios: a cluster, a policy and workloads replayed on a virtual clock."""
