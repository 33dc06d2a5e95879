"""The cloud-provider interface the autoscaler talks to.

Implementations: a deterministic simulated provider (the default, for simulation and tests)
and AWS adapters (EC2 CreateFleet / TerminateInstances, SageMaker HyperPod
BatchAddClusterNodes / BatchDeleteClusterNodes). All speak in these plain types.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, Protocol

from fleetshare.model.catalog import ec2_name

if TYPE_CHECKING:
    from fleetshare.autoscaling.account_limits import AccountLimits

CapacityType = Literal["on-demand", "spot", "reserved"]
InstanceState = Literal["pending", "running", "terminating", "terminated"]


@dataclass(frozen=True, slots=True)
class Offering:
    """One way to buy an instance type: in a zone, as a capacity type, at a price."""

    instance_type: str
    zone: str
    capacity_type: CapacityType
    price_per_hour: float
    available: bool = True


@dataclass(frozen=True, slots=True)
class LaunchRequest:
    """Launch ``count`` instances of one offering for a node pool."""

    instance_type: str
    zone: str
    capacity_type: CapacityType
    count: int
    pool: str
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[tuple[str, str, str], ...] = ()
    """(key, value, effect) triples the new nodes carry."""


@dataclass(frozen=True, slots=True)
class Instance:
    """A cloud instance as the provider reports it."""

    id: str
    instance_type: str
    zone: str
    capacity_type: CapacityType
    price_per_hour: float
    pool: str
    state: InstanceState
    launched_at: float
    ready_at: float | None = None
    """When the instance joins the cluster as a Ready node (None while unknown)."""


class CloudError(RuntimeError):
    """A provider call failed for a reason other than capacity."""


class InsufficientCapacityError(CloudError):
    """The provider has no capacity for an offering right now (e.g. EC2's
    InsufficientInstanceCapacity); the caller marks it unavailable for a while."""

    def __init__(self, offering: Offering | LaunchRequest, message: str = "") -> None:
        self.instance_type = offering.instance_type
        self.zone = offering.zone
        self.capacity_type = offering.capacity_type
        super().__init__(
            message
            or f"insufficient capacity for {offering.instance_type} "
            f"({offering.capacity_type}) in {offering.zone}"
        )


class AccountLimitError(CloudError):
    """A launch would pass an account limit (EC2's ``VcpuLimitExceeded`` for a vCPU service
    quota, ``InstanceLimitExceeded`` for a per-type limit): no capacity shortage, so the
    offering is not marked unavailable; the plan must stay within the limit."""

    def __init__(self, code: str, message: str) -> None:
        self.code = code
        super().__init__(f"{code}: {message}")


@dataclass(frozen=True, slots=True)
class CloudTraits:
    """What the autoscaler may assume of a provider without asking it: static facts."""

    launch_latency_seconds: float = 90.0
    """The longest expected time from a launch call to a Ready node (latency + jitter)."""
    ice_cooldown_seconds: float = 180.0
    """How long an offering that ran out of capacity stays unavailable."""
    account: AccountLimits | None = None
    """vCPU service quotas, per-type instance limits and reservations of the account."""


class UnavailableOfferings:
    """Offerings that ran out of capacity, unavailable until a cooldown ends (Karpenter's
    unavailable-offerings cache): the one rule every provider follows."""

    def __init__(self, cooldown_seconds: float) -> None:
        self.cooldown_seconds = cooldown_seconds
        self._until: dict[tuple[str, str, str], float] = {}

    @staticmethod
    def _key(instance_type: str, zone: str, capacity_type: str) -> tuple[str, str, str]:
        return ec2_name(instance_type), zone, capacity_type

    def mark(self, instance_type: str, zone: str, capacity_type: str, now: float) -> None:
        """The offering just ran short: unavailable for the cooldown."""
        until = now + self.cooldown_seconds
        self._until[self._key(instance_type, zone, capacity_type)] = until

    def available(self, instance_type: str, zone: str, capacity_type: str, now: float) -> bool:
        """Not in a cooldown at ``now``."""
        until = self._until.get(self._key(instance_type, zone, capacity_type))
        return until is None or until <= now


class CloudProvider(Protocol):
    """What the control loop needs from a cloud: offerings with price and availability,
    launch, terminate, the live instances and interruption notices, plus static traits.

    Implemented by the simulated cloud and by the EC2 and HyperPod adapters; billing is not
    part of it (the simulator computes the bill from its own records)."""

    @property
    def traits(self) -> CloudTraits:
        """Launch latency, capacity cooldown and account limits."""
        ...

    def offerings(self, instance_types: Iterable[str], now: float) -> list[Offering]:
        """Offerings (zones x capacity types, with prices) for these instance types, with
        ``available`` False where capacity ran out recently."""
        ...

    def launch(self, request: LaunchRequest, now: float) -> list[Instance]:
        """Launch instances; may return fewer than asked (partial capacity) or raise
        :class:`InsufficientCapacityError` when none could be launched."""
        ...

    def terminate(self, instance_ids: Sequence[str], now: float) -> None:
        """Terminate instances (unknown ids raise :class:`CloudError`)."""
        ...

    def instances(self, now: float) -> list[Instance]:
        """Instances this provider launched that are not terminated."""
        ...

    def interruption_at(self, instance_id: str) -> float | None:
        """When the provider will reclaim the instance (a spot interruption notice), if it
        said so; None otherwise."""
        ...
