"""Autoscaling: node pools, cloud providers, provisioning, consolidation and repair."""
