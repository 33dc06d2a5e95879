"""How much work a plan may take (:class:`PlanBudget`), and the outer time limit
(:class:`SafetyNet`) that cuts a plan short only when the budget was sized too large for the
machine, and is then reported on the plan."""

from __future__ import annotations

import time
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class PlanBudget:
    """Work limits of :func:`~fleetshare.autoscaling.provisioner.plan_nodes`.

    Counted in steps of the algorithms, not seconds: the same input and budget give the same
    plan on any machine and under any load.
    """

    fluid_slack: float = 0.03
    """Fluid plan: candidates priced at most this fraction above their capacity's value at the
    resource prices take part (see ``fluid``)."""
    fluid_candidates: int = 100
    """Fluid plan: made only when at most this many candidates are within ``fluid_slack`` of
    the frontier (more: prices nearly proportional to size, where the greedy plans do)."""
    fluid_pricing: int = 3
    """Fluid plan: re-solves of the first LP, each with the candidates its duals value above
    their price added (they lower the LP, and without them the bound is scaled down)."""
    fluid_passes: int = 4
    """Fluid plan: LP solves, each for the pods the whole nodes taken so far leave."""
    fluid_variants: tuple[tuple[float, int, int], ...] = ((0.06, 10, 100), (0.15, 4, 200))
    """Fluid plan: further plans, as (``fluid_slack``, ``fluid_passes``, ``fluid_candidates``),
    made in turn while the best so far is more than ``target_gap`` above the bound (rounding
    whole nodes is sensitive to the candidate set; each is improved by the local search and
    the cheapest plan is kept)."""
    search_passes: int = 50
    """Local search: passes per run (after an improving pass, the next visits only the nodes
    it changed; a run also ends at a pass over every node that finds no improvement)."""
    search_targets: int = 3
    """Local search: cheaper candidates tried per node (the next cheaper one, then those its
    pods overflow least), before emptying it."""
    search_moves: int = 100_000
    """Local search: node moves tried per run (to a cheaper candidate, or emptying it)."""
    search_swap_work: int = 6_000_000
    """Local search: swaps a run may try, counted as nodes x classes each (what one swap
    examines), so a larger problem tries fewer. A swap makes room for a pod that fits
    nowhere: a pod of another node moves to the node being made cheaper, or to a third node.
    Once spent, moves go on without swaps."""
    search_swaps_per_move: int = 8
    """Local search: swaps per node move at most (a move that needs more is not made)."""
    search_rebalances: int = 2
    """Local search: times a run exchanges pods between nodes with room in different
    resources (``local_search.balance``) when no move is left, and searches again. The
    planner's runs from the starts and the dives search without; the best plan is searched
    again with them while it is more than ``dive_gap`` above the bound (before the dive, and
    after it)."""
    search_balance_swaps: int = 200
    """Local search: exchanges per rebalance at most."""
    search_rebalance_swap_work: int = 6_000_000
    """Local search: the swap budget (as ``search_swap_work``) of the search after each
    rebalance."""
    cg_rounds: int = 50
    """Column generation: rounds, each one master-LP solve and one pricing step."""
    cg_columns: int = 20_000
    """Column generation: columns the master LP may hold; generation stops once it holds more."""
    cg_per_round: int = 400
    """Column generation: new columns per round at most (the lowest reduced costs per dollar)."""
    cg_round_work: int = 40_000
    """Column generation: new columns per round times classes at most (a larger problem adds
    fewer columns a round, at least 40, so its master LP stays small)."""
    cg_gap: float = 0.002
    """Column generation stops once the master LP's value is this close to the lower bound
    (relative)."""
    cg_smoothing: float = 0.5
    """Column generation prices at this mix of the resource prices and the LP's duals first
    (0: the LP's duals alone), and at the LP's duals when the mix finds no column."""
    lp_pricings: int = 12
    """Column generation: rounds that price every knapsack as an LP (when the greedy pricing
    finds no column); each gives a lower bound."""
    lp_pricing_pairs: int = 40_000
    """LP pricing only for problems with at most this many (class, candidate) pairs that fit
    (its block LP grows with them)."""
    lp_pricing_always: bool = False
    """Column generation: price every knapsack as an LP (and exactly, within
    ``exact_pricings``) every round, not only when the greedy pricing finds no column (slower
    rounds, far fewer of them; for proving how tight a bound is)."""
    exact_pricings: int = 20
    """Column generation: knapsacks solved exactly as MILPs (:mod:`knapsack`) in all, after
    each LP pricing, for the candidates whose LP value bounds the Farley ratio; they tighten
    the lower bound and give the best patterns."""
    knapsack_nodes: int = 200
    """HiGHS branch-and-bound nodes per exact knapsack (when they run out, its dual bound
    still bounds the knapsack)."""
    rounding_passes: int = 20
    """LP rounding: master LP solves for the pods the whole nodes taken so far leave."""
    milp_columns: int = 60
    """The MILP chooses among at most this many columns: those the LP solution uses, then the
    lowest reduced costs."""
    dive_gap: float = 0.01
    """Price and dive (:mod:`dive`) runs when the best plan after the local search is more
    than this far above the bound (relative)."""
    dive_rounds: int = 10
    """Price and dive: column-generation rounds on the whole problem before the first step."""
    dive_step_rounds: int = 1
    """Price and dive: column-generation rounds for the pods left, at every later step."""
    dive_work: int = 1_500_000
    """Price and dive: pricing rounds in all, counted as classes x candidates each (a larger
    problem prices fewer rounds), shared equally by the ``dive_repeats`` dives; once a dive
    has spent its share, its steps re-solve the LP over the pool alone."""
    dive_repeats: int = 2
    """Price and dive: dives at most; another starts from the pool the last one grew (its
    plan after the local search included) while the best plan is more than ``dive_gap`` above
    the bound and its share of ``dive_work`` pays for ``dive_rounds`` rounds (at 2,000
    pods of the real-catalog benchmark it does, at 20,000 not)."""
    dive_steps: int = 30
    """Price and dive: steps at most (master LP solves); at the last, what the LP still uses
    is rounded up in one go."""
    dive_round_up: float = 0.6
    """Price and dive: a step without whole nodes takes one node of every column at least
    this much used (else of the most used one)."""
    milp_nodes: int = 200
    """HiGHS branch-and-bound nodes of the MILP over those columns."""


class SafetyNet:
    """The outer time limit. It takes no part in a decision unless it fires; then the search
    stops where it is and ``hit`` records it (``Plan.time_limit_hit``)."""

    def __init__(self, seconds: float) -> None:
        self.started = time.perf_counter()
        self.deadline = self.started + seconds
        self.hit = False

    def fired(self) -> bool:
        """True (and recorded) once the time limit has passed."""
        if not self.hit and time.perf_counter() > self.deadline:
            self.hit = True
        return self.hit

    def left(self) -> float:
        """Seconds left (for HiGHS's own time limit, the same safety net inside a solve)."""
        return max(0.01, self.deadline - time.perf_counter())

    def elapsed(self) -> float:
        return time.perf_counter() - self.started
