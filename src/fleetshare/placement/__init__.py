"""Placement: pods onto nodes (shared by governance, autoscaling and the simulator)."""
