"""Core data model: quantities, resource vectors, nodes, workloads, instance catalog."""
