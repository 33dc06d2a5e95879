"""Choose the cheapest set of new nodes for pending pods (pure, deterministic decisions).

The problem is variable-sized bin packing with prices, zones and limits. Pods are grouped into
*shapes* (same requests and constraints, :class:`PodShape`); a zone-constrained shape becomes one
*item* per zone (``topology.py``); items that pack identically are merged into *classes*. A
*candidate* is one way to buy a node: a pool, an instance type and an offering, or a capacity
reservation. Limits (node pools, account quotas, reservations: ``account_limits.py``) are rows
``L y <= headroom`` that no plan exceeds (every phase opens nodes through ``Packing``, which
allows none past the headroom). The modules, in the order :func:`plan_nodes` uses them:

- ``candidates``: candidates per pool and offering, compatibility, launched nodes' labels;
- ``problem``: the item x candidate problem in arrays, classes, dominated candidates dropped;
- ``fluid``: the fluid plan (the compact LP, taken in whole nodes pass by pass; more fluid
  plans from other candidate sets while the best is not within ``target_gap``, sharing LP
  solves of the same input) and its proven lower bound;
- ``greedy``: four greedy plans (cheapest per pod, first fit and even spread by capacity per
  dollar, constrained first), every node right-sized (``packing``);
- ``local_search``: move a node to a cheaper candidate (up to ``search_targets`` of them), or
  empty it, when its pods find room, directly or by swaps (a pod of another node makes way,
  onto the node being made cheaper or a third node); later passes visit the nodes the last
  one changed, then every node once more; run from the best plan and the other fluid plans;
  while the best plan is more than ``dive_gap`` above the bound (before and after the dive),
  a copy of it is searched again with rebalances (pods exchanged between nodes with room only
  in CPU and nodes with room only in memory, so the room becomes usable), kept when cheaper;
- ``bound``: lower bounds from resource prices, from the fluid LP's duals (checked over every
  candidate) and from column-generation duals;
- ``columns``: column generation (master LP with HiGHS, knapsack pricing: greedy, then one
  block LP, then exact knapsack MILPs for the candidates that bound the Farley ratio,
  ``knapsack``), LP rounding and a MILP over the columns, whose plans compete with the greedy
  one;
- ``dive``: price and dive over a pool of the node patterns of every plan so far, when the
  best plan is still more than ``dive_gap`` above the bound (on small problems after column
  generation and the MILP): column generation on the pool, then whole nodes of the master
  LP's solution taken step by step, re-priced for the pods left; filled, right-sized and
  improved by the local search, kept when cheaper;
- ``topology_check``: zone spreads trimmed to skew 1, gangs not placed in full removed;
- ``reasons``: why pods are left out (no fitting pool, or the limit that blocks them).

Every search is bounded by a work budget (:class:`PlanBudget`: passes, moves, swap work,
rounds, columns, LP pricings, exact knapsacks, rounding passes, dive steps and pricing work,
branch-and-bound nodes), never
by the clock, so
the same input gives the same plan on any machine. ``time_limit`` is only an outer safety net;
when it fires, ``Plan.time_limit_hit`` says so.
"""

from __future__ import annotations

from fleetshare.autoscaling.account_limits import AccountLimits
from fleetshare.autoscaling.provisioner.budget import PlanBudget
from fleetshare.autoscaling.provisioner.candidates import (
    CAPACITY_TYPE_LABEL,
    FAMILY_LABEL,
    GPU_NAME_LABEL,
    POOL_LABEL,
    Candidate,
    candidates_for,
    compatible,
    labels_ok,
    launch_labels,
    node_labels,
    offering_candidates,
    pool_taints,
)
from fleetshare.autoscaling.provisioner.planner import plan_nodes
from fleetshare.autoscaling.provisioner.result import Launch, Plan, PlannedNode
from fleetshare.autoscaling.topology import PodShape

_labels_ok = labels_ok  # the name tests/test_predicate.py imports

__all__ = [
    "CAPACITY_TYPE_LABEL",
    "FAMILY_LABEL",
    "GPU_NAME_LABEL",
    "POOL_LABEL",
    "AccountLimits",
    "Candidate",
    "Launch",
    "Plan",
    "PlanBudget",
    "PlannedNode",
    "PodShape",
    "candidates_for",
    "compatible",
    "labels_ok",
    "launch_labels",
    "node_labels",
    "offering_candidates",
    "plan_nodes",
    "pool_taints",
]
