"""The ``cloud`` and ``autoscaler`` sections of scenario files (pydantic)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from fleetshare.autoscaling.account_limits import (
    AWS_QUOTA_GROUPS,
    AccountLimits,
    ServiceQuota,
    aws_quota,
)
from fleetshare.autoscaling.disruption.types import (
    DisruptionSettings,
    DoNotDisrupt,
    Pdb,
)
from fleetshare.autoscaling.simulated_cloud import (
    DEFAULT_ZONES,
    Reservation,
    SimulatedCloudConfig,
)
from fleetshare.inputs import Count, StrictModel
from fleetshare.model.catalog import Catalog

MAX_SPOT_INTERRUPTION_RATE = 10.0
"""The highest ``spot_interruption_rate_per_hour`` accepted: a mean spot lifetime of six minutes,
far above any real spot pool (AWS's worst band is over 20% a month, about 0.0003 an hour), yet
low enough that a launched node usually becomes Ready (launch latency 90 s: 78% do)."""


class _Strict(StrictModel):
    model_config = ConfigDict(frozen=True)


class CapacityLimitSpec(_Strict):
    """At most ``max`` live instances of one offering: more is an insufficient-capacity error."""

    instance_type: str
    zone: str
    capacity_type: Literal["on-demand", "spot", "reserved"] = "on-demand"
    max: Count = Field(ge=0)


class ReservationSpec(_Strict):
    """Reserved capacity (an ODCR or capacity block): ``count`` instances at ``price_per_hour``."""

    instance_type: str
    zone: str
    count: Count = Field(ge=1)
    price_per_hour: float = Field(default=0.0, ge=0)


class ServiceQuotaSpec(_Strict):
    """A vCPU service quota of the account: at most ``max_vcpus`` running vCPUs of one AWS
    quota ``group`` (``G``, ``P``, ``Standard``, ``Trn``, ...) or of the listed ``families``."""

    group: str | None = None
    families: list[str] | None = None
    capacity_type: Literal["on-demand", "spot"] = "on-demand"
    max_vcpus: int = Field(ge=0)
    name: str | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> ServiceQuotaSpec:
        if (self.group is None) == (self.families is None):
            raise ValueError("give exactly one of 'group' (an AWS quota group) or 'families'")
        if self.group is not None:
            short = {g.split(" ")[0] for g in AWS_QUOTA_GROUPS} | set(AWS_QUOTA_GROUPS)
            if self.group not in short:
                known = ", ".join(sorted(short))
                raise ValueError(f"group: unknown AWS quota group {self.group!r}; known: {known}")
        return self

    def quota(self, catalog: Catalog) -> ServiceQuota:
        """The quota with AWS's name and the catalog's families of its group."""
        if self.group is not None:
            quota = aws_quota(self.group, self.max_vcpus, catalog, self.capacity_type)
            return quota if self.name is None else quota.model_copy(update={"name": self.name})
        families = self.families or []
        name = self.name or f"{self.capacity_type} vCPUs of {', '.join(families)}"
        return ServiceQuota(
            name=name,
            families=families,
            capacity_type=self.capacity_type,
            max_vcpus=self.max_vcpus,
        )


class CloudSpec(_Strict):
    """The simulated cloud (see :mod:`fleetshare.autoscaling.simulated_cloud` for the models)."""

    provider: Literal["simulated"] = "simulated"
    seed: int = 0
    zones: list[str] = Field(default_factory=lambda: list(DEFAULT_ZONES), min_length=1)
    launch_latency_seconds: float = Field(default=90.0, ge=0)
    launch_latency_jitter_seconds: float = Field(default=0.0, ge=0)
    launch_latency_by_type: dict[str, float] = Field(default_factory=dict)
    """Instance type -> its launch latency (else ``launch_latency_seconds``)."""
    spot_discount_min: float = Field(default=0.55, ge=0, lt=1)
    spot_discount_max: float = Field(default=0.75, ge=0, lt=1)
    spot_interruption_rate_per_hour: float = Field(default=0.0, ge=0)
    """Interruptions per spot instance-hour, at most :data:`MAX_SPOT_INTERRUPTION_RATE`."""
    ice_probability: float = Field(default=0.0, ge=0, le=1)
    ice_cooldown_seconds: float = Field(default=180.0, ge=0)
    capacity_limits: list[CapacityLimitSpec] = Field(default_factory=list)
    reservations: list[ReservationSpec] = Field(default_factory=list)
    service_quotas: list[ServiceQuotaSpec] = Field(default_factory=list)
    """The account's vCPU quotas: the autoscaler plans within them, the cloud enforces them."""
    instance_limits: dict[str, int] = Field(default_factory=dict)
    """Instance type -> most instances of it at once (any capacity type)."""

    @field_validator("spot_interruption_rate_per_hour")
    @classmethod
    def _rate(cls, value: float) -> float:
        if value > MAX_SPOT_INTERRUPTION_RATE:
            raise ValueError(
                f"{value:g} interruptions per spot instance-hour is above the most simulated, "
                f"{MAX_SPOT_INTERRUPTION_RATE:g} (a mean spot lifetime of "
                f"{60 / MAX_SPOT_INTERRUPTION_RATE:g} minutes; AWS's most interrupted spot "
                "pools lose over 20% a month, about 0.0003 an hour): at such rates nodes are "
                "interrupted before they are Ready or the work on them ends, and a run "
                "cannot finish"
            )
        return value

    def account(self, catalog: Catalog) -> AccountLimits | None:
        """The account limits (None when there are none)."""
        if not self.service_quotas and not self.instance_limits:
            return None
        unknown = sorted(t for t in self.instance_limits if t not in catalog)
        if unknown:
            raise ValueError(f"instance_limits: unknown instance types {', '.join(unknown)}")
        return AccountLimits(
            quotas=[q.quota(catalog) for q in self.service_quotas],
            instance_limits={Catalog.ec2_name(t): n for t, n in self.instance_limits.items()},
        )

    def config(self, catalog: Catalog) -> SimulatedCloudConfig:
        """The simulated cloud's configuration."""
        return SimulatedCloudConfig(
            seed=self.seed,
            zones=tuple(self.zones),
            launch_latency_seconds=self.launch_latency_seconds,
            launch_latency_jitter_seconds=self.launch_latency_jitter_seconds,
            launch_latency_by_type=dict(self.launch_latency_by_type),
            spot_discount_min=self.spot_discount_min,
            spot_discount_max=self.spot_discount_max,
            spot_interruption_rate_per_hour=self.spot_interruption_rate_per_hour,
            ice_probability=self.ice_probability,
            ice_cooldown_seconds=self.ice_cooldown_seconds,
            capacity_limits={
                (c.instance_type, c.zone, c.capacity_type): c.max for c in self.capacity_limits
            },
            reservations={
                (r.instance_type, r.zone): Reservation(r.count, r.price_per_hour)
                for r in self.reservations
            },
            catalog=catalog,
            account=self.account(catalog),
        )


class HeadroomSpec(_Strict):
    """Keep room for ``count`` more pods of ``requests`` on the autoscaler's nodes, Ready or
    launching (warm capacity for bursts, e.g. inference)."""

    requests: dict[str, str | int | float]
    count: Count = Field(default=1, ge=1)
    node_selector: dict[str, str] = Field(default_factory=dict)


class AutoscalerSpec(_Strict):
    """How the autoscaler batches demand and repairs nodes."""

    batch_idle_seconds: float = Field(
        default=1.0, ge=0, description="provision once no new demand arrived for this long"
    )
    batch_max_seconds: float = Field(
        default=10.0, ge=0, description="...but no later than this after the first new demand"
    )
    repair_after_seconds: float = Field(
        default=60.0, ge=0, description="an unhealthy node is replaced after this long"
    )
    clock_start: datetime = Field(
        default=datetime(2026, 1, 5, tzinfo=UTC),
        description="wall-clock time of t=0, for cron schedules (a Monday 00:00 UTC)",
    )
    plan_time_limit_seconds: float = Field(
        default=30.0,
        gt=0,
        description="a safety net only: plans are bounded by a work budget, and a plan cut "
        "short by this limit says so",
    )
    headroom: list[HeadroomSpec] = Field(default_factory=list)
    disruption_interval_seconds: float = Field(
        default=60.0,
        ge=1,
        description="how often consolidation, expiry and drift are evaluated (at least every "
        "second: a smaller interval wakes the simulation so often that time hardly moves)",
    )
    disruption_validation_seconds: float = Field(
        default=15.0,
        ge=0,
        description="a consolidation is re-validated this long after it is "
        "decided, and carried out only if still valid (Karpenter: 15 s)",
    )
    disruption: DisruptionSettingsSpec = Field(default_factory=lambda: DisruptionSettingsSpec())

    def disruption_settings(self) -> DisruptionSettings:
        """What the disruption methods read: ``disruption`` with the repair grace."""
        return self.disruption.settings(repair_grace_seconds=self.repair_after_seconds)


class DisruptionSettingsSpec(_Strict):
    """Disruption tunables (:class:`~fleetshare.autoscaling.disruption.DisruptionSettings`)."""

    training_saving_threshold: float = Field(
        default=0.3,
        ge=0,
        le=1,
        description="preemptible training is restarted only to save this fraction of the "
        "price of the nodes the action touches",
    )
    min_saving_fraction: float = Field(default=0.05, ge=0, lt=1)
    min_saving_per_hour: float = Field(default=0.01, ge=0)
    max_multi_node_candidates: int = Field(default=100, ge=2)
    max_replacement_candidates: int = Field(default=10, ge=0)
    plan_time_limit_seconds: float = Field(default=30.0, gt=0)
    expiry_grace_seconds: float = Field(
        default=0.0, ge=0, description="protected expired nodes are forced this long after"
    )
    drift_waits_for_training: bool = True
    max_unhealthy_fraction: float = Field(
        default=0.2,
        ge=0,
        le=1,
        description="a pool stops repairing while more of its nodes than this fraction "
        "(rounded up) are unhealthy (Karpenter: 20%)",
    )

    def settings(self, repair_grace_seconds: float = 60.0) -> DisruptionSettings:
        """The plain settings the disruption methods read (the repair grace is the
        autoscaler's ``repair_after_seconds``)."""
        return DisruptionSettings(
            training_saving_threshold=self.training_saving_threshold,
            min_saving_fraction=self.min_saving_fraction,
            min_saving_per_hour=self.min_saving_per_hour,
            max_multi_node_candidates=self.max_multi_node_candidates,
            max_replacement_candidates=self.max_replacement_candidates,
            plan_time_limit=self.plan_time_limit_seconds,
            expiry_grace_seconds=self.expiry_grace_seconds,
            drift_waits_for_training=self.drift_waits_for_training,
            repair_grace_seconds=repair_grace_seconds,
            max_unhealthy_fraction=self.max_unhealthy_fraction,
        )


class PdbSpec(_Strict):
    """A PodDisruptionBudget over the pods of ``workloads`` and/or the workloads whose labels
    include all of ``selector``: at most ``max_unavailable`` of them disrupted at once, and/or
    at least ``min_available`` of them running."""

    name: str = Field(min_length=1)
    workloads: list[str] = Field(default_factory=list)
    selector: dict[str, str] = Field(default_factory=dict, description="workload labels")
    max_unavailable: int | None = Field(default=None, ge=0)
    min_available: int | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _complete(self) -> PdbSpec:
        if not self.workloads and not self.selector:
            raise ValueError(
                f"pdb {self.name}: give 'workloads' or 'selector' (it selects nothing)"
            )
        if self.max_unavailable is None and self.min_available is None:
            raise ValueError(
                f"pdb {self.name}: give 'max_unavailable' or 'min_available' (it limits nothing)"
            )
        return self

    def pdb(self, disrupted: int = 0) -> Pdb:
        """The budget, with ``disrupted`` of its pods currently unavailable."""
        return Pdb(
            name=self.name,
            max_unavailable=self.max_unavailable,
            min_available=self.min_available,
            disrupted=disrupted,
            workloads=frozenset(self.workloads),
            selector=dict(self.selector),
        )


class DoNotDisruptSpec(_Strict):
    """``karpenter.sh/do-not-disrupt`` set by configuration: on every node of ``pools``, on the
    ``nodes`` named, and on the pods of ``workloads`` (a workload may also carry the label
    ``karpenter.sh/do-not-disrupt: "true"`` itself)."""

    pools: list[str] = Field(default_factory=list)
    nodes: list[str] = Field(default_factory=list)
    workloads: list[str] = Field(default_factory=list)

    @field_validator("pools", "nodes", "workloads")
    @classmethod
    def _names(cls, value: list[str]) -> list[str]:
        if any(not name for name in value):
            raise ValueError("names must not be empty")
        return value

    def do_not_disrupt(self) -> DoNotDisrupt:
        """The plain form the disruption methods read."""
        return DoNotDisrupt(
            pools=frozenset(self.pools),
            nodes=frozenset(self.nodes),
            workloads=frozenset(self.workloads),
        )
