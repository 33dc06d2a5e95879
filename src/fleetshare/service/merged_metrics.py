"""Metrics of several processes served as one exposition.

``fleetshare serve`` is two processes (:mod:`fleetshare.service.loop_process`): the loop
process reports its counters and histograms as Prometheus text, and the API process serves
them in its ``/metrics`` together with its own. Both may have samples of one family (each
its store's operations, :mod:`fleetshare.service.store_metrics`), and a family may appear
only once in an exposition, so they are merged, by one rule:

- counters, histograms and summaries: samples with the same name and labels are **summed**
  (a count over both processes);
- other types (gauges, info): the first source's sample is kept.

The same rule carries the counts of a loop process that exited (crashed, lost the lease) into
its successor's: the API process adds the last report of every earlier loop process to the
current one's, so the served counters do not fall back to 0 when the loop process is started
again (what happened after an exited process's last report, at most ~0.25 s, is lost).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

SUMMED = frozenset({"counter", "histogram", "summary"})
"""Types whose samples add up across processes."""


def parse(text: bytes) -> list[Metric]:
    """The families of a Prometheus text exposition."""
    return list(text_string_to_metric_families(text.decode()))


def cumulative(families: Iterable[Metric]) -> list[Metric]:
    """The families of ``families`` that add up (:data:`SUMMED`): what outlives a process."""
    return [family for family in families if family.type in SUMMED]


def merge(*sources: Iterable[Metric]) -> list[Metric]:
    """One family per name from ``sources``, by the rule in the module docstring."""
    merged: dict[str, Metric] = {}
    samples: dict[str, dict[tuple[str, tuple[tuple[str, str], ...]], Sample]] = {}
    for source in sources:
        for family in source:
            if family.name not in merged:
                merged[family.name] = Metric(
                    family.name, family.documentation, family.type, family.unit
                )
                samples[family.name] = {}
            kept = samples[family.name]
            summed = merged[family.name].type in SUMMED
            for sample in family.samples:
                key = (sample.name, tuple(sorted(sample.labels.items())))
                before = kept.get(key)
                if before is None:
                    kept[key] = sample
                elif summed:
                    kept[key] = sample._replace(value=before.value + sample.value)
    for name, family in merged.items():
        family.samples = list(samples[name].values())
    return list(merged.values())


class _Families(Collector):
    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        return iter(self.families)


def render(families: list[Metric]) -> bytes:
    """``families`` in Prometheus' text format."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families(families))
    return generate_latest(registry)
