"""Disruption decisions: repair, emptiness, expiration, drift and consolidation (pure).

Karpenter-like (``pkg/controllers/disruption/``), but better at protecting training. Each
method is an object in its own module implementing :class:`~.method.Method`: ``screen`` /
``candidates``, ``compute`` and ``validate`` on a :class:`~.state.State` (a snapshot of
:class:`NodeView`, :class:`PodView`, :class:`Pdb`, the pools, :class:`DisruptionSettings`,
:class:`DoNotDisrupt` and ``now`` in epoch seconds; nothing reads a clock or does I/O).
:data:`METHODS` is the order a controller walks; :func:`decide` returns the first method's
actions, with ``reasons``: a :class:`~fleetshare.model.reason.Reason` for every node a method
looked at and kept ("why wasn't my node consolidated?"). Categories: ``budget``,
``do-not-disrupt``, ``pdb``, ``training``, ``consolidate-after``, ``policy``, ``not-ready``,
``disrupting``, ``floor``, ``does-not-fit``, ``no-saving``, ``unknown-pool``, ``not-evaluated``,
``repair-grace``, ``repair-halted``, ``no-replacement``. Before acting on a voluntary action
(after Karpenter's 15 s wait) a controller calls :func:`validate` with the then-current state.

Order (:data:`METHODS`): repair (a separate controller in Karpenter, first here), emptiness,
expiration, drift, multi-node consolidation, single-node consolidation. Karpenter v1 walks
emptiness, drift, multi-node, single-node (``NewMethods``); expiration sat just before drift
in v0.3x and is forced in v1.

- **Pods and gangs.** A pod with ``gang`` set belongs to a gang: evicting any of its pods
  disrupts the whole gang, so every action evicts all pods of every gang it touches, also those
  on nodes it keeps (``Action.evict``; the gang appears in ``Action.requeue``). Set
  ``gang=None`` for independent replicas so they move one by one under Karpenter's rules.
- **Which nodes can take the pods.** Ready and healthy nodes not being disrupted and not
  removed by the action, whose labels match the pod's node selector and affinity (well-known
  instance-type, zone, capacity-type and node-pool labels implied) and whose taints it
  tolerates (:mod:`fleetshare.placement.first_fit`). Each pod uses one of the node's ``pods``
  slots. Pods are placed first fit decreasing (accelerators, CPU, memory); target nodes by
  name, planned replacement nodes last. Consolidation requires *every* evicted pod to be
  re-placeable; it never evicts a gang into the queue to save money.
- **Training protection.** A training unit is a gang containing a ``kind="training"`` pod (or a
  lone training pod). Consolidation disrupts one only when all its pods are ``preemptible`` and
  the hourly saving is at least ``training_saving_threshold`` (0.3) times the summed price of
  every node the action *touches* (removed, or hosting an evicted pod). Drift waits for
  non-preemptible training (``drift_waits_for_training``). Expiry is forced; repair proceeds.
- **Consolidate-after.** A node is a candidate once its pods have not changed for the pool's
  ``consolidate_after_seconds``: since ``NodeView.pods_changed_at`` when given, else since the
  latest of its launch and its pods' start times; empty nodes from ``empty_since`` (or launch).
- **Budgets** (:mod:`fleetshare.autoscaling.budgets`) gate emptiness, consolidation, drift and
  expiry per pool; nodes in ``disrupting`` and nodes not Ready/healthy count as disrupted.
  Multi-node consolidation takes at most each pool's allowance; single-node actions need one.
  Repair ignores budgets.
- **Do-not-disrupt** (``karpenter.sh/do-not-disrupt``): on a node (``NodeView``, or
  :class:`DoNotDisrupt` pools/nodes) it blocks emptiness, consolidation and drift of the node;
  on a pod (flag, workload label ``"true"``, or :class:`DoNotDisrupt` workloads) it blocks any
  voluntary action evicting it. Expiry (after ``expiry_grace_seconds``) and repair override it.
- **PDBs.** A :class:`Pdb` covers the pods naming it, its ``workloads`` and the pods its
  ``selector`` matches; it allows ``max_unavailable - disrupted`` and/or
  ``running - min_available`` more evictions (the smaller). A voluntary action exceeding that
  is not taken; a pod naming an unknown PDB is not evictable.
- **Floors.** ``floors[pool]`` nodes (not counting nodes being disrupted) must stay.
- **Repair** pauses per pool by :func:`~.repair.repair_paused`, Karpenter's rule: while more
  than ``max_unhealthy_fraction`` (20%) of the pool's nodes, rounded up, are unhealthy.

The functions :func:`empty_nodes`, :func:`consolidation`, :func:`expiration_and_drift`,
:func:`repair` and :func:`revalidate` are the pre-package API, kept as thin wrappers.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace

from fleetshare.autoscaling.cloud import Offering
from fleetshare.autoscaling.disruption.drift import DRIFT, Drift
from fleetshare.autoscaling.disruption.emptiness import EMPTINESS, Emptiness
from fleetshare.autoscaling.disruption.expiration import EXPIRATION, Expiration
from fleetshare.autoscaling.disruption.method import Method, Screening
from fleetshare.autoscaling.disruption.multi_node import MULTI_NODE, MultiNodeConsolidation
from fleetshare.autoscaling.disruption.repair import REPAIR, Repair, repair_paused
from fleetshare.autoscaling.disruption.single_node import SINGLE_NODE, SingleNodeConsolidation
from fleetshare.autoscaling.disruption.state import State, missing_nodes
from fleetshare.autoscaling.disruption.types import (
    DO_NOT_DISRUPT_ANNOTATION,
    Action,
    ActionKind,
    Decision,
    DisruptionSettings,
    DoNotDisrupt,
    NodeView,
    Pdb,
    PodKind,
    PodView,
    Replacement,
    Validation,
)
from fleetshare.autoscaling.nodepool import NodePool
from fleetshare.model.catalog import Catalog

__all__ = [
    "DO_NOT_DISRUPT_ANNOTATION",
    "DRIFT",
    "EMPTINESS",
    "EXPIRATION",
    "METHODS",
    "MULTI_NODE",
    "REPAIR",
    "SINGLE_NODE",
    "Action",
    "ActionKind",
    "Decision",
    "DisruptionSettings",
    "DoNotDisrupt",
    "Drift",
    "Emptiness",
    "Expiration",
    "Method",
    "MultiNodeConsolidation",
    "NodeView",
    "Pdb",
    "PodKind",
    "PodView",
    "Repair",
    "Replacement",
    "Screening",
    "SingleNodeConsolidation",
    "State",
    "Validation",
    "consolidation",
    "decide",
    "empty_nodes",
    "expiration_and_drift",
    "method_for",
    "repair",
    "repair_paused",
    "revalidate",
    "validate",
]

METHODS: tuple[Method, ...] = (REPAIR, EMPTINESS, EXPIRATION, DRIFT, MULTI_NODE, SINGLE_NODE)
"""The order a controller walks; the first method with actions wins the pass."""


def decide(state: State, methods: Sequence[Method] = METHODS) -> Decision:
    """Walk ``methods`` in order: the first one's actions, and the reasons every method walked
    gave for the nodes it kept (the first reason for a node wins, except ``not-evaluated``)."""
    decision = Decision()
    for method in methods:
        screening = method.screen(state)
        found = method.compute(state, screening.candidates)
        decision.keep(screening.kept)
        decision.keep(found.reasons)
        if found.actions:
            acted = {n for a in found.actions for n in a.nodes}
            decision.actions = list(found.actions)
            decision.reasons = {n: r for n, r in decision.reasons.items() if n not in acted}
            break
    return decision


def method_for(action: Action) -> Method:
    """The method that decides actions of ``action.kind``."""
    by_kind: dict[ActionKind, Method] = {
        "repair": REPAIR,
        "delete-empty": EMPTINESS,
        "expire": EXPIRATION,
        "drift": DRIFT,
        "delete": MULTI_NODE if len(action.nodes) > 1 else SINGLE_NODE,
        "replace": MULTI_NODE if len(action.nodes) > 1 else SINGLE_NODE,
    }
    return by_kind[action.kind]


def validate(state: State, action: Action) -> Validation:
    """Re-check ``action`` with its method against ``state`` (whose ``disrupting`` should not
    include the action's own nodes)."""
    gone = missing_nodes(state, action.nodes)
    if gone:
        return Validation(False, gone)
    return method_for(action).validate(state, action)


# -- the pre-package API -------------------------------------------------------------------------


def empty_nodes(
    nodes: Sequence[NodeView],
    pods: Sequence[PodView],
    pools: Sequence[NodePool],
    now: float,
    *,
    floors: Mapping[str, int] | None = None,
    disrupting: Iterable[str] = (),
    settings: DisruptionSettings | None = None,
    do_not_disrupt: DoNotDisrupt | None = None,
) -> Decision:
    """:data:`EMPTINESS` alone."""
    state = State(
        nodes,
        pods,
        pools,
        now,
        floors=floors,
        disrupting=disrupting,
        settings=settings,
        do_not_disrupt=do_not_disrupt,
    )
    return decide(state, (EMPTINESS,))


def consolidation(
    nodes: Sequence[NodeView],
    pods: Sequence[PodView],
    pools: Sequence[NodePool],
    catalog: Catalog,
    offerings: Sequence[Offering],
    now: float,
    *,
    disrupting: Iterable[str] = (),
    pdbs: Sequence[Pdb] = (),
    settings: DisruptionSettings | None = None,
    floors: Mapping[str, int] | None = None,
    do_not_disrupt: DoNotDisrupt | None = None,
) -> Decision:
    """:data:`MULTI_NODE` then :data:`SINGLE_NODE`: at most one consolidation action."""
    state = State(
        nodes,
        pods,
        pools,
        now,
        disrupting=disrupting,
        pdbs=pdbs,
        settings=settings,
        floors=floors,
        do_not_disrupt=do_not_disrupt,
        catalog=catalog,
        offerings=offerings,
    )
    return decide(state, (MULTI_NODE, SINGLE_NODE))


def expiration_and_drift(
    nodes: Sequence[NodeView],
    pods: Sequence[PodView],
    pools: Sequence[NodePool],
    now: float,
    *,
    disrupting: Iterable[str] = (),
    pdbs: Sequence[Pdb] = (),
    settings: DisruptionSettings | None = None,
    catalog: Catalog | None = None,
    offerings: Sequence[Offering] = (),
    do_not_disrupt: DoNotDisrupt | None = None,
) -> Decision:
    """:data:`EXPIRATION`, then :data:`DRIFT` within what the expirations left of the budgets:
    the actions of both, expired nodes first."""

    def snapshot(busy: Iterable[str]) -> State:
        return State(
            nodes,
            pods,
            pools,
            now,
            disrupting=busy,
            pdbs=pdbs,
            settings=settings,
            do_not_disrupt=do_not_disrupt,
            catalog=catalog,
            offerings=offerings,
        )

    decision = decide(snapshot(disrupting), (EXPIRATION,))
    expiring = {n for a in decision.actions for n in a.nodes}
    drift = decide(snapshot(set(disrupting) | expiring), (DRIFT,))
    decision.actions.extend(drift.actions)
    decision.keep(drift.reasons)
    return decision


def repair(
    nodes: Sequence[NodeView],
    pods: Sequence[PodView],
    now: float,
    *,
    grace_seconds: float | None = None,
    max_unhealthy_fraction: float | None = None,
    disrupting: Iterable[str] = (),
    settings: DisruptionSettings | None = None,
) -> Decision:
    """:data:`REPAIR` alone; ``grace_seconds``/``max_unhealthy_fraction`` override
    ``settings.repair_grace_seconds``/``settings.max_unhealthy_fraction``."""
    settings = _repair_settings(settings, grace_seconds, max_unhealthy_fraction)
    return decide(State(nodes, pods, (), now, disrupting=disrupting, settings=settings), (REPAIR,))


def _repair_settings(
    settings: DisruptionSettings | None, grace: float | None, fraction: float | None
) -> DisruptionSettings:
    out = settings or DisruptionSettings()
    if grace is not None:
        out = replace(out, repair_grace_seconds=grace)
    if fraction is not None:
        out = replace(out, max_unhealthy_fraction=fraction)
    return out


def revalidate(
    action: Action,
    nodes: Sequence[NodeView],
    pods: Sequence[PodView],
    pools: Sequence[NodePool],
    now: float,
    *,
    disrupting: Iterable[str] = (),
    pdbs: Sequence[Pdb] = (),
    settings: DisruptionSettings | None = None,
    floors: Mapping[str, int] | None = None,
    catalog: Catalog | None = None,
    grace_seconds: float | None = None,
    do_not_disrupt: DoNotDisrupt | None = None,
) -> Validation:
    """:func:`validate` on a fresh snapshot; the action's own nodes in ``disrupting`` (marked
    by the controller meanwhile) do not count against it."""
    state = State(
        nodes,
        pods,
        pools,
        now,
        disrupting=set(disrupting) - set(action.nodes),
        pdbs=pdbs,
        settings=_repair_settings(settings, grace_seconds, None),
        floors=floors,
        do_not_disrupt=do_not_disrupt,
        catalog=catalog,
    )
    return validate(state, action)
