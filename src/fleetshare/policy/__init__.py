"""Governance policy: fleetshare's own schema and importers for Kueue and SageMaker HyperPod."""
