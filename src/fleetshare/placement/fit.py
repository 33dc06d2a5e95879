"""Fit gangs of pods onto nodes: all pods of a workload, or none.

Free capacity is one integer matrix (nodes x resources, milli-units) so that "how many of
these pods fit on each node" is a single vectorised step. A pod asking for a share of a GPU
fits inside one physical GPU of a node, and whole GPUs must be fully free
(:mod:`fleetshare.placement.gpu_slots`); that per-GPU state exists only once a share is
placed, so work without shares keeps the one-matrix path.

Placement policies (``cluster.placement``, :data:`PLACEMENTS`):

- ``default``: a pod set that fits on one node goes to the tightest such node (fewest of its
  pods still fit there; ties to the first in node order); a larger one is spread over the
  roomiest nodes first so that a gang uses as few nodes as possible. A share goes to the
  fullest GPU of the node that holds it, else the node's first fully free GPU.
- ``first_fit``, ``best_fit``, ``fgd``: pod by pod, the policy of the same name in
  :mod:`fleetshare.placement.gpu_share` chooses the node and the GPU among the nodes where
  the pod fits (every resource, labels, taints): the first node in node order; the node
  left with least free GPU, then least free CPU, then node order, and the fullest GPU that
  fits; the node and GPU whose fragmentation grows least against the *target workload*
  (:meth:`NodeFit.set_target`: the cycle's running and pending pods), ties as best fit.

Nodes are in the order the caller gives them, grouped by flavor; no choice depends on names.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from fleetshare.model.catalog import GPU_PRODUCT_LABEL
from fleetshare.model.node import Node
from fleetshare.model.placement import PLACEMENTS
from fleetshare.model.reason import Gist
from fleetshare.model.resources import CPU, GPU, MEMORY
from fleetshare.model.workload import PodSet
from fleetshare.placement.gpu_share import (
    GPU_MILLI,
    GpuCluster,
    GpuNode,
    PodShape,
    Policy,
    TaskDistribution,
    make_policy,
)
from fleetshare.placement.gpu_slots import GpuShares, gpu_need, request_problem
from fleetshare.placement.predicate import may_run_on
from fleetshare.placement.topology import constraint, describe_level, domain_of, levels_up_to


def pod_may_run_on(podset: PodSet, node: Node) -> bool:
    """A pod of ``podset`` may run on ``node`` (labels, affinity, taints; not resources)."""
    return may_run_on(
        node.all_labels(), node.taints, podset.node_selector, podset.tolerations, podset.affinity
    )


IntArray = npt.NDArray[np.int64]

ShareGpus = tuple[tuple[int, ...], ...]
"""For one pod set, per (node, count) pair, the GPU index of each pod's share."""


class PlacementPlan(list[list[tuple[int, int]]]):
    """Per pod set, (node index, pod count) pairs; ``gpus``: per pod set, the GPUs of its
    shares (:data:`ShareGpus`, empty for a pod set asking no share; the list is empty when
    no pod set does)."""

    def __init__(
        self, pairs: Iterable[list[tuple[int, int]]] = (), gpus: Iterable[ShareGpus] = ()
    ) -> None:
        super().__init__(pairs)
        self.gpus: list[ShareGpus] = list(gpus)


_BIG = np.iinfo(np.int64).max


@dataclass(frozen=True, slots=True)
class TooLarge:
    """A pod of ``podset`` is larger than every one of the ``nodes`` nodes of ``flavor`` it
    may use (even empty)."""

    flavor: str
    podset: str
    nodes: int

    def __str__(self) -> str:
        return (
            f"a pod of {self.podset!r} is larger than any {self.flavor} node ({self.nodes} nodes)"
        )

    @property
    def gist(self) -> Gist:
        """What it says without the node count: ``("too-large", flavor, pod set)``."""
        return ("too-large", self.flavor, self.podset)


@dataclass(frozen=True, slots=True)
class NoFit:
    """Why a pod set does not fit; ``too_large`` when no node could ever hold its pod;
    ``gist`` what ``message`` says without its amounts (empty when not explained)."""

    podset: str
    message: str
    too_large: TooLarge | None = None
    gist: Gist = ()


class NodeFit:
    """Free resources of the schedulable nodes, with gang placement."""

    def __init__(
        self,
        nodes: Sequence[Node],
        flavor_of: Mapping[str, str | None],
        not_on_nodes: frozenset[str] = frozenset(),
        placement: str = "default",
    ) -> None:
        """``not_on_nodes``: resources counted as quota only, never asked of a node;
        ``placement``: one of :data:`PLACEMENTS`."""
        if placement not in PLACEMENTS:
            raise ValueError(f"placement: unknown {placement!r}; choose from {PLACEMENTS}")
        self.not_on_nodes = not_on_nodes
        self.placement = placement
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
        self._larger: dict[tuple[object, ...], bool] = {}  # see larger_than_every_node
        self._domains: dict[str, IntArray] = {}
        self._vectors: dict[int, tuple[Mapping[str, int], tuple[IntArray, IntArray] | None]] = {}
        self._flavor_free: dict[str | None, IntArray] = {
            f: self.free[ix].sum(axis=0) for f, ix in self._by_flavor.items()
        }
        col = None if GPU in not_on_nodes else names.get(GPU)
        self._gpu_col = col
        self._gpu_count: IntArray = (
            np.zeros(len(self.nodes), np.int64)
            if col is None
            else self.allocatable[:, col] // GPU_MILLI
        )
        self.shares: GpuShares | None = None
        """Per-GPU shares in use, made when the first share is placed."""
        self.target: TaskDistribution | None = None
        self._view: GpuCluster | None = None
        self._dirty: set[int] = set()
        self._chooser: Policy | None = None

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
        new._larger = self._larger
        new._domains = self._domains
        new._vectors = self._vectors
        new._flavor_free = {f: totals.copy() for f, totals in self._flavor_free.items()}
        new.placement = self.placement
        new._gpu_col = self._gpu_col
        new._gpu_count = self._gpu_count
        new.shares = None if self.shares is None else self.shares.copy()
        new.target = self.target
        new._view = None
        new._dirty = set()
        new._chooser = None
        return new

    def set_target(self, podsets: Iterable[PodSet]) -> None:
        """The target workload of ``fgd``: the pod shapes of ``podsets``, counted by pods
        (GPU pods only, unless none asks for a GPU)."""
        pods: list[PodShape] = []
        for ps in podsets:
            pods.extend([self._shape(ps)] * ps.count)
        gpu = [p for p in pods if p.gpu_request_milli]
        self.target = (
            TaskDistribution.from_pods(gpu or pods, include_cpu_only=not gpu) if pods else None
        )
        self._chooser = None

    def flavor_free(self, fr: tuple[str, str]) -> int:
        """Free amount of a resource summed over a flavor's schedulable nodes."""
        col = self.resources.get(fr[1])
        totals = self._flavor_free.get(fr[0])
        return 0 if col is None or totals is None else int(totals[col])

    # -- queries ---------------------------------------------------------------------------

    def eligible(self, flavor: str, podset: PodSet) -> IntArray:
        """Indices of the flavor's nodes whose labels and taints admit the pod set."""
        key = _eligibility(flavor, podset)
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
        The free room is unchanged afterwards (pod sets placed on the way are given back).
        """
        plan = PlacementPlan()
        taken: list[tuple[PodSet, list[tuple[int, int]], ShareGpus]] = []
        try:
            last = len(podsets) - 1
            for k, (flavor, podset) in enumerate(zip(flavors, podsets, strict=True)):
                found = self._place_one(flavor, podset, explain, k < last)
                if isinstance(found, NoFit):
                    return found
                chosen, gpus, applied = found
                plan.append(chosen)
                plan.gpus.append(gpus)
                if applied:
                    taken.append((podset, chosen, gpus))
        finally:
            for podset, chosen, gpus in reversed(taken):
                self._take(podset, chosen, gpus, -1)
        if not any(plan.gpus):
            plan.gpus = []
        return plan

    def _place_one(
        self, flavor: str, podset: PodSet, explain: bool, keep: bool
    ) -> tuple[list[tuple[int, int]], ShareGpus, bool] | NoFit:
        """One pod set's pairs, share GPUs and whether its resources were taken (``keep``:
        take them, for the pod sets after it)."""
        rows = self.eligible(flavor, podset)
        if len(rows) == 0:
            return NoFit(
                podset.name,
                f"no schedulable {flavor} node admits pod set "
                f"{podset.name!r} (node selector / taints)",
                gist=("no-eligible-node", flavor, podset.name),
            )
        vec = self._vector(podset.requests)
        if vec is None:
            missing = [
                r
                for r, amount in podset.requests.items()
                if amount > 0 and r not in self.resources and r not in self.not_on_nodes
            ]
            return NoFit(
                podset.name,
                f"no node offers {', '.join(missing)}",
                gist=("not-offered", podset.name, *missing),
            )
        problem = request_problem(podset.requests, self.not_on_nodes)
        if problem is not None:
            return NoFit(
                podset.name,
                f"pod set {podset.name!r} asks {problem}",
                gist=("unplaceable-request", podset.name),
            )
        whole, share = self._need(podset)
        counts = self._counts(rows, vec, whole, share)
        level, required = constraint(podset.required_topology, podset.preferred_topology)
        inside = None
        if level is not None:
            inside = self._domain(rows, counts, podset.count, level)
        if inside is None and required:
            chosen_rows = None
        elif inside is not None:
            chosen_rows = rows[inside], counts[inside]
        elif int(np.minimum(counts, podset.count).sum()) >= podset.count:
            chosen_rows = rows, counts
        else:
            chosen_rows = None
        if chosen_rows is None:
            if not explain:
                return NoFit(podset.name, "")
            return self._why_not(flavor, podset, rows, vec, counts, level if required else None)
        if self.placement != "default":
            return self._by_policy(podset, *chosen_rows, share)
        chosen = _choose(*chosen_rows, podset.count)
        assert chosen is not None  # the room was checked above
        if not share:
            if keep:
                self._take(podset, chosen, (), 1)
            return chosen, (), keep
        shares = self._ensure_shares()
        gpus = []
        for i, n in chosen:
            on_node = []
            for _ in range(n):
                g = shares.pick(i, int(self.free[i, self._gpu_col]), share)
                assert g is not None  # counted above
                self._take(podset, [(i, 1)], ((g,),), 1)
                on_node.append(g)
            gpus.append(tuple(on_node))
        return chosen, tuple(gpus), True

    def _by_policy(
        self, podset: PodSet, rows: IntArray, counts: IntArray, share: int
    ) -> tuple[list[tuple[int, int]], ShareGpus, bool]:
        """Pod by pod, the chosen policy's node and GPU among ``rows`` (taken on the way)."""
        shape = self._shape(podset)
        view = self._sync_view()
        chooser = self._policy(shape)
        mask = np.zeros(len(self.nodes), np.bool_)
        left = np.zeros(len(self.nodes), np.int64)
        left[rows] = counts
        mask[rows[counts > 0]] = True
        on: dict[int, list[int]] = {}
        for _ in range(podset.count):
            self._sync_view()
            where = chooser.choose(view, shape, mask)
            i = where.node
            g = where.gpus[0] if share else -1
            self._take(podset, [(i, 1)], ((g,),) if share else (), 1)
            on.setdefault(i, []).append(g)
            left[i] -= 1
            mask[i] = left[i] > 0
        chosen = [(i, len(gs)) for i, gs in on.items()]
        return chosen, tuple(tuple(gs) for gs in on.values()) if share else (), True

    def _need(self, podset: PodSet) -> tuple[int, int]:
        """(whole GPUs, share milli) per pod, as the nodes see it."""
        return (0, 0) if self._gpu_col is None else gpu_need(podset.requests)

    def _counts(
        self, rows: IntArray, vec: tuple[IntArray, IntArray], whole: int, share: int
    ) -> IntArray:
        """Pods of this shape that fit on each of ``rows`` now (shares within one GPU,
        whole GPUs fully free)."""
        counts = self._per_node(rows, vec, self.free)
        if share:
            free_gpu = self.free[rows, self._gpu_col]
            counts = np.minimum(counts, self._ensure_shares().room(rows, free_gpu, share))
        elif whole and self.shares is not None:
            free_gpu = self.free[rows, self._gpu_col]
            counts = np.minimum(counts, self.shares.full(rows, free_gpu) // whole)
        return counts

    def _ensure_shares(self) -> GpuShares:
        if self.shares is None:
            self.shares = GpuShares(self._gpu_count)
        return self.shares

    def _shape(self, podset: PodSet) -> PodShape:
        """A pod of ``podset`` as :mod:`gpu_share`'s policies see it (memory in milli-bytes;
        a GPU model when the pod set selects ``nvidia.com/gpu.product``)."""
        whole, share = self._need(podset)
        model = podset.node_selector.get(GPU_PRODUCT_LABEL)
        return PodShape(
            podset.requests.get(CPU, 0),
            podset.requests.get(MEMORY, 0),
            num_gpu=whole,
            gpu_milli=share,
            gpu_models=(model,) if model and (whole or share) else (),
        )

    def _policy(self, shape: PodShape) -> Policy:
        if self._chooser is None:
            target = self.target
            if self.placement == "fgd" and target is None:
                target = TaskDistribution((shape,), (1,))
            self._chooser = make_policy(self.placement, target)
        return self._chooser

    def _sync_view(self) -> GpuCluster:
        """The nodes as :class:`GpuCluster` for the policies, brought up to date."""
        view = self._view
        if view is None:
            shares = self._ensure_shares()
            cpu, mem = self.resources.get(CPU), self.resources.get(MEMORY)
            view = self._view = GpuCluster(
                [
                    GpuNode(
                        n.name,
                        0 if cpu is None else int(self.allocatable[i, cpu]),
                        0 if mem is None else int(self.allocatable[i, mem]),
                        int(shares.count[i]),
                        n.all_labels().get(GPU_PRODUCT_LABEL, "") if shares.count[i] else "",
                    )
                    for i, n in enumerate(self.nodes)
                ]
            )
            self._dirty = set(range(len(self.nodes)))
        if self._dirty:
            rows = np.array(sorted(self._dirty), np.int64)
            self._dirty = set()
            view.set_free(rows, *self._free_of(rows))
        return view

    def _free_of(self, rows: IntArray) -> tuple[IntArray, IntArray, IntArray]:
        """Free CPU, memory and per-GPU shares of ``rows`` (for the policies' view)."""
        cpu, mem = self.resources.get(CPU), self.resources.get(MEMORY)
        zero = np.zeros(len(rows), np.int64)
        free_gpu = zero if self._gpu_col is None else self.free[rows, self._gpu_col]
        return (
            zero if cpu is None else self.free[rows, cpu],
            zero if mem is None else self.free[rows, mem],
            self._ensure_shares().per_gpu_free(rows, free_gpu),
        )

    def _domain(
        self, rows: IntArray, counts: IntArray, wanted: int, level: str
    ) -> npt.NDArray[np.bool_] | None:
        """Which of ``rows`` make up the tightest domain of ``level`` that holds all
        ``wanted`` pods (one node, then each wider level up to ``level``); None when none."""
        capped = np.minimum(counts, wanted)
        if int(capped.sum()) < wanted:
            return None
        for lv in levels_up_to(level):
            dom = self.domain_ids(lv)[rows]
            room = np.bincount(dom, weights=capped.astype(np.float64))
            holds = np.flatnonzero(room >= wanted)
            if len(holds):
                best = holds[int(np.argmin(room[holds]))]
                inside: npt.NDArray[np.bool_] = dom == best
                return inside
        return None

    def _why_not(
        self,
        flavor: str,
        podset: PodSet,
        rows: IntArray,
        vec: tuple[IntArray, IntArray],
        counts: IntArray,
        required: str | None,
    ) -> NoFit:
        """Why the pod set does not fit on ``rows`` (``required``: its required topology
        level, if any)."""
        too_large = self._too_large(flavor, podset, rows, vec)
        if too_large is not None:
            return NoFit(podset.name, str(too_large), too_large, too_large.gist)
        room = int(np.minimum(counts, podset.count).sum())
        why = f"{flavor} nodes have room for {room} of {podset.count} pods of {podset.name!r} now"
        if required is not None:
            why = (
                f"no single {describe_level(required)} of {flavor} nodes has room for "
                f"all {podset.count} pods of {podset.name!r} (required topology "
                f"{required}); {why}"
            )
            return NoFit(podset.name, why, gist=("no-room-in", flavor, podset.name, required))
        return NoFit(podset.name, why, gist=("no-room", flavor, podset.name))

    def _too_large(
        self, flavor: str, podset: PodSet, rows: IntArray, vec: tuple[IntArray, IntArray]
    ) -> TooLarge | None:
        """A :class:`TooLarge` when a pod of ``vec`` fits on none of ``rows`` even empty."""
        return (
            TooLarge(flavor, podset.name, len(rows)) if self._larger_than_any(rows, vec) else None
        )

    def _larger_than_any(self, rows: IntArray, vec: tuple[IntArray, IntArray]) -> bool:
        """Whether a pod of ``vec`` fits on none of ``rows`` even when it is empty."""
        return int(self._per_node(rows, vec, self.allocatable).max(initial=0)) == 0

    def larger_than_every_node(
        self, flavors: Sequence[str], podsets: Sequence[PodSet]
    ) -> TooLarge | None:
        """The first pod set that could not fit even on an empty node of its flavor (its pod
        is larger than every node it may use), or None. No node at all is not such a case:
        nodes may yet be bought."""
        for flavor, podset in zip(flavors, podsets, strict=True):
            rows = self.eligible(flavor, podset)
            vec = self._vector(podset.requests)
            if not len(rows) or vec is None:
                continue
            # the nodes' allocatable is fixed: one answer per eligibility and request
            key = (*_eligibility(flavor, podset), vec[0].tobytes(), vec[1].tobytes())
            larger = self._larger.get(key)
            if larger is None:
                larger = self._larger[key] = self._larger_than_any(rows, vec)
            if larger:
                return TooLarge(flavor, podset.name, len(rows))
        return None

    # -- changes ---------------------------------------------------------------------------

    def _take(
        self, podset: PodSet, pairs: Sequence[tuple[int, int]], gpus: ShareGpus, sign: int
    ) -> None:
        """Take (``sign=1``) or give back (``-1``) ``pairs`` of the pod set's pods, with the
        GPUs of their shares (``gpus``; a GPU index -1 is a share on no known GPU)."""
        vec = self._vector(podset.requests)
        if vec is None:
            return
        cols, amounts = vec
        for i, n in pairs:
            self.free[i, cols] -= sign * amounts * n
            self._flavor_free[self.flavor[i]][cols] -= sign * amounts * n
        if gpus:
            share = self._need(podset)[1]
            shares = self._ensure_shares()
            for (i, _), on_node in zip(pairs, gpus, strict=True):
                shares.take(i, [g for g in on_node if g >= 0], share, sign)
        if self._view is not None:
            self._dirty.update(i for i, _ in pairs)

    def apply(
        self, podsets: Sequence[PodSet], plan: Iterable[Sequence[tuple[int, int]]], sign: int
    ) -> None:
        """Take (``sign=1``) or give back (``-1``) the resources of a placement.

        Shares go to the GPUs the plan records (:attr:`PlacementPlan.gpus`) when they still
        fit there, else to the GPU the default rule picks (a running workload whose GPUs are
        not known); taking records the GPUs in the plan, so giving back returns them.
        """
        recorded = plan.gpus if isinstance(plan, PlacementPlan) else []
        got: list[ShareGpus] = []
        for k, (podset, pairs) in enumerate(zip(podsets, plan, strict=True)):
            share = self._need(podset)[1]
            known = recorded[k] if k < len(recorded) else ()
            if not share:
                self._take(podset, pairs, (), sign)
                got.append(())
            elif sign < 0:
                self._take(podset, pairs, known or tuple(() for _ in pairs), sign)
                got.append(known)
            else:
                got.append(self._take_shares(podset, pairs, known, share))
        if isinstance(plan, PlacementPlan) and sign > 0:
            plan.gpus = got if any(got) else []

    def _take_shares(
        self, podset: PodSet, pairs: Sequence[tuple[int, int]], known: ShareGpus, share: int
    ) -> ShareGpus:
        """Take a share pod set's pods one by one, each on its recorded GPU if it fits."""
        shares = self._ensure_shares()
        col = self._gpu_col
        assert col is not None
        out = []
        for k, (i, n) in enumerate(pairs):
            wanted = known[k] if k < len(known) else ()
            on_node = []
            for p in range(n):
                g = wanted[p] if p < len(wanted) else -1
                free_gpu = int(self.free[i, col])
                if g < 0 or not shares.fits(i, g, free_gpu, share):
                    pick = shares.pick(i, free_gpu, share)
                    g = -1 if pick is None else pick  # no room: the node is overcommitted
                self._take(podset, [(i, 1)], ((g,),), 1)
                on_node.append(g)
            out.append(tuple(on_node))
        return tuple(out)

    def apply_all(
        self, placements: Iterable[tuple[Sequence[PodSet], Iterable[Sequence[tuple[int, int]]]]]
    ) -> None:
        """:meth:`apply` (``sign=1``) of many placements: those without shares in one array
        operation, then those with shares one by one, in order."""
        rows: list[int] = []
        cols: list[int] = []
        amounts: list[int] = []
        later = []
        for podsets, plan in placements:
            if any(self._need(ps)[1] for ps in podsets):
                later.append((podsets, plan))
                continue
            for podset, pairs in zip(podsets, plan, strict=True):
                vec = self._vector(podset.requests)
                if vec is None:
                    continue
                vc, va = vec
                for i, n in pairs:
                    rows.extend([i] * len(vc))
                    cols.extend(vc.tolist())
                    amounts.extend((va * n).tolist())
        if rows:
            taken = np.zeros_like(self.free)
            np.add.at(taken, (np.array(rows, np.int64), np.array(cols, np.int64)), amounts)
            self.free -= taken
            for flavor, ix in self._by_flavor.items():
                self._flavor_free[flavor] -= taken[ix].sum(axis=0)
            if self._view is not None:
                self._dirty.update(set(rows))
        for podsets, plan in later:
            self.apply(podsets, plan, 1)

    def plan_of(
        self,
        placement: Sequence[Sequence[tuple[str, int]]],
        gpus: Sequence[ShareGpus] = (),
    ) -> PlacementPlan:
        """Node names to indices, dropping nodes that are no longer schedulable (with the
        share GPUs recorded for them, if any)."""
        pairs = []
        kept: list[ShareGpus] = []
        for k, ps in enumerate(placement):
            on = gpus[k] if k < len(gpus) else ()
            pairs.append([(self.index[name], n) for name, n in ps if name in self.index])
            kept.append(
                tuple(g for (name, _), g in zip(ps, on, strict=False) if name in self.index)
            )
        return PlacementPlan(pairs, kept if any(kept) else ())

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


def _eligibility(flavor: str, podset: PodSet) -> tuple[object, ...]:
    """What decides which of a flavor's nodes admit a pod set (labels, taints, affinity)."""
    return (
        flavor,
        tuple(sorted(podset.node_selector.items())),
        podset.tolerations,
        podset.affinity,
    )
