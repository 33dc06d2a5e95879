"""The workload gauges the service and the operator both export (one definition, so that a
dashboard reads either): Kueue's names with the prefix ``fleetshare_``, a team being Kueue's
ClusterQueue (label ``cluster_queue``).

- ``fleetshare_pending_workloads{cluster_queue, status}``: pending workloads; ``status``
  ``inadmissible`` when an admission cycle considered the workload and left it waiting (with
  a reason), ``active`` when no cycle has considered it yet.
- ``fleetshare_admitted_active_workloads{cluster_queue}``: admitted workloads not finished.

Every known team gets a sample of each (0 when it has none), as Kueue reports every
ClusterQueue.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from prometheus_client.core import GaugeMetricFamily

PENDING_STATUSES = ("active", "inadmissible")


def workload_gauges(
    teams: Iterable[str], pending: Iterable[tuple[str, bool]], admitted: Iterable[str]
) -> tuple[GaugeMetricFamily, GaugeMetricFamily]:
    """The two gauges from every pending workload's (team, considered by a cycle) and every
    admitted workload's team; ``teams`` are listed even when they have no work."""
    counts = Counter((team, "inadmissible" if seen else "active") for team, seen in pending)
    running = Counter(admitted)
    pending_family = GaugeMetricFamily(
        "fleetshare_pending_workloads",
        "Pending workloads: inadmissible (considered, waiting with a reason) or active.",
        labels=["cluster_queue", "status"],
    )
    admitted_family = GaugeMetricFamily(
        "fleetshare_admitted_active_workloads",
        "Admitted workloads not finished.",
        labels=["cluster_queue"],
    )
    for team in sorted(set(teams) | {t for t, _ in counts} | set(running)):
        for status in PENDING_STATUSES:
            pending_family.add_metric([team, status], counts.get((team, status), 0))
        admitted_family.add_metric([team], running.get(team, 0))
    return pending_family, admitted_family
