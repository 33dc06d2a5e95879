"""A deterministic simulated cloud for simulation and tests.

Everything random is derived from ``SimulatedCloudConfig.seed`` through BLAKE2b hashes of the
seed and a purpose-specific key (never Python's per-process randomized ``hash()``), so a run is
reproducible across processes and machines, and independent draws do not shift each other.

Models:

- **On-demand price**: the catalog's on-demand USD/hour. Instance types without a catalog price
  have no on-demand or spot offering.
- **Spot price**: a stable per-(instance type, zone) discount off the on-demand price, drawn
  uniformly from ``[spot_discount_min, spot_discount_max]`` (default 55-75 % off) from
  ``hash(seed, type, zone)``. With ``spot_daily_drift = a > 0`` the price also drifts slowly:
  it is multiplied by ``1 + a * sin(2π (t / 86400 + φ))`` with a per-(type, zone) seeded
  phase ``φ``, and capped at the on-demand price. ``ml.`` names price like their EC2 name.
- **Reserved capacity**: ``reservations[(type, zone)] = Reservation(count, price)``; up to
  ``count`` instances at ``price`` (default 0, i.e. already paid for). Exhausted reservations
  are reported unavailable and launches beyond them are partial or raise ICE.
- **Insufficient capacity (ICE)**: ``capacity_limits[(type, zone, capacity_type)]`` caps the
  number of live instances of an offering (a launch beyond it is partial; none left raises
  :class:`InsufficientCapacityError`), and ``ice_probability`` makes the n-th on-demand/spot
  launch call fail with a seeded probability. An offering that hit ICE (fully or partially) is
  reported unavailable by :meth:`SimulatedCloud.offerings` for ``ice_cooldown_seconds``
  (180 s, like Karpenter's unavailable-offerings cache); launching on it is still attempted.
- **Launch latency**: ``ready_at = now + launch_latency_seconds`` (or the instance type's
  ``launch_latency_by_type``) (+ an optional seeded jitter);
  90 s is EC2-like, use 600 s for HyperPod-like node bring-up.
- **Spot interruptions**: each spot instance gets an exponential time to interruption with
  rate ``spot_interruption_rate_per_hour`` counted from launch, drawn from
  ``hash(seed, instance id)``. :meth:`SimulatedCloud.interruptions` lists them for replay; the
  caller terminates the instance at that time. Billing stops at the interruption regardless.
- **Cost**: per-second billing from launch to termination (or interruption, or ``until``),
  with a minimum of ``minimum_billed_seconds`` (60 s, as on EC2 Linux) for ended instances.

The cloud has no clock of its own: it remembers the latest ``now`` passed to
:meth:`~SimulatedCloud.launch` / :meth:`~SimulatedCloud.terminate`, and
:meth:`~SimulatedCloud.offerings` / :meth:`~SimulatedCloud.instances` take an optional ``now``.
"""

from __future__ import annotations

import hashlib
import math
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from fleetshare.autoscaling.account_limits import AccountLimits, account_usage
from fleetshare.autoscaling.cloud import (
    AccountLimitError,
    CapacityType,
    CloudError,
    CloudTraits,
    Instance,
    InsufficientCapacityError,
    LaunchRequest,
    Offering,
    UnavailableOfferings,
)
from fleetshare.model.catalog import Catalog, load_catalog

DEFAULT_ZONES = ("us-east-1a", "us-east-1b", "us-east-1c")
SECONDS_PER_HOUR = 3600.0
SECONDS_PER_DAY = 86400.0

OfferingKey = tuple[str, str, CapacityType]
"""(EC2 instance type, zone, capacity type)."""


@dataclass(frozen=True, slots=True)
class Reservation:
    """Reserved capacity (e.g. an ODCR or capacity block) for one type in one zone."""

    count: int
    price_per_hour: float = 0.0
    """Marginal USD/hour of a reserved instance; 0 when the reservation is already paid for."""


@dataclass(frozen=True, slots=True)
class SimulatedCloudConfig:
    """Knobs of :class:`SimulatedCloud` (see the module docstring for the models)."""

    seed: int = 0
    zones: tuple[str, ...] = DEFAULT_ZONES
    launch_latency_seconds: float = 90.0
    launch_latency_jitter_seconds: float = 0.0
    """Each launch call adds a seeded uniform ``[0, jitter)`` to the latency."""
    launch_latency_by_type: Mapping[str, float] = field(default_factory=dict, hash=False)
    """Instance type -> its launch latency, in place of ``launch_latency_seconds``."""
    spot_discount_min: float = 0.55
    spot_discount_max: float = 0.75
    spot_daily_drift: float = 0.0
    """Relative amplitude of the daily spot-price drift (0 = constant prices)."""
    spot_interruption_rate_per_hour: float = 0.0
    capacity_limits: Mapping[OfferingKey, int] = field(default_factory=dict, hash=False)
    """Max live instances per (type, zone, capacity type); absent = unlimited."""
    ice_probability: float = 0.0
    """Probability that an on-demand or spot launch call fails with ICE."""
    ice_cooldown_seconds: float = 180.0
    reservations: Mapping[tuple[str, str], Reservation] = field(default_factory=dict, hash=False)
    """Reserved capacity by (type, zone)."""
    minimum_billed_seconds: float = 60.0
    account: AccountLimits | None = field(default=None, compare=False, hash=False)
    """vCPU service quotas and per-type instance limits of the account (reservations are
    ``reservations`` above); a launch past one is cut short or raises
    :class:`~fleetshare.autoscaling.cloud.AccountLimitError`."""
    catalog: Catalog | None = field(default=None, compare=False, hash=False)
    """Instance catalog for on-demand prices; ``None`` = the packaged catalog."""

    def __post_init__(self) -> None:
        if not self.zones:
            raise ValueError("zones: at least one zone is needed")
        if not 0.0 <= self.spot_discount_min <= self.spot_discount_max < 1.0:
            raise ValueError(
                "spot discounts: need 0 <= spot_discount_min <= spot_discount_max < 1, got "
                f"{self.spot_discount_min} and {self.spot_discount_max}"
            )
        if not 0.0 <= self.ice_probability <= 1.0:
            raise ValueError(f"ice_probability must be in [0, 1], got {self.ice_probability}")
        for name in (
            "launch_latency_seconds",
            "launch_latency_jitter_seconds",
            "spot_daily_drift",
            "spot_interruption_rate_per_hour",
            "ice_cooldown_seconds",
            "minimum_billed_seconds",
        ):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative, got {getattr(self, name)}")


@dataclass(slots=True)
class _Record:
    """A launched instance plus what the simulation knows about it."""

    instance: Instance
    ec2_type: str
    interrupt_at: float | None
    terminated_at: float | None = None


def seeded_uniform(seed: int, *key: object) -> float:
    """A stable uniform number in ``[0, 1)`` from the seed and a key (BLAKE2b, not ``hash()``)."""
    text = "\x1f".join([str(seed), *(str(part) for part in key)])
    digest = hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest()
    (value,) = struct.unpack(">Q", digest)
    return float(value >> 11) / float(1 << 53)


class SimulatedCloud:
    """A :class:`~fleetshare.autoscaling.cloud.CloudProvider` with seeded prices, capacity
    shortages, launch latency and spot interruptions."""

    def __init__(self, config: SimulatedCloudConfig | None = None) -> None:
        self.config = config or SimulatedCloudConfig()
        self._catalog = self.config.catalog or load_catalog()
        self._records: dict[str, _Record] = {}
        self._next_id = 1
        self._launch_calls = 0
        self._unavailable = UnavailableOfferings(self.config.ice_cooldown_seconds)
        self._clock = 0.0
        self._limits = {
            (Catalog.ec2_name(t), z, c): n for (t, z, c), n in self.config.capacity_limits.items()
        }
        self._reservations = {
            (Catalog.ec2_name(t), z): r for (t, z), r in self.config.reservations.items()
        }

    @property
    def traits(self) -> CloudTraits:
        """The static facts the autoscaler plans with (latency includes the jitter)."""
        config = self.config
        return CloudTraits(
            launch_latency_seconds=config.launch_latency_seconds
            + config.launch_latency_jitter_seconds,
            ice_cooldown_seconds=config.ice_cooldown_seconds,
            account=config.account,
        )

    # -- prices -------------------------------------------------------------------------------

    def on_demand_price(self, instance_type: str) -> float | None:
        """The catalog's on-demand USD/hour (``None`` when unpriced; unknown types raise)."""
        return self._catalog.get(instance_type).price_per_hour

    def spot_price(self, instance_type: str, zone: str, at: float = 0.0) -> float | None:
        """Spot USD/hour of a type in a zone at time ``at`` (``None`` when unpriced)."""
        on_demand = self.on_demand_price(instance_type)
        if on_demand is None:
            return None
        cfg = self.config
        name = Catalog.ec2_name(instance_type)
        u = seeded_uniform(cfg.seed, "spot-discount", name, zone)
        discount = cfg.spot_discount_min + (cfg.spot_discount_max - cfg.spot_discount_min) * u
        price = on_demand * (1.0 - discount)
        if cfg.spot_daily_drift > 0:
            phase = seeded_uniform(cfg.seed, "spot-phase", name, zone)
            drift = math.sin(2.0 * math.pi * (at / SECONDS_PER_DAY + phase))
            price = min(on_demand, price * (1.0 + cfg.spot_daily_drift * drift))
        return price

    def _price(
        self, instance_type: str, zone: str, capacity_type: CapacityType, at: float
    ) -> float:
        if capacity_type == "reserved":
            reservation = self._reservations.get((Catalog.ec2_name(instance_type), zone))
            return reservation.price_per_hour if reservation else 0.0
        price = (
            self.spot_price(instance_type, zone, at)
            if capacity_type == "spot"
            else self.on_demand_price(instance_type)
        )
        if price is None:
            raise CloudError(f"no {capacity_type} price for {instance_type}: it is not offered")
        return price

    # -- offerings ----------------------------------------------------------------------------

    def offerings(self, instance_types: Iterable[str], now: float | None = None) -> list[Offering]:
        """On-demand and spot offerings per zone (and reserved where configured).

        An offering is unavailable while in its ICE cooldown; a reservation is unavailable
        while all its instances are in use.
        """
        at = self._clock if now is None else now
        result: list[Offering] = []
        for instance_type in instance_types:
            name = Catalog.ec2_name(instance_type)
            on_demand = self.on_demand_price(instance_type)
            for zone in self.config.zones:
                reservation = self._reservations.get((name, zone))
                if reservation is not None and reservation.count > 0:
                    free = reservation.count - self._live_count((name, zone, "reserved"))
                    result.append(
                        Offering(
                            instance_type,
                            zone,
                            "reserved",
                            reservation.price_per_hour,
                            available=free > 0 and self._available((name, zone, "reserved"), at),
                        )
                    )
                if on_demand is None:
                    continue
                spot = self.spot_price(instance_type, zone, at)
                assert spot is not None
                priced: tuple[tuple[CapacityType, float], ...] = (
                    ("spot", spot),
                    ("on-demand", on_demand),
                )
                for capacity_type, price in priced:
                    available = self._available((name, zone, capacity_type), at)
                    result.append(Offering(instance_type, zone, capacity_type, price, available))
        return result

    def _available(self, key: OfferingKey, at: float) -> bool:
        return self._unavailable.available(*key, at)

    def _live_count(self, key: OfferingKey) -> int:
        return sum(
            1
            for r in self._records.values()
            if r.terminated_at is None
            and (r.ec2_type, r.instance.zone, r.instance.capacity_type) == key
        )

    # -- launch / terminate -------------------------------------------------------------------

    def _capacity(self, key: OfferingKey) -> int | None:
        """How many more instances of an offering fit (``None`` = unlimited)."""
        limit = self._limits.get(key)
        if key[2] == "reserved":
            reservation = self._reservations.get((key[0], key[1]))
            count = reservation.count if reservation else 0
            limit = count if limit is None else min(limit, count)
        if limit is None:
            return None
        return max(0, limit - self._live_count(key))

    def launch(self, request: LaunchRequest, now: float) -> list[Instance]:
        """Launch up to ``request.count`` instances (fewer when capacity runs short).

        Raises :class:`InsufficientCapacityError` when none can be launched and
        :class:`CloudError` for an unknown zone or a non-positive count.
        """
        self._clock = max(self._clock, now)
        if request.zone not in self.config.zones:
            raise CloudError(
                f"unknown zone {request.zone!r}; zones: {', '.join(self.config.zones)}"
            )
        if request.count < 1:
            raise CloudError(f"launch count must be positive, got {request.count}")
        name = Catalog.ec2_name(request.instance_type)
        key: OfferingKey = (name, request.zone, request.capacity_type)
        price = self._price(request.instance_type, request.zone, request.capacity_type, now)
        call = self._launch_calls
        self._launch_calls += 1

        if (
            request.capacity_type != "reserved"
            and seeded_uniform(self.config.seed, "ice", call) < self.config.ice_probability
        ):
            self._mark_unavailable(key, now)
            raise InsufficientCapacityError(request)
        granted = min(request.count, self._account_room(request))
        if granted == 0:
            raise self._limit_error(request)
        capacity = self._capacity(key)
        if capacity is not None and capacity < granted:
            self._mark_unavailable(key, now)
            if capacity == 0:
                raise InsufficientCapacityError(request)
            granted = capacity

        latency = self.config.launch_latency_by_type.get(
            request.instance_type, self.config.launch_latency_seconds
        )
        if self.config.launch_latency_jitter_seconds > 0:
            jitter = seeded_uniform(self.config.seed, "latency", call)
            latency += self.config.launch_latency_jitter_seconds * jitter
        launched: list[Instance] = []
        for _ in range(granted):
            instance_id = f"i-sim-{self._next_id:06d}"
            self._next_id += 1
            instance = Instance(
                id=instance_id,
                instance_type=request.instance_type,
                zone=request.zone,
                capacity_type=request.capacity_type,
                price_per_hour=price,
                pool=request.pool,
                state="pending",
                launched_at=now,
                ready_at=now + latency,
            )
            interrupt_at = (
                self._interruption_time(instance_id, now)
                if request.capacity_type == "spot"
                else None
            )
            self._records[instance_id] = _Record(instance, name, interrupt_at)
            launched.append(instance)
        return launched

    def adopt(self, instance: Instance) -> None:
        """Take back an instance an earlier run of this cloud launched (a service restart):
        live again, with the spot interruption its id and launch time give (the same as
        before, from the seed); later launches get new ids."""
        if instance.id in self._records:
            raise CloudError(f"instance {instance.id} exists already")
        interrupt_at = (
            self._interruption_time(instance.id, instance.launched_at)
            if instance.capacity_type == "spot"
            else None
        )
        name = Catalog.ec2_name(instance.instance_type)
        self._records[instance.id] = _Record(instance, name, interrupt_at)
        number = instance.id.removeprefix("i-sim-")
        if number.isdigit():
            self._next_id = max(self._next_id, int(number) + 1)

    def _account_room(self, request: LaunchRequest) -> int:
        """How many instances of the request the account's limits still allow."""
        limits = self.config.account
        if limits is None:
            return request.count
        name = Catalog.ec2_name(request.instance_type)
        used = account_usage(limits, self.instances(), self._catalog)
        room = request.count
        if name in limits.instance_limits:
            room = min(room, limits.instance_limits[name] - used.get(f"type:{name}", 0))
        if request.capacity_type != "reserved" and name in self._catalog:
            spec = self._catalog.get(name)
            for quota in limits.quotas:
                if quota.covers(spec, request.capacity_type) and spec.vcpu > 0:
                    left = quota.max_vcpus - used.get(f"quota:{quota.name}", 0)
                    room = min(room, left // spec.vcpu)
        return max(0, room)

    def _limit_error(self, request: LaunchRequest) -> AccountLimitError:
        limits = self.config.account
        assert limits is not None
        name = Catalog.ec2_name(request.instance_type)
        if name in limits.instance_limits:
            used = account_usage(limits, self.instances(), self._catalog).get(f"type:{name}", 0)
            if used >= limits.instance_limits[name]:
                return AccountLimitError(
                    "InstanceLimitExceeded",
                    f"your quota allows for {limits.instance_limits[name]} more running "
                    f"instance(s) of {name}; you requested {request.count}",
                )
        spec = self._catalog.get(name)
        quota = next(q for q in limits.quotas if q.covers(spec, request.capacity_type))
        return AccountLimitError(
            "VcpuLimitExceeded",
            f"You have requested more vCPU capacity than your current vCPU limit of "
            f"{quota.max_vcpus} allows for the instance bucket that the specified instance "
            f"type belongs to ({quota.name}).",
        )

    def _mark_unavailable(self, key: OfferingKey, now: float) -> None:
        self._unavailable.mark(*key, now)

    def _interruption_time(self, instance_id: str, launched_at: float) -> float | None:
        rate = self.config.spot_interruption_rate_per_hour
        if rate <= 0:
            return None
        u = seeded_uniform(self.config.seed, "interrupt", instance_id)
        return launched_at - math.log1p(-u) / rate * SECONDS_PER_HOUR

    def terminate(self, instance_ids: Sequence[str], now: float) -> None:
        """Terminate instances; terminating a terminated instance is a no-op.

        Unknown ids raise :class:`CloudError` before anything is terminated.
        """
        self._clock = max(self._clock, now)
        unknown = [i for i in instance_ids if i not in self._records]
        if unknown:
            raise CloudError(f"unknown instance ids: {', '.join(unknown)}")
        for instance_id in instance_ids:
            record = self._records[instance_id]
            if record.terminated_at is None:
                record.terminated_at = now

    # -- queries ------------------------------------------------------------------------------

    def instances(self, now: float | None = None) -> list[Instance]:
        """Live instances, ``pending`` until their ``ready_at`` and ``running`` after."""
        at = self._clock if now is None else now
        result: list[Instance] = []
        for record in self._records.values():
            if record.terminated_at is not None:
                continue
            instance = record.instance
            ready = instance.ready_at is not None and instance.ready_at <= at
            result.append(replace(instance, state="running" if ready else "pending"))
        return result

    def interruption_at(self, instance_id: str) -> float | None:
        """When a spot instance will be interrupted (None: never, or not spot)."""
        record = self._records.get(instance_id)
        return None if record is None else record.interrupt_at

    def interruptions(self, until: float) -> list[tuple[float, str]]:
        """``(time, instance id)`` of spot interruptions of live instances up to ``until``,
        in time order."""
        found = [
            (r.interrupt_at, instance_id)
            for instance_id, r in self._records.items()
            if r.terminated_at is None and r.interrupt_at is not None and r.interrupt_at <= until
        ]
        return sorted(found)

    def cost(self, until: float) -> float:
        """Total USD billed for all instances up to ``until`` (per-second billing)."""
        total = 0.0
        for record in self._records.values():
            start = record.instance.launched_at
            if until <= start:
                continue
            ends = [t for t in (record.terminated_at, record.interrupt_at) if t is not None]
            end = min(ends) if ends else math.inf
            if end <= until:
                seconds = max(end - start, self.config.minimum_billed_seconds)
            else:
                seconds = until - start
            total += record.instance.price_per_hour * seconds / SECONDS_PER_HOUR
        return total
