"""``plan_nodes``: the control loop over the phases (see the package docstring)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

import numpy as np

from fleetshare.autoscaling.account_limits import AccountLimits
from fleetshare.autoscaling.cloud import Instance, Offering
from fleetshare.autoscaling.nodepool import NodePool
from fleetshare.autoscaling.provisioner.bound import most_nodes, resource_prices
from fleetshare.autoscaling.provisioner.budget import PlanBudget, SafetyNet
from fleetshare.autoscaling.provisioner.columns import (
    SMALL,
    Columns,
    Relaxation,
    add_singletons,
    column_generation,
    decode,
    milp_columns,
    round_columns,
    solve_milp,
)
from fleetshare.autoscaling.provisioner.dive import add_nodes, pattern_dive, round_work
from fleetshare.autoscaling.provisioner.fluid import Solves, fluid_packing
from fleetshare.autoscaling.provisioner.greedy import greedy
from fleetshare.autoscaling.provisioner.local_search import improve
from fleetshare.autoscaling.provisioner.packing import Packing
from fleetshare.autoscaling.provisioner.problem import Problem, build_problem
from fleetshare.autoscaling.provisioner.reasons import NOT_PLANNED, not_planned
from fleetshare.autoscaling.provisioner.result import Launch, Plan, PlannedNode
from fleetshare.autoscaling.provisioner.topology_check import enforce_topology
from fleetshare.autoscaling.topology import PodShape
from fleetshare.model.catalog import Catalog
from fleetshare.model.reason import Keyed

SMALL_PROBLEM = 20_000
"""Problems with at most this many (class, candidate) pairs always run column generation."""


def _finish(
    p: Problem, pack: Packing, plan: Plan, why: Mapping[int, Keyed], cover: np.ndarray
) -> None:
    """Reasons for pods left out, the planned nodes with their pods, launches and cost."""
    missing: dict[int, int] = {}
    for k, it in enumerate(p.items):
        if it.count > cover[k]:
            gone = (it.count - int(cover[k])) * int(p.unit[it.shape])
            missing[it.shape] = missing.get(it.shape, 0) + gone
    for s, n in sorted(missing.items()):
        plan.unplaceable[s] = not_planned(n, p.shapes[s].count, why.get(s, NOT_PLANNED))
    # per node, which shapes: hand each class's pods on the nodes to its items in order
    per_node: list[dict[int, int]] = [{} for _ in range(pack.n)]
    for c, members in enumerate(p.class_items):
        nodes = np.flatnonzero(pack.counts[: pack.n, c])
        amounts = pack.counts[nodes, c].copy()
        pos = 0
        for k in members:
            want, s = int(cover[k]), p.items[k].shape
            while want > 0 and pos < len(nodes):
                t = min(want, int(amounts[pos]))
                per_node[nodes[pos]][s] = per_node[nodes[pos]].get(s, 0) + t * int(p.unit[s])
                amounts[pos] -= t
                want -= t
                if amounts[pos] == 0:
                    pos += 1
    for n in range(pack.n):
        cand = p.candidates[int(pack.cand[n])]
        o = cand.offering
        plan.nodes.append(
            PlannedNode(
                cand.pool,
                cand.instance.name,
                o.zone,
                o.capacity_type,
                o.price_per_hour,
                tuple(sorted(per_node[n].items())),
                cand.reservation,
            )
        )
    counts: dict[tuple[str, str, str, str, float], int] = {}
    for node in plan.nodes:
        key = (node.pool, node.instance_type, node.zone, node.capacity_type, node.price_per_hour)
        counts[key] = counts.get(key, 0) + 1
    plan.launches = sorted(
        (Launch(*key[:4], n, key[4]) for key, n in counts.items()),
        key=lambda la: (la.pool, la.instance_type, la.zone, la.capacity_type, la.price_per_hour),
    )
    plan.hourly_cost = sum(node.price_per_hour for node in plan.nodes)


def _gap(p: Problem, pack: Packing, bound: float) -> float:
    return (_score(p, pack) - bound) / max(bound, 1e-12)


def _score(p: Problem, pack: Packing) -> float:
    short = np.maximum(p.demand - pack.covered(), 0).sum()
    return float(p.obj[pack.cand[: pack.n]].sum()) + p.penalty * float(short)


def _rebalanced(
    p: Problem,
    best: Packing,
    budget: PlanBudget,
    net: SafetyNet,
    work: dict[str, float],
    costs: dict[str, float],
    key: str,
) -> Packing:
    """``best``, or a copy of it improved by the local search with its rebalances
    (``PlanBudget.search_rebalances``) when that is cheaper."""
    if not budget.search_rebalances:
        return best
    polished = best.copy()
    work["search_moves"] += improve(p, polished, budget, net)
    costs[key] = _score(p, polished)
    return polished if _score(p, polished) < _score(p, best) - 1e-9 else best


class _Search:
    """One plan's search over the phases, in order: the plans made so far, the best one and
    the bound, and the figures ``Plan.stats`` reports."""

    def __init__(self, p: Problem, budget: PlanBudget, net: SafetyNet, target_gap: float) -> None:
        self.p, self.budget, self.net, self.target_gap = p, budget, net, target_gap
        self.clock = {"build_s": net.elapsed()}
        self.res_bound, self.pi_res, self.lam = resource_prices(p)
        self.bound = self.res_bound
        self.plans: list[tuple[str, Packing]] = []
        self.variants: list[tuple[str, Packing]] = []  # fluid plans other than the cheapest
        self.starts: list[tuple[str, Packing]] = []  # where the local search ran from
        self.costs: dict[str, float] = {}
        self.work: dict[str, float] = {}
        self.solves: Solves = {}  # the other fluid plans often start with the same LP solves
        self.fluid: Packing | None = None
        self.fluid_bound = 0.0
        self.near = self.bound  # what "close to the bound" means for the choices below
        self.small = p.n_classes * len(p.candidates) <= SMALL_PROBLEM
        self.pool = Columns()  # every node of every plan: the pool of patterns for the dive
        self.plain = replace(budget, search_rebalances=0)  # starts and dives: moves and swaps
        self.relax = Relaxation(bound=self.bound)
        self.cols = Columns()
        self.best_method = "none"
        self.best = Packing(p)

    def lap(self, name: str) -> None:
        self.clock[name] = self.net.elapsed() - sum(self.clock.values())

    def fluid_plans(self) -> None:
        """The fluid plan, and more from other candidate sets and passes while the best is
        not close."""
        p, budget, net = self.p, self.budget, self.net
        self.fluid, self.fluid_bound = fluid_packing(p, self.lam, budget, net, self.solves)
        self.near = max(self.bound, self.fluid_bound)
        if self.fluid is not None:
            self.plans.append(("fluid", greedy(p, "pod", start=self.fluid)))
            self.costs["cost_fluid"] = _score(p, self.plans[-1][1])
            for i, (slack, passes, most) in enumerate(budget.fluid_variants):
                if _gap(p, self.plans[0][1], self.near) <= self.target_gap or net.fired():
                    break
                other = replace(
                    budget, fluid_slack=slack, fluid_passes=passes, fluid_candidates=most
                )
                alt, _ = fluid_packing(p, self.lam, other, net, self.solves)
                if alt is not None:
                    self._fluid_variant(i, greedy(p, "pod", start=alt))
        self.lap("fluid_s")

    def _fluid_variant(self, i: int, pack: Packing) -> None:
        """Another fluid plan: the first of the plans when cheapest, else a variant."""
        self.costs[f"cost_fluid_{i + 1}"] = _score(self.p, pack)
        if _score(self.p, pack) < _score(self.p, self.plans[0][1]) - 1e-9:
            self.variants.append(self.plans[0])
            self.plans[0] = ("fluid", pack)
        else:
            self.variants.append(("fluid", pack))

    def greedy_plans(self) -> None:
        """The four greedy plans: without a fluid plan, on small problems, or when the fluid
        plan is not close."""
        p = self.p
        if not self.plans or self.small or _gap(p, self.plans[0][1], self.near) > self.target_gap:
            for i, rule in enumerate(("pod", "big", "spread", "balance")):
                self.plans.append(("greedy", greedy(p, rule)))
                self.costs[f"cost_greedy_{i}"] = _score(p, self.plans[-1][1])
            self.lap("greedy_s")

    def improve_starts(self) -> None:
        """Local search from the best start and the other fluid plans (on small problems also
        from the best greedy one, the plain path's start: a worse start sometimes ends
        cheaper); the best goes on with rebalances while it is not close."""
        p, plans = self.p, self.plans
        greedy_best = min(
            (mp for mp in plans if mp[0] == "greedy"),
            key=lambda mp: _score(p, mp[1]),
            default=None,
        )
        if self.small and self.fluid is not None and greedy_best is not None:
            self.starts = [plans[0], greedy_best, *self.variants]
        else:
            self.starts = [min(plans, key=lambda mp: _score(p, mp[1])), *self.variants]
        for _, pack in [*plans, *self.variants]:
            add_nodes(self.pool, pack)
        moves = sum(improve(p, pack, self.plain, self.net) for _, pack in self.starts)
        self.work["search_moves"] = float(moves)
        self.best_method, self.best = min(self.starts, key=lambda mp: _score(p, mp[1]))
        self.costs["cost_improved"] = _score(p, self.best)
        # a copy: the other starts stay as they were, and the dive's pool gets both
        if _gap(p, self.best, self.near) > self.budget.dive_gap and not self.net.fired():
            self.best = self._rebalanced("cost_rebalanced")
        self.lap("improve_s")

    def _rebalanced(self, key: str) -> Packing:
        return _rebalanced(self.p, self.best, self.budget, self.net, self.work, self.costs, key)

    def _compete(self, method: str, pack: Packing, key: str) -> None:
        """``pack`` (recorded as ``key``) becomes the best when cheaper."""
        self.costs[key] = _score(self.p, pack)
        if _score(self.p, pack) < _score(self.p, self.best) - 1e-9:
            self.best_method, self.best = method, pack

    def column_plans(self) -> None:
        """Column generation, LP rounding and the MILP, for small problems, or when there is
        no fluid plan and the best is not close (on large ones the fluid plan is closer than
        LP rounding, and faster)."""
        p, budget, net = self.p, self.budget, self.net
        if (
            not (
                self.small
                or (self.fluid is None and _gap(p, self.best, self.near) > self.target_gap)
            )
            or net.fired()
        ):
            return
        for _, pack in self.plans:
            for n in range(pack.n):
                self.cols.add(int(pack.cand[n]), pack.counts[n])
        add_singletons(p, self.cols)
        self.relax = column_generation(p, self.cols, budget, net, self.bound, self.pi_res)
        self.bound = max(self.bound, self.relax.bound)
        self.lap("lp_s")
        if self.relax.y.size:
            rounded = round_columns(p, self.cols, self.relax.y, budget.rounding_passes)
            self._compete("lp-rounding", greedy(p, "spread", start=rounded), "cost_lp_rounding")
        small = self.small or p.n_classes <= SMALL
        if small and _gap(p, self.best, self.bound) > 1e-6 and not net.fired():
            chosen = milp_columns(p, self.cols, self.relax, budget.milp_columns)
            y = solve_milp(p, chosen, budget.milp_nodes, net)
            if y is not None:
                pack = greedy(p, "spread", start=decode(p, chosen, y))
                self._compete("milp", pack, "cost_milp")
        self.lap("milp_s")
        if self.best_method in ("lp-rounding", "milp"):
            self.work["search_moves"] += improve(p, self.best, budget, net)
            self.lap("improve2_s")

    def dives(self) -> None:
        """Price and dive over the pool of every plan's nodes, while the best is not close
        (after column generation and the MILP on small problems, which often close the
        gap)."""
        p, budget, net = self.p, self.budget, self.net
        if _gap(p, self.best, max(self.near, self.bound)) <= budget.dive_gap or net.fired():
            return
        for _, pack in self.starts:
            add_nodes(self.pool, pack)
        for j, rows, vals in zip(self.cols.cand, self.cols.rows, self.cols.vals, strict=True):
            pattern = np.zeros(p.n_classes, np.int64)
            pattern[rows] = vals.astype(np.int64)
            self.pool.add(j, pattern)  # the columns generated above
        # each dive may price its share of the work; another dive from the pool the last one
        # grew (its nodes after the local search included) while the plan is not close and
        # its share pays for its first rounds (so on large problems there is one)
        share = budget.dive_work // max(budget.dive_repeats, 1)
        for i in range(budget.dive_repeats):
            if i and (
                _gap(p, self.best, max(self.near, self.bound)) <= budget.dive_gap
                or share < budget.dive_rounds * round_work(p)
                or net.fired()
            ):
                break
            self._dive(i, share)
        self.lap("dive_s")
        if _gap(p, self.best, max(self.near, self.bound)) > budget.dive_gap and not net.fired():
            self.best = self._rebalanced("cost_dive_rebalanced")

    def _dive(self, i: int, share: int) -> None:
        """One price-and-dive plan from the pool, improved; the pool gets its nodes."""
        p = self.p
        dived, dive_work = pattern_dive(p, self.pool, self.budget, self.net, self.pi_res, share)
        for key, value in dive_work.items():
            self.work[key] = self.work.get(key, 0.0) + value if key != "dive_lp" else value
        dived = greedy(p, "spread", start=dived)
        self.costs[f"cost_dive_{i + 1}"] = _score(p, dived)
        self.work["search_moves"] += improve(p, dived, self.plain, self.net)
        add_nodes(self.pool, dived)
        self._compete("dive", dived, f"cost_dive_{i + 1}_improved")

    def finish(self, plan: Plan) -> None:
        """The best plan's nodes and reasons, its method, lower bound and figures."""
        p, net, best = self.p, self.net, self.best
        net.fired()  # a solve the time limit cut short inside HiGHS is reported too
        why, cover = enforce_topology(p, best)
        _finish(p, best, plan, why, cover)
        plan.method = self.best_method + (" (cut short by the time limit)" if net.hit else "")
        plan.time_limit_hit = net.hit
        # the bound is on objective prices; free reservations cost a tiny amount there
        token = p.obj - p.price
        ymax = np.minimum(most_nodes(p), float(p.demand.sum()))
        nudge = float((token * np.where(token > 0, ymax, 0)).sum())
        uncovered = float(np.maximum(p.demand - best.covered(), 0).sum())
        bound = self.bound
        if uncovered == 0:  # the fluid LP's bound holds for plans that cover every pod
            bound = max(bound, self.fluid_bound)
        plan.lower_bound = max(0.0, bound - p.penalty * uncovered - nudge)
        plan.bound_is_proven = uncovered == 0 and plan.lower_bound > 0
        relax = self.relax
        plan.stats = {
            "classes": p.n_classes,
            "items": len(p.items),
            "candidates": len(p.candidates),
            "columns": len(self.cols),
            "rounds": relax.rounds,
            "knapsacks": relax.knapsacks,
            "lp_value": relax.value,
            "lp_converged": float(relax.exact),
            "resource_bound": self.res_bound,
            "fluid_bound": self.fluid_bound,
            **self.work,
            **self.costs,
            "time_limit_hit": float(net.hit),
            **self.clock,
        }


def plan_nodes(
    shapes: Sequence[PodShape],
    pools: Sequence[NodePool],
    catalog: Catalog,
    offerings: Sequence[Offering],
    *,
    pool_usage: Mapping[str, Mapping[str, int]] | None = None,
    time_limit: float = 10.0,
    account_limits: AccountLimits | None = None,
    running_instances: Sequence[Instance] = (),
    target_gap: float = 0.02,
    budget: PlanBudget | None = None,
) -> Plan:
    """The cheapest launches that fit every shape's pods (see the package docstring).

    ``account_limits``: vCPU quotas, per-type counts and capacity reservations of the cloud
    account; ``running_instances``: the instances that exist now (their usage counts against
    those limits). ``pool_usage``: per pool, what its existing nodes already use of its limits
    (milli-units; ``nodes`` as a count). ``target_gap``: when the fluid plan is already this
    close to the lower bound, no further fluid plans are made (``PlanBudget.fluid_variants``)
    and the four greedy plans are skipped; column generation and the
    MILP run on small problems, and on others only without a fluid plan when the best plan is
    not this close. When the best plan is then still more than ``PlanBudget.dive_gap`` (1 %)
    above the bound, a price-and-dive plan from the pool of every plan's nodes competes
    (:mod:`~fleetshare.autoscaling.provisioner.dive`). ``budget``: how
    much search each phase may do (:class:`PlanBudget`); the plan depends only on the input and
    the budget. ``time_limit`` (seconds) is an outer safety net:
    if it fires, the search stops where it is and ``Plan.time_limit_hit`` is set.
    """
    net = SafetyNet(time_limit)
    plan = Plan()
    p = build_problem(
        shapes,
        pools,
        catalog,
        offerings,
        pool_usage or {},
        account_limits,
        running_instances,
        plan,
    )
    if p is not None:
        search = _Search(p, budget or PlanBudget(), net, target_gap)
        search.fluid_plans()
        search.greedy_plans()
        search.improve_starts()
        search.column_plans()
        search.dives()
        search.finish(plan)
    plan.seconds = net.elapsed()
    return plan
