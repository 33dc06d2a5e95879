"""Kueue's scheduler performance test workload (synthetic), as a fleetshare trace.

Kueue's scheduler benchmark (``test/performance/scheduler`` in kubernetes-sigs/kueue, config
``configs/baseline/generator.yaml``) creates, for each of 5 cohorts, 6 ClusterQueues
(``cq-0-<q>-cohort-<c>``) with a nominal quota of 20 CPU and a borrowing limit of 100 CPU
(``reclaimWithinCohort: Any``, ``withinClusterQueue: LowerPriority``), one LocalQueue each in a
namespace of the same name, and per queue three workload sets created concurrently:

======  =====  =========  =========  ========  ===========
class   count  every      runs       request   priority
======  =====  =========  =========  ========  ===========
small   350    100 ms     200 ms     1 CPU     50
medium  100    500 ms     500 ms     5 CPU     100
large   50     1.2 s      1 s        20 CPU    200
======  =====  =========  =========  ========  ===========

that is 500 workloads per queue, 15,000 in all. The generator waits one interval *before*
each creation, so the ``k``-th workload (from 0) of a set arrives at ``(k + 1) * interval``:
small ones from 0.1 s to 35 s, medium from 0.5 s to 50 s, large from 1.2 s to 60 s. Workloads
are named as Kueue names them, ``<class>-<set>-<k>-0``, prefixed with their namespace.

Mapping to fleetshare:

- The Kueue objects (ResourceFlavor ``rf``, ClusterQueues, LocalQueues and one
  WorkloadPriorityClass per priority) go through :func:`fleetshare.policy.kueue.import_kueue`,
  so the policy is exactly what ``fleetshare import kueue`` makes of them: cohorts -> groups,
  ClusterQueues -> teams, priorities 50/100/200 rescaled into fleetshare's 0-100 weights
  (33/67/100, order kept), fair sharing off (no kueue Configuration).
- Kueue cohorts without a parent are separate trees that never share quota; in fleetshare
  every group hangs under the cluster root. ``isolate_cohorts`` (default) gives each group a
  lending limit of 0 CPU so no cohort's quota reaches another.
- Kueue's benchmark runs without nodes (admission is the test). fleetshare places pods, so
  the cluster has CPU nodes whose total equals the sum of nominal quotas (30 x 20 = 600 CPU):
  ``600 / node_cpus`` nodes of ``node_cpus`` cores (default 120: 5 nodes, one cohort's worth
  each, large enough that a 20-CPU workload rarely fails to fit for fragmentation). Nodes
  offer CPU only, as the workloads request CPU only.

The generator is deterministic (``seed`` is accepted for a uniform interface and unused).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from fleetshare.model.node import Node
from fleetshare.model.quantity import MILLI
from fleetshare.model.resources import CPU
from fleetshare.model.workload import Workload
from fleetshare.policy.kueue import import_kueue
from fleetshare.policy.schema import DEFAULT_FLAVOR
from fleetshare.traces.common import (
    SYNTHETIC_LABEL,
    TRACE_LABEL,
    Trace,
    node_names,
    single_pod,
    step_curve,
)

FLAVOR = "rf"
CLASS_LABEL = "kueue.x-k8s.io/performance-scheduler-class"
RUNNING_LABEL = "kueue.x-k8s.io/performance-scheduler-running-ms"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


@dataclass(frozen=True, slots=True)
class WorkloadClass:
    """One workload set of a queue."""

    name: str
    count: int
    interval_ms: int
    runtime_ms: int
    cpu: int
    priority: int

    @property
    def priority_class(self) -> str:
        """The WorkloadPriorityClass the loader creates for this priority."""
        return f"priority-{self.priority}"


CLASSES = (
    WorkloadClass("small", 350, 100, 200, 1, 50),
    WorkloadClass("medium", 100, 500, 500, 5, 100),
    WorkloadClass("large", 50, 1200, 1000, 20, 200),
)
NOMINAL_CPU = 20
BORROWING_LIMIT_CPU = 100


def queue_name(cohort: int, queue: int) -> str:
    """Kueue's ClusterQueue name: ``cq-<queue set>-<queue>-cohort-<cohort>``."""
    return f"cq-0-{queue}-cohort-{cohort}"


def kueue_objects(cohorts: int, queues: int) -> list[dict[str, Any]]:
    """The Kueue objects the benchmark creates (plus the WorkloadPriorityClasses)."""
    objs: list[dict[str, Any]] = [
        {
            "apiVersion": "kueue.x-k8s.io/v1beta1",
            "kind": "ResourceFlavor",
            "metadata": {"name": FLAVOR},
        }
    ]
    for wc in CLASSES:
        objs.append(
            {
                "apiVersion": "kueue.x-k8s.io/v1beta1",
                "kind": "WorkloadPriorityClass",
                "metadata": {"name": wc.priority_class},
                "value": wc.priority,
            }
        )
    for c in range(cohorts):
        for q in range(queues):
            name = queue_name(c, q)
            resources = [
                {"name": "cpu", "nominalQuota": NOMINAL_CPU, "borrowingLimit": BORROWING_LIMIT_CPU}
            ]
            objs.append(
                {
                    "apiVersion": "kueue.x-k8s.io/v1beta1",
                    "kind": "ClusterQueue",
                    "metadata": {"name": name},
                    "spec": {
                        "namespaceSelector": {},  # every namespace, as Kueue's test wrapper sets
                        "cohort": f"cohort-{c}",
                        "resourceGroups": [
                            {
                                "coveredResources": ["cpu"],
                                "flavors": [{"name": FLAVOR, "resources": resources}],
                            }
                        ],
                        "preemption": {
                            "reclaimWithinCohort": "Any",
                            "withinClusterQueue": "LowerPriority",
                        },
                    },
                }
            )
            objs.append(
                {
                    "apiVersion": "kueue.x-k8s.io/v1beta1",
                    "kind": "LocalQueue",
                    "metadata": {"name": name, "namespace": name},
                    "spec": {"clusterQueue": name},
                }
            )
    return objs


def cohorts_apart(policy: dict[str, Any]) -> dict[str, Any]:
    """A policy (JSON) whose root groups (Kueue's cohorts without a parent) lend nothing of
    any resource their teams have quota of: in Kueue such cohorts are separate trees, in
    fleetshare every group hangs under the cluster root."""
    quota = {(str(e.get("flavor", DEFAULT_FLAVOR)), str(r))
             for t in policy.get("teams") or () for e in t.get("quota") or ()
             for r in e.get("resources") or {}}  # fmt: skip
    for group in policy.get("groups") or ():
        if not group.get("parent"):
            group["lending_limits"] = [{"resource": r, "flavor": f, "absolute": 0}
                                       for f, r in sorted(quota)]  # fmt: skip
    return policy


MAX_QUEUES = 200
"""The most queues generated (each gets 500 workloads: 100,000 in all)."""


def load(
    *,
    cohorts: int = 5,
    queues_per_cohort: int = 6,
    node_cpus: int = 120,
    isolate_cohorts: bool = True,
    seed: int = 0,
) -> Trace:
    """Generate Kueue's scheduler performance workload (see the module docstring)."""
    del seed  # deterministic
    if cohorts < 1 or queues_per_cohort < 1:
        raise ValueError("cohorts and queues_per_cohort must be positive")
    if cohorts * queues_per_cohort > MAX_QUEUES:
        raise ValueError(
            f"cohorts x queues_per_cohort is {cohorts * queues_per_cohort:,}; at most "
            f"{MAX_QUEUES} queues (500 workloads each) are generated"
        )
    total_cpu = cohorts * queues_per_cohort * NOMINAL_CPU
    largest = max(wc.cpu for wc in CLASSES)
    if node_cpus < largest or total_cpu % node_cpus:
        raise ValueError(
            f"node_cpus must be at least {largest} and divide the {total_cpu} CPU of nominal "
            f"quota; got {node_cpus}"
        )
    policy = import_kueue(kueue_objects(cohorts, queues_per_cohort)).model_dump(mode="json")
    if isolate_cohorts:
        policy = cohorts_apart(policy)
    weights = {pc["name"]: int(pc["weight"]) for pc in policy["cluster"]["priority_classes"]}

    workloads: list[Workload] = []
    for c in range(cohorts):
        for q in range(queues_per_cohort):
            ns = queue_name(c, q)
            for set_idx, wc in enumerate(CLASSES):
                for k in range(wc.count):
                    workloads.append(
                        single_pod(
                            f"{ns}/{wc.name}-{set_idx}-{k}-0",
                            ns,
                            {CPU: wc.cpu * MILLI},
                            (k + 1) * wc.interval_ms / 1000,
                            wc.runtime_ms / 1000,
                            priority_class=wc.priority_class,
                            priority=weights[wc.priority_class],
                            labels={
                                TRACE_LABEL: "kueue-generator",
                                SYNTHETIC_LABEL: "true",
                                CLASS_LABEL: wc.name,
                                RUNNING_LABEL: str(wc.runtime_ms),
                                QUEUE_LABEL: ns,
                            },
                        )
                    )
    workloads.sort(key=lambda w: (w.submit_time, w.name))
    end = max(w.submit_time + (w.duration or 0.0) for w in workloads)
    nodes = [
        Node(name=name, allocatable={CPU: node_cpus * MILLI})
        for name in node_names("kueue-node", total_cpu // node_cpus)
    ]
    starts = np.array([w.submit_time for w in workloads])
    stops = starts + np.array([w.duration or 0.0 for w in workloads])
    cpus = np.array([w.total_requests()[CPU] / MILLI for w in workloads])
    offered = sum(wc.count * wc.cpu * wc.runtime_ms / 1000 for wc in CLASSES)
    window = max(wc.count * wc.interval_ms / 1000 for wc in CLASSES)
    mapping = ", ".join(f"{wc.priority} -> {weights[wc.priority_class]}" for wc in CLASSES)
    assumptions = [
        f"Kueue's scheduler benchmark (configs/baseline/generator.yaml): {cohorts} cohorts x "
        f"{queues_per_cohort} ClusterQueues, {NOMINAL_CPU} CPU nominal quota and "
        f"{BORROWING_LIMIT_CPU} CPU borrowing limit each; the k-th workload of a set arrives "
        "at (k + 1) x its interval (the generator waits before each creation), ignoring API "
        "latency.",
        f"Priorities {mapping} (fleetshare weights are 0-100; rescaled by the Kueue importer, "
        "order kept); Kueue sets the priority on each workload, fleetshare needs a class per "
        "priority, so WorkloadPriorityClasses priority-50/100/200 are added.",
        f"Kueue runs the benchmark without nodes; here {len(nodes)} nodes x {node_cpus} CPU = "
        f"{total_cpu} CPU, the sum of nominal quotas. Node fit can delay a workload Kueue "
        "would have admitted.",
        (
            "Cohorts are separate in Kueue (no parent); each group gets a lending limit of 0 "
            "CPU so no cohort's quota reaches another through the cluster root."
            if isolate_cohorts
            else "Cohort groups hang under the cluster root without lending limits, so "
            "cohorts may borrow from each other (unlike Kueue)."
        ),
        f"Offered load per queue: {offered:g} CPU-seconds over the {window:g} s arrival "
        f"window ({offered / window:.1f} CPU on average against {NOMINAL_CPU} nominal): "
        "queues must borrow to keep up.",
        "Fair sharing off, as in a Kueue without a fairSharing Configuration.",
    ]
    return Trace(
        name="kueue-generator",
        description="Kueue scheduler performance generator: 5 cohorts x 6 queues, 15,000 "
        "CPU workloads (synthetic)",
        nodes=nodes,
        workloads=workloads,
        policy=policy,
        assumptions=assumptions,
        duration=end,
        demand={
            "cpus": step_curve(
                starts, stops, cpus, end, "CPUs", "CPU requested if every workload ran on arrival"
            )
        },
        start=None,
        sources=[],
        facts={
            "cohorts": cohorts,
            "queues": cohorts * queues_per_cohort,
            "workloads_per_queue": sum(wc.count for wc in CLASSES),
            "nominal_cpu": total_cpu,
            "arrival_window_s": window,
        },
    )
