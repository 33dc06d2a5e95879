"""Resource vectors: named amounts in milli-units, with exact integer arithmetic."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from fleetshare.model.quantity import format_quantity, parse_quantity

CPU = "cpu"
MEMORY = "memory"
GPU = "nvidia.com/gpu"
NEURON = "aws.amazon.com/neuron"
MIG_PREFIX = "nvidia.com/mig-"
PODS = "pods"
"""Counted by the kubelet, not by quotas."""

Resources = dict[str, int]
"""A resource vector: resource name -> amount in milli-units. Absent means zero."""

QuantityLike = str | int | float


def parse_resources(spec: Mapping[str, QuantityLike] | None) -> Resources:
    """Parse ``{"cpu": "500m", "memory": "1Gi"}`` into milli-units, dropping zeros."""
    out: Resources = {}
    for name, value in (spec or {}).items():
        amount = parse_quantity(value)
        if amount:
            out[str(name)] = amount
    return out


def add(a: Mapping[str, int], b: Mapping[str, int]) -> Resources:
    """Component-wise sum."""
    out = dict(a)
    for name, amount in b.items():
        out[name] = out.get(name, 0) + amount
    return out


def sub(a: Mapping[str, int], b: Mapping[str, int]) -> Resources:
    """Component-wise difference (may go negative)."""
    out = dict(a)
    for name, amount in b.items():
        out[name] = out.get(name, 0) - amount
    return out


def scale(a: Mapping[str, int], factor: int) -> Resources:
    """Multiply every amount by an integer."""
    return {name: amount * factor for name, amount in a.items()}


def total(vectors: Iterable[Mapping[str, int]]) -> Resources:
    """Sum of many vectors."""
    out: Resources = {}
    for vector in vectors:
        for name, amount in vector.items():
            out[name] = out.get(name, 0) + amount
    return out


def fits(request: Mapping[str, int], free: Mapping[str, int]) -> bool:
    """True when every requested amount is available in ``free``."""
    return all(amount <= free.get(name, 0) for name, amount in request.items() if amount > 0)


def render(vector: Mapping[str, int]) -> str:
    """``cpu=2, memory=8Gi, nvidia.com/gpu=1`` for messages."""
    parts = [f"{name}={format_quantity(amount, name)}" for name, amount in sorted(vector.items())]
    return ", ".join(parts) if parts else "nothing"


def is_accelerator(resource: str) -> bool:
    """GPUs, MIG partitions and Neuron devices: the resources that decide job placement."""
    return resource in (GPU, NEURON, "aws.amazon.com/neuroncore") or resource.startswith(MIG_PREFIX)
