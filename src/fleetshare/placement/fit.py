"""Fit gangs of pods onto nodes: all pods of a workload, or none.

Free capacity is one integer matrix (nodes x resources, milli-units) so that "how many of
these pods fit on each node" is a single vectorised step. A pod set that fits on one node goes
to the tightest such node (best fit); a larger one is spread over the roomiest nodes first so
that a gang uses as few nodes as possible.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from fleetshare.model.node import Node
from fleetshare.model.workload import PodSet
from fleetshare.placement.predicate import may_run_on
from fleetshare.placement.topology import constraint, describe_level, domain_of, levels_up_to


def pod_may_run_on(podset: PodSet, node: Node) -> bool:
    """A pod of ``podset`` may run on ``node`` (labels, affinity, taints; not resources)."""
    return may_run_on(
        node.all_labels(), node.taints, podset.node_selector, podset.tolerations, podset.affinity
    )


IntArray = npt.NDArray[np.int64]
PlacementPlan = list[list[tuple[int, int]]]
"""Per pod set, (node index, pod count) pairs."""

_BIG = np.iinfo(np.int64).max


@dataclass(frozen=True, slots=True)
class NoFit:
    """Why a pod set does not fit."""

    podset: str
    message: str


class NodeFit:
    """Free resources of the schedulable nodes, with gang placement."""

    def __init__(
        self,
        nodes: Sequence[Node],
        flavor_of: Mapping[str, str | None],
        not_on_nodes: frozenset[str] = frozenset(),
    ) -> None:
        """``not_on_nodes``: resources counted as quota only, never asked of a node."""
        self.not_on_nodes = not_on_nodes
        # a flavor's nodes are contiguous rows, so its block is a slice, not a gather
        ready = [n for n in nodes if n.schedulable]
        first_seen: dict[str | None, int] = {}
        for n in ready:
            first_seen.setdefault(flavor_of.get(n.name), len(first_seen))
        self.nodes = sorted(ready, key=lambda n: first_seen[flavor_of.get(n.name)])
        self.index = {n.name: i for i, n in enumerate(self.nodes)}
        names: dict[str, int] = {}
        for node in self.nodes:
            for resource in node.allocatable:
                names.setdefault(resource, len(names))
        self.resources = names
        self.allocatable: IntArray = np.zeros((len(self.nodes), max(1, len(names))), np.int64)
        for i, node in enumerate(self.nodes):
            for resource, amount in node.allocatable.items():
                self.allocatable[i, names[resource]] = amount
        self.free: IntArray = self.allocatable.copy()
        self.flavor = [flavor_of.get(n.name) for n in self.nodes]
        by_flavor: dict[str | None, list[int]] = {}
        for i, flavor in enumerate(self.flavor):
            by_flavor.setdefault(flavor, []).append(i)
        self._by_flavor = {f: np.array(ix, np.int64) for f, ix in by_flavor.items()}
        self._eligible: dict[tuple[object, ...], IntArray] = {}
        self._domains: dict[str, IntArray] = {}
        self._vectors: dict[int, tuple[Mapping[str, int], tuple[IntArray, IntArray] | None]] = {}
        self._flavor_free: dict[str | None, IntArray] = {
            f: self.free[ix].sum(axis=0) for f, ix in self._by_flavor.items()
        }

    def fork(self) -> NodeFit:
        """An independent copy of the free space; the nodes and caches are shared."""
        new = object.__new__(NodeFit)
        new.nodes = self.nodes
        new.index = self.index
        new.resources = self.resources
        new.not_on_nodes = self.not_on_nodes
        new.allocatable = self.allocatable
        new.free = self.free.copy()
        new.flavor = self.flavor
        new._by_flavor = self._by_flavor
        new._eligible = self._eligible
        new._domains = self._domains
        new._vectors = self._vectors
        new._flavor_free = {f: totals.copy() for f, totals in self._flavor_free.items()}
        return new

    def flavor_free(self, fr: tuple[str, str]) -> int:
        """Free amount of a resource summed over a flavor's schedulable nodes."""
        col = self.resources.get(fr[1])
        totals = self._flavor_free.get(fr[0])
        return 0 if col is None or totals is None else int(totals[col])

    # -- queries ---------------------------------------------------------------------------

    def eligible(self, flavor: str, podset: PodSet) -> IntArray:
        """Indices of the flavor's nodes whose labels and taints admit the pod set."""
        key = (
            flavor,
            tuple(sorted(podset.node_selector.items())),
            podset.tolerations,
            podset.affinity,
        )
        found = self._eligible.get(key)
        if found is None:
            candidates = self._by_flavor.get(flavor, np.zeros(0, np.int64))
            ok = [i for i in candidates.tolist() if pod_may_run_on(podset, self.nodes[i])]
            found = np.array(ok, np.int64)
            self._eligible[key] = found
        return found

    def domain_ids(self, level: str) -> IntArray:
        """Per node, the id of its domain at ``level`` (ids in node order of first sight)."""
        found = self._domains.get(level)
        if found is None:
            ids: dict[tuple[str, ...], int] = {}
            found = np.array(
                [ids.setdefault(domain_of(n.all_labels(), level), len(ids)) for n in self.nodes],
                np.int64,
            )
            self._domains[level] = found
        return found

    def _vector(self, requests: Mapping[str, int]) -> tuple[IntArray, IntArray] | None:
        """Columns and amounts of the positive requests (None: a resource no node has);
        cached per requests mapping (read only)."""
        found = self._vectors.get(id(requests))
        if found is None or found[0] is not requests:
            found = self._vectors[id(requests)] = (requests, self._make_vector(requests))
        return found[1]

    def _make_vector(self, requests: Mapping[str, int]) -> tuple[IntArray, IntArray] | None:
        cols, amounts = [], []
        for resource, amount in requests.items():
            if amount <= 0 or resource in self.not_on_nodes:
                continue
            col = self.resources.get(resource)
            if col is None:
                return None
            cols.append(col)
            amounts.append(amount)
        return np.array(cols, np.int64), np.array(amounts, np.int64)

    def _per_node(self, rows: IntArray, vec: tuple[IntArray, IntArray], free: IntArray) -> IntArray:
        cols, amounts = vec
        if len(cols) == 0 or len(rows) == 0:
            return np.full(len(rows), _BIG, np.int64)
        start, stop = int(rows[0]), int(rows[-1]) + 1
        contiguous = stop - start == len(rows)  # then slice the rows (a view), not gather them
        block = free[start:stop][:, cols] if contiguous else free[np.ix_(rows, cols)]
        counts: IntArray = (block // amounts).min(axis=1)
        return counts

    def place(
        self, flavors: Sequence[str], podsets: Sequence[PodSet], explain: bool = True
    ) -> PlacementPlan | NoFit:
        """A placement of every pod set on its flavor's nodes, or why there is none.

        ``explain=False`` skips composing the reason (for searches that only need yes/no).
        """
        plan: PlacementPlan = []
        touched: dict[int, IntArray] = {}
        for flavor, podset in zip(flavors, podsets, strict=True):
            rows = self.eligible(flavor, podset)
            if len(rows) == 0:
                return NoFit(
                    podset.name,
                    f"no schedulable {flavor} node admits pod set "
                    f"{podset.name!r} (node selector / taints)",
                )
            vec = self._vector(podset.requests)
            if vec is None:
                missing = [
                    r
                    for r, amount in podset.requests.items()
                    if amount > 0 and r not in self.resources and r not in self.not_on_nodes
                ]
                return NoFit(podset.name, f"no node offers {', '.join(missing)}")
            free = self.free
            if touched:
                free = self.free.copy()
                for i, used in touched.items():
                    free[i] -= used
            counts = self._per_node(rows, vec, free)
            level, required = constraint(podset.required_topology, podset.preferred_topology)
            chosen = None
            if level is not None:
                chosen = self._choose_in_domain(rows, counts, podset.count, level)
            if chosen is None and not required:
                chosen = _choose(rows, counts, podset.count)
            if chosen is None:
                why = ""
                if explain:
                    why = self._why_not(flavor, podset, rows, vec, counts)
                    if level is not None and required and "larger than" not in why:
                        why = (
                            f"no single {describe_level(level)} of {flavor} nodes has room for "
                            f"all {podset.count} pods of {podset.name!r} (required topology "
                            f"{level}); {why}"
                        )
                return NoFit(podset.name, why)
            full = np.zeros(self.free.shape[1], np.int64)
            full[vec[0]] = vec[1]
            for i, n in chosen:
                touched[i] = touched.get(i, np.zeros_like(full)) + full * n
            plan.append(chosen)
        return plan

    def _choose_in_domain(
        self, rows: IntArray, counts: IntArray, wanted: int, level: str
    ) -> list[tuple[int, int]] | None:
        """All ``wanted`` pods in one domain of ``level``, the tightest that holds them (one
        node, then each wider level up to ``level``); None when no domain does."""
        capped = np.minimum(counts, wanted)
        if int(capped.sum()) < wanted:
            return None
        for lv in levels_up_to(level):
            dom = self.domain_ids(lv)[rows]
            room = np.bincount(dom, weights=capped.astype(np.float64))
            holds = np.flatnonzero(room >= wanted)
            if len(holds):
                best = holds[int(np.argmin(room[holds]))]
                inside = dom == best
                return _choose(rows[inside], counts[inside], wanted)
        return None

    def _why_not(
        self,
        flavor: str,
        podset: PodSet,
        rows: IntArray,
        vec: tuple[IntArray, IntArray],
        counts: IntArray,
    ) -> str:
        room = int(np.minimum(counts, podset.count).sum())
        empty = self._per_node(rows, vec, self.allocatable)
        if int(empty.max(initial=0)) == 0:
            return f"a pod of {podset.name!r} is larger than any {flavor} node ({len(rows)} nodes)"
        return f"{flavor} nodes have room for {room} of {podset.count} pods of {podset.name!r} now"

    # -- changes ---------------------------------------------------------------------------

    def apply(
        self, podsets: Sequence[PodSet], plan: Iterable[Sequence[tuple[int, int]]], sign: int
    ) -> None:
        """Take (``sign=1``) or give back (``-1``) the resources of a placement."""
        for podset, pairs in zip(podsets, plan, strict=True):
            vec = self._vector(podset.requests)
            if vec is None:
                continue
            cols, amounts = vec
            for i, n in pairs:
                self.free[i, cols] -= sign * amounts * n
                self._flavor_free[self.flavor[i]][cols] -= sign * amounts * n

    def apply_all(
        self, placements: Iterable[tuple[Sequence[PodSet], Iterable[Sequence[tuple[int, int]]]]]
    ) -> None:
        """:meth:`apply` (``sign=1``) of many placements, in one array operation."""
        rows: list[int] = []
        cols: list[int] = []
        amounts: list[int] = []
        for podsets, plan in placements:
            for podset, pairs in zip(podsets, plan, strict=True):
                vec = self._vector(podset.requests)
                if vec is None:
                    continue
                vc, va = vec
                for i, n in pairs:
                    rows.extend([i] * len(vc))
                    cols.extend(vc.tolist())
                    amounts.extend((va * n).tolist())
        if not rows:
            return
        taken = np.zeros_like(self.free)
        np.add.at(taken, (np.array(rows, np.int64), np.array(cols, np.int64)), amounts)
        self.free -= taken
        for flavor, ix in self._by_flavor.items():
            self._flavor_free[flavor] -= taken[ix].sum(axis=0)

    def plan_of(self, placement: Sequence[Sequence[tuple[str, int]]]) -> PlacementPlan:
        """Node names to indices, dropping nodes that are no longer schedulable."""
        return [[(self.index[name], n) for name, n in ps if name in self.index] for ps in placement]

    def names(self, plan: PlacementPlan) -> tuple[tuple[tuple[str, int], ...], ...]:
        """Indices back to node names."""
        return tuple(tuple((self.nodes[i].name, n) for i, n in ps) for ps in plan)


def _choose(rows: IntArray, counts: IntArray, wanted: int) -> list[tuple[int, int]] | None:
    """Best fit for a pod set that fits one node; else fewest nodes, roomiest first."""
    if int(np.minimum(counts, wanted).sum()) < wanted:
        return None
    single = np.flatnonzero(counts >= wanted)
    if len(single):
        best = single[int(np.argmin(counts[single]))]
        return [(int(rows[best]), wanted)]
    order = np.argsort(-counts, kind="stable")
    chosen: list[tuple[int, int]] = []
    left = wanted
    for j in order.tolist():
        take = min(int(counts[j]), left)
        if take <= 0:
            break
        chosen.append((int(rows[j]), take))
        left -= take
        if left == 0:
            break
    return chosen
