"""Instance types made up for tests: CPU only, with the allocatable and the price given."""

from __future__ import annotations

from fleetshare.model.catalog import InstanceType


def cpu_type(
    name: str,
    *,
    vcpu: int,
    memory_mib: int,
    allocatable: dict[str, int],
    price: float | None,
    family: str | None = None,
) -> InstanceType:
    """A CPU-only instance type (``family`` defaults to the name)."""
    return InstanceType(
        name=name,
        family=family or name,
        arch="amd64",
        vcpu=vcpu,
        memory_mib=memory_mib,
        gpu_count=0,
        gpu_name=None,
        gpu_manufacturer=None,
        gpu_memory_mib=0,
        accelerator_count=0,
        accelerator_name=None,
        efa=0,
        allocatable=allocatable,
        price_per_hour=price,
    )
