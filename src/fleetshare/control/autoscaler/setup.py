"""What every part of the autoscaler reads: the pools, the catalog, the settings and the
cloud, read only (:class:`CloudView`: a decision asks the cloud, it never changes it)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from fleetshare.autoscaling.cloud import CloudTraits, Instance, Offering
from fleetshare.autoscaling.disruption import DisruptionSettings, DoNotDisrupt
from fleetshare.autoscaling.nodepool import NodePool
from fleetshare.autoscaling.settings import AutoscalerSpec
from fleetshare.model.catalog import Catalog


class CloudView(Protocol):
    """The questions a decision may ask the cloud (the reads of
    :class:`~fleetshare.autoscaling.cloud.CloudProvider`): launching and terminating are
    the effect layer's (:mod:`.cloud_calls`)."""

    @property
    def traits(self) -> CloudTraits:
        """Launch latency, capacity cooldown and account limits."""
        ...

    def offerings(self, instance_types: Iterable[str], now: float) -> list[Offering]:
        """Offerings of these types, ``available`` False where capacity ran out recently."""
        ...

    def instances(self, now: float) -> list[Instance]:
        """Instances the provider launched that are not terminated."""
        ...

    def interruption_at(self, instance_id: str) -> float | None:
        """When the provider will reclaim the instance, if it said so."""
        ...


def launchable(catalog: Catalog, pools: Iterable[NodePool]) -> list[str]:
    """Instance types some pool may launch, in catalog order."""
    pools = list(pools)
    return [i.name for i in catalog if any(p.allows(i) for p in pools)]


@dataclass
class Setup:
    """The autoscaler's configuration as it stands (the pools change with
    :meth:`~.controller.Autoscaler.set_pools`, the settings may be replaced)."""

    pools: dict[str, NodePool]
    catalog: Catalog
    settings: AutoscalerSpec
    cloud: CloudView
    disruption: DisruptionSettings
    do_not_disrupt: DoNotDisrupt
    offset: float
    """The wall-clock time of t = 0 (cron budgets read the wall clock)."""
    launchable: list[str] = field(default_factory=list)
    """Instance types some pool may launch (pools' type rules do not change)."""

    @classmethod
    def of(
        cls,
        pools: Sequence[NodePool],
        catalog: Catalog,
        settings: AutoscalerSpec,
        cloud: CloudView,
        do_not_disrupt: DoNotDisrupt,
    ) -> Setup:
        """The setup of these pools (by name) and settings."""
        return cls(
            {p.name: p for p in pools},
            catalog,
            settings,
            cloud,
            settings.disruption_settings(),
            do_not_disrupt,
            settings.clock_start.timestamp(),
            launchable(catalog, pools),
        )

    @property
    def latency(self) -> float:
        """The cloud's launch latency."""
        return self.cloud.traits.launch_latency_seconds

    def offerings(self, now: float) -> list[Offering]:
        """Offerings of every type some pool may launch (in catalog order)."""
        return self.cloud.offerings(self.launchable, now)
