"""Price and dive: an integer plan from the pattern (master) LP over a pool of node patterns.

The pool starts with every node of the plans made so far (fluid, greedy and local-search
results: each a pattern, a candidate with pods per class) and every class's cheapest single
pattern. Column generation (greedy knapsack pricing at the LP's duals, :mod:`columns`) runs
``dive_rounds`` rounds on the whole problem; then each step of the dive solves the master LP
for the pods still uncovered (with ``dive_step_rounds`` more rounds of pricing for them, while
``dive_work`` lasts), takes the whole nodes of its solution (the columns at ``y >= 1``,
rounded down), or when there are none, one node of every column at ``y >=
dive_round_up`` (or the largest) as far as the limit rows allow, and repeats until every pod
is on a node. After ``dive_steps`` steps, the last solution is rounded up in one step (one node
of each column it uses that the limits allow, most used first, while its pods are needed).
Every node is a pattern that fits its candidate (capacity, per-node caps, zones and pools
through ``Problem.fit``, a host-sharing gang as one bundle), so the plan keeps every
constraint; the caller fills any pods left over and right-sizes the nodes
(:func:`~fleetshare.autoscaling.provisioner.greedy.greedy`). The planner may run a second
dive from the pool the first grew (``PlanBudget.dive_repeats``).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from fleetshare.autoscaling.provisioner.budget import PlanBudget, SafetyNet
from fleetshare.autoscaling.provisioner.columns import (
    Columns,
    _solve_lp,
    _take,
    add_singletons,
    column_generation,
)
from fleetshare.autoscaling.provisioner.packing import Packing
from fleetshare.autoscaling.provisioner.problem import Problem


def add_nodes(cols: Columns, pack: Packing) -> None:
    """Every node of ``pack`` with pods becomes a column (duplicates are skipped)."""
    for n in range(pack.n):
        if pack.counts[n].any():
            cols.add(int(pack.cand[n]), pack.counts[n])


def _rest(p: Problem, need: np.ndarray, head: np.ndarray) -> Problem:
    """The problem of the pods still needed (no pattern holds more of a class than that)."""
    limits = replace(p.limits, headroom=head.copy()) if len(p.limits) else p.limits
    return replace(
        p,
        demand=need.copy(),
        fit=np.minimum(p.fit, need[:, None]),
        upper=np.minimum(p.upper, np.maximum(need, 1)),
        limits=limits,
    )


def _round_up(
    p: Problem,
    pack: Packing,
    cols: Columns,
    y: np.ndarray,
    need: np.ndarray,
    least: float = 0.0,
) -> bool:
    """One node of each column ``y`` uses at least ``least`` (none that much: of the most used
    one) that the limits allow (most used first), taken together while their pods are needed.
    Returns whether a node was opened."""
    chosen = np.flatnonzero((y > 1e-9) & (y >= least - 1e-9))
    if not len(chosen) and (y > 1e-9).any():
        chosen = np.array([int(np.argmax(y))])
    trial = Packing(p)  # the headroom left after the nodes chosen so far
    trial.head = pack.head.copy()
    one = np.zeros(len(y))
    for k in chosen[np.argsort(-y[chosen], kind="stable")].tolist():
        if not trial.rooms()[cols.cand[k]]:
            continue
        trial.open(cols.cand[k], 1)
        one[k] = 1
    before = pack.n
    _take(pack, cols, one, need)
    return pack.n > before


def round_work(p: Problem) -> int:
    """What one pricing round costs in ``PlanBudget.dive_work``: classes x candidates."""
    return p.n_classes * len(p.candidates)


def pattern_dive(
    p: Problem,
    cols: Columns,
    budget: PlanBudget,
    net: SafetyNet,
    pi_res: np.ndarray,
    work_left: int,
) -> tuple[Packing, dict[str, float]]:
    """The dive (see the module docstring) from the pool ``cols`` (extended in place), with
    pricing rounds worth at most ``work_left`` (:func:`round_work` each). Returns the nodes
    (pods may be left uncovered, e.g. when the safety net fires) and work counts (steps,
    pricing rounds and their work, columns, the first master LP's value)."""
    add_singletons(p, cols)
    cg = replace(budget, lp_pricings=0, exact_pricings=0, cg_gap=0.0)
    pack = Packing(p)
    need = p.demand.copy()
    work = 0
    per_round = round_work(p)
    stats = {"dive_steps": 0.0, "dive_rounds": 0.0, "dive_lp": 0.0}
    y = np.zeros(0)
    while need.any() and not net.fired():
        first = stats["dive_steps"] == 0
        stats["dive_steps"] += 1
        rounds = budget.dive_rounds if first else budget.dive_step_rounds
        rounds = min(rounds, max(0, work_left - work) // max(per_round, 1))
        if rounds > 0:
            relax = column_generation(
                _rest(p, need, pack.head), cols, replace(cg, cg_rounds=rounds), net, 0.0, pi_res
            )
            work += relax.rounds * per_round
            stats["dive_rounds"] += relax.rounds
            y = relax.y
            if first:
                stats["dive_lp"] = relax.value
        else:
            solved = _solve_lp(p, cols, need, pack.head)
            y = solved[1] if solved is not None else np.zeros(0)
        y = np.concatenate([y, np.zeros(len(cols) - len(y))])
        if not (y > 1e-9).any():
            break
        if stats["dive_steps"] >= budget.dive_steps:
            _round_up(p, pack, cols, y, need)  # budget spent: the rest in one step
            break
        take = np.floor(y + 1e-6)  # within the limits, as the LP's solution is
        if take.any():
            _take(pack, cols, take, need)
        elif not _round_up(p, pack, cols, y, need, budget.dive_round_up):
            break  # no column the limits allow: the caller's greedy fills the rest
    pack.compact()
    stats["dive_columns"] = float(len(cols))
    stats["dive_work"] = float(work)
    return pack, stats
