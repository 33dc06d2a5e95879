"""The operator's Prometheus metrics (served by ``fleetshare operator --metrics-port``).

Names follow the service's (:mod:`fleetshare.service.metrics`, Kueue's names with the prefix
``fleetshare_``) where they mean the same; a team is the ``cluster_queue`` label. Gauges are
read from the :class:`Summary` the operator writes at the end of each reconcile (never from
the loop's live state, which another thread changes):

- ``fleetshare_pending_workloads{cluster_queue, status}`` and
  ``fleetshare_admitted_active_workloads{cluster_queue}``: as the service's, one definition
  (:mod:`fleetshare.control.metrics`); a governed workload is ``inadmissible`` once a cycle
  wrote its pending reason; work running outside the operator, bound without its admission, is
  not counted.
- ``fleetshare_node_claims{nodepool, state}``: the autoscaler's live NodeClaims, ``state``
  ``launching`` until the node is Ready in the cluster, then ``ready``.
- ``fleetshare_operator_leader``: 1 while this replica may act (it holds the Lease, or leader
  election is off), else 0.
- ``fleetshare_operator_reconciles_total``: reconciles this replica carried out (a counter).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, disable_created_metrics, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from fleetshare.control.metrics import workload_gauges


@dataclass(frozen=True)
class Summary:
    """What the metrics show, as of the latest reconcile."""

    teams: tuple[str, ...] = ()
    pending: tuple[tuple[str, bool], ...] = ()
    """(team, considered by a cycle) of each pending workload."""
    admitted: tuple[str, ...] = ()
    """The team of each admitted workload not finished."""
    claims: Mapping[tuple[str, str], int] = field(default_factory=dict)
    """(pool, ``launching`` or ``ready``) -> live claims."""
    leader: bool = False
    reconciles: int = 0


def summary(
    teams: list[str],
    pending: list[tuple[str, bool]],
    admitted_teams: list[str],
    claims: list[tuple[str, bool]],
    *,
    leader: bool,
    reconciles: int,
) -> Summary:
    """A summary from the policy's teams, the (team, considered by a cycle) of each pending
    workload, the team of each admitted one and the (pool, Ready) of each live claim."""
    return Summary(
        tuple(teams),
        tuple(pending),
        tuple(admitted_teams),
        dict(Counter((pool, "ready" if ready else "launching") for pool, ready in claims)),
        leader,
        reconciles,
    )


class OperatorMetrics(Collector):
    """A registry of its own whose collector reads the latest :class:`Summary`."""

    def __init__(self) -> None:
        disable_created_metrics()  # type: ignore[no-untyped-call]
        self.latest = Summary()
        self.registry = CollectorRegistry()
        self.registry.register(self)

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        s = self.latest
        yield from workload_gauges(s.teams, s.pending, s.admitted)
        claims = GaugeMetricFamily("fleetshare_node_claims",
                                   "Live NodeClaims of the autoscaler by pool and state.",
                                   labels=["nodepool", "state"])  # fmt: skip
        for (pool, state), count in sorted(s.claims.items()):
            claims.add_metric([pool, state], count)
        yield claims
        yield GaugeMetricFamily("fleetshare_operator_leader",
                                "1 while this replica may act.", value=int(s.leader))  # fmt: skip
        yield CounterMetricFamily("fleetshare_operator_reconciles",
                                  "Reconciles carried out.", value=s.reconciles)  # fmt: skip

    def render(self) -> bytes:
        return generate_latest(self.registry)
