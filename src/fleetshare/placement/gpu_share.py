"""Pack pods with whole-GPU and fractional-GPU requests onto GPU nodes.

A :class:`GpuCluster` holds, per node, free CPU (milli-cores), free memory (MiB), a GPU model
and the free share of each GPU in milli-GPU (0..1000) as one padded ``nodes x max_gpus``
integer matrix; padding columns stay 0 forever, so they never fit anything.

A :class:`PodShape` asks for CPU, memory and either ``num_gpu`` whole GPUs (each must be fully
free) or ``gpu_milli`` of a single GPU (0 < milli < 1000, never split over GPUs), optionally
restricted to some GPU models. ``feasible`` is one vectorised step over all nodes; a policy
then picks a node and its GPUs (``place``), and ``allocate`` / ``release`` change the state.

Policies:

- ``first_fit``: the first feasible node; the first GPU(s) that fit.
- ``best_fit``: the feasible node left with the least free GPU capacity, ties by least free
  CPU, then node order; a fractional pod goes to the fullest GPU that still fits it.
- ``dot_product``: the FGD paper's baseline as its simulator defines it: the smallest dot
  product of the pod's (CPU, GPU) request with a node's free (CPU, GPU) over *virtual nodes*
  (each partly used GPU that fits a fraction, and the fully free GPUs together), both divided
  by the largest node's capacity (:class:`DotProduct`).
- ``fgd``: fragmentation gradient descent (Weng et al., USENIX ATC 2023). A node's
  fragmentation with respect to a :class:`TaskDistribution` is the expected free GPU milli
  that a task drawn from the distribution could not use there: all free GPU milli when the
  task does not fit the node at all (CPU, memory, GPU model or GPU capacity), otherwise the
  free milli of the GPUs whose free share is below the task's per-GPU request. FGD puts each
  pod on the node and GPU whose fragmentation grows least (ties: least free GPU, then least
  free CPU, then node order; on a node, the fullest GPU).

FGD keeps, per (node, pod shape seen so far), the fragmentation change of placing that shape
there. A placement changes one node, so only that node's row is recomputed (the cluster keeps
a per-node version counter that the policy compares with the versions it has seen).
Fragmentation is computed in integers (task counts x milli), so equal changes tie exactly.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]
FloatArray = npt.NDArray[np.float64]

GPU_MILLI = 1000
"""One whole GPU in milli-GPU."""

_NONE = np.iinfo(np.int64).max
"""Fragmentation change of a (node, shape) pair that cannot be placed."""


@dataclass(frozen=True, slots=True)
class GpuNode:
    """One node: allocatable CPU (milli-cores) and memory (MiB), ``num_gpu`` GPUs of a model."""

    name: str
    cpu_milli: int
    memory_mib: int
    num_gpu: int = 0
    gpu_model: str = ""

    def __post_init__(self) -> None:
        if self.cpu_milli < 0 or self.memory_mib < 0 or self.num_gpu < 0:
            raise ValueError(f"node {self.name!r}: negative capacity")


@dataclass(frozen=True, slots=True)
class PodShape:
    """What one pod asks for.

    ``num_gpu`` whole GPUs, or ``gpu_milli`` (1..999) of one GPU, or neither (CPU only).
    ``gpu_models`` lists the GPU models the pod accepts; empty means any.
    """

    cpu_milli: int
    memory_mib: int
    num_gpu: int = 0
    gpu_milli: int = 0
    gpu_models: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.cpu_milli < 0 or self.memory_mib < 0 or self.num_gpu < 0:
            raise ValueError(f"{self}: negative request")
        if not 0 <= self.gpu_milli < GPU_MILLI:
            raise ValueError(f"{self}: gpu_milli must be in 0..{GPU_MILLI - 1} (a fraction)")
        if self.num_gpu and self.gpu_milli:
            raise ValueError(f"{self}: ask for whole GPUs or a fraction of one, not both")
        models = tuple(sorted(set(self.gpu_models)))
        if models != self.gpu_models:
            object.__setattr__(self, "gpu_models", models)

    @staticmethod
    def parse_gpu_spec(spec: str) -> tuple[str, ...]:
        """``"V100M16|V100M32"`` -> ``("V100M16", "V100M32")``; empty -> any model."""
        return tuple(sorted({m.strip() for m in spec.split("|") if m.strip()}))

    @property
    def gpu_request_milli(self) -> int:
        """GPU requested in milli-GPU (whole GPUs count 1000 each)."""
        return self.num_gpu * GPU_MILLI + self.gpu_milli

    @property
    def per_gpu_milli(self) -> int:
        """Share needed on each GPU used: 1000 for whole GPUs, the fraction, or 0."""
        return GPU_MILLI if self.num_gpu else self.gpu_milli


class Placement(NamedTuple):
    """Where a pod goes: a node index and the GPU indices it uses on that node."""

    node: int
    gpus: tuple[int, ...]


class GpuCluster:
    """Free resources of GPU nodes, with per-node summaries kept up to date."""

    def __init__(self, nodes: Sequence[GpuNode]) -> None:
        self.names = [n.name for n in nodes]
        self.models: list[str] = sorted({n.gpu_model for n in nodes} | {""})
        where = {m: i for i, m in enumerate(self.models)}
        n = len(nodes)
        self.model: IntArray = np.array([where[x.gpu_model] for x in nodes], np.int64)
        self.num_gpus: IntArray = np.array([x.num_gpu for x in nodes], np.int64).reshape(n)
        self.cpu_capacity: IntArray = np.array([x.cpu_milli for x in nodes], np.int64).reshape(n)
        self.mem_capacity: IntArray = np.array([x.memory_mib for x in nodes], np.int64).reshape(n)
        width = max(1, int(self.num_gpus.max(initial=0)))
        self.gpu_free: IntArray = np.where(
            np.arange(width)[None, :] < self.num_gpus[:, None], GPU_MILLI, 0
        ).astype(np.int64)
        self.cpu_free: IntArray = self.cpu_capacity.copy()
        self.mem_free: IntArray = self.mem_capacity.copy()
        self.free_total: IntArray = self.gpu_free.sum(axis=1)
        self.full_count: IntArray = (self.gpu_free == GPU_MILLI).sum(axis=1).astype(np.int64)
        self.max_free: IntArray = self.gpu_free.max(axis=1)
        self.version: IntArray = np.zeros(n, np.int64)
        """Bumped on every change of a node; policies use it to invalidate caches."""
        self._model_masks: dict[tuple[str, ...], BoolArray] = {}

    @property
    def n_nodes(self) -> int:
        """Number of nodes."""
        return len(self.names)

    @property
    def total_gpu_milli(self) -> int:
        """Installed GPU capacity in milli-GPU."""
        return int(self.num_gpus.sum()) * GPU_MILLI

    def copy(self) -> GpuCluster:
        """An independent copy (same nodes, same current allocations)."""
        other = GpuCluster.__new__(GpuCluster)
        other.names = self.names
        other.models = self.models
        other.model = self.model
        other.num_gpus = self.num_gpus
        other.cpu_capacity = self.cpu_capacity
        other.mem_capacity = self.mem_capacity
        other.gpu_free = self.gpu_free.copy()
        other.cpu_free = self.cpu_free.copy()
        other.mem_free = self.mem_free.copy()
        other.free_total = self.free_total.copy()
        other.full_count = self.full_count.copy()
        other.max_free = self.max_free.copy()
        other.version = np.zeros(self.n_nodes, np.int64)
        other._model_masks = self._model_masks
        return other

    def model_mask(self, models: tuple[str, ...]) -> BoolArray:
        """Nodes whose GPU model is one of ``models`` (all nodes when empty)."""
        found = self._model_masks.get(models)
        if found is None:
            if models:
                allowed = np.array([m in models for m in self.models], np.bool_)
                found = allowed[self.model]
            else:
                found = np.ones(self.n_nodes, np.bool_)
            self._model_masks[models] = found
        return found

    def set_free(self, rows: IntArray, cpu: IntArray, mem: IntArray, gpu: IntArray) -> None:
        """Set the free CPU, memory and per-GPU shares of ``rows`` (a caller keeping its own
        accounting mirrors it here); bumps their versions."""
        self.cpu_free[rows] = cpu
        self.mem_free[rows] = mem
        self.gpu_free[rows] = gpu
        self.free_total[rows] = gpu.sum(axis=1)
        self.full_count[rows] = (gpu == GPU_MILLI).sum(axis=1)
        self.max_free[rows] = gpu.max(axis=1)
        self.version[rows] += 1

    def _touch(self, node: int) -> None:
        row = self.gpu_free[node]
        self.free_total[node] = row.sum()
        self.full_count[node] = int((row == GPU_MILLI).sum())
        self.max_free[node] = row.max()
        self.version[node] += 1


# -- feasibility, allocation -------------------------------------------------------------------


def feasible(cluster: GpuCluster, pod: PodShape) -> BoolArray:
    """Per node: can the pod be placed there now?"""
    ok: BoolArray = (cluster.cpu_free >= pod.cpu_milli) & (cluster.mem_free >= pod.memory_mib)
    if pod.num_gpu:
        ok &= cluster.full_count >= pod.num_gpu
    elif pod.gpu_milli:
        ok &= cluster.max_free >= pod.gpu_milli
    if pod.gpu_models and pod.gpu_request_milli:
        ok &= cluster.model_mask(pod.gpu_models)
    return ok


def _check(cluster: GpuCluster, pod: PodShape, placement: Placement) -> None:
    node, gpus = placement
    if not 0 <= node < cluster.n_nodes:
        raise ValueError(f"no node {node}")
    wanted = pod.num_gpu if pod.num_gpu else (1 if pod.gpu_milli else 0)
    if len(gpus) != wanted or len(set(gpus)) != wanted:
        raise ValueError(f"{pod} needs {wanted} distinct GPU indices, got {gpus}")
    if any(not 0 <= g < cluster.num_gpus[node] for g in gpus):
        raise ValueError(f"node {cluster.names[node]} has {cluster.num_gpus[node]} GPUs: {gpus}")


def allocate(cluster: GpuCluster, pod: PodShape, placement: Placement) -> None:
    """Take the pod's resources at ``placement``; raises ``ValueError`` if they are not free."""
    _check(cluster, pod, placement)
    node, gpus = placement
    if cluster.cpu_free[node] < pod.cpu_milli or cluster.mem_free[node] < pod.memory_mib:
        raise ValueError(f"not enough CPU or memory on {cluster.names[node]} for {pod}")
    if pod.gpu_models and gpus and not cluster.model_mask(pod.gpu_models)[node]:
        raise ValueError(f"{cluster.names[node]} has no GPU model in {pod.gpu_models}")
    row = cluster.gpu_free[node]
    if any(row[g] < pod.per_gpu_milli for g in gpus):
        raise ValueError(f"GPUs {gpus} of {cluster.names[node]} lack {pod.per_gpu_milli}m free")
    cluster.cpu_free[node] -= pod.cpu_milli
    cluster.mem_free[node] -= pod.memory_mib
    for g in gpus:
        row[g] -= pod.per_gpu_milli
    cluster._touch(node)


def release(cluster: GpuCluster, pod: PodShape, placement: Placement) -> None:
    """Give back what ``allocate(cluster, pod, placement)`` took."""
    _check(cluster, pod, placement)
    node, gpus = placement
    if (
        cluster.cpu_free[node] + pod.cpu_milli > cluster.cpu_capacity[node]
        or cluster.mem_free[node] + pod.memory_mib > cluster.mem_capacity[node]
    ):
        raise ValueError(f"{pod} was not allocated on {cluster.names[node]}")
    row = cluster.gpu_free[node]
    if any(row[g] + pod.per_gpu_milli > GPU_MILLI for g in gpus):
        raise ValueError(f"GPUs {gpus} of {cluster.names[node]} do not hold {pod}")
    cluster.cpu_free[node] += pod.cpu_milli
    cluster.mem_free[node] += pod.memory_mib
    for g in gpus:
        row[g] += pod.per_gpu_milli
    cluster._touch(node)


def gpu_allocation_ratio(cluster: GpuCluster) -> float:
    """Allocated GPU milli / installed GPU milli (0 for a cluster without GPUs)."""
    total = cluster.total_gpu_milli
    return 0.0 if total == 0 else 1.0 - int(cluster.free_total.sum()) / total


def _first_fit_gpus(cluster: GpuCluster, node: int, pod: PodShape) -> tuple[int, ...]:
    row = cluster.gpu_free[node]
    if pod.num_gpu:
        return tuple(int(g) for g in np.flatnonzero(row == GPU_MILLI)[: pod.num_gpu])
    if pod.gpu_milli:
        return (int(np.flatnonzero(row >= pod.gpu_milli)[0]),)
    return ()


def _best_fit_gpus(cluster: GpuCluster, node: int, pod: PodShape) -> tuple[int, ...]:
    """Whole GPUs: the first fully free ones; a fraction: the fullest GPU that fits."""
    if not pod.gpu_milli:
        return _first_fit_gpus(cluster, node, pod)
    row = cluster.gpu_free[node]
    room = np.where(row >= pod.gpu_milli, row, _NONE)
    return (int(np.argmin(room)),)


def _tightest(cluster: GpuCluster, nodes: IntArray) -> int:
    """Among ``nodes`` (ascending), the one with least free GPU, then least free CPU."""
    gpu = cluster.free_total[nodes]
    nodes = nodes[gpu == gpu.min()]
    if len(nodes) > 1:
        cpu = cluster.cpu_free[nodes]
        nodes = nodes[cpu == cpu.min()]
    return int(nodes[0])


# -- workload distribution and fragmentation ---------------------------------------------------


@dataclass(frozen=True)
class TaskDistribution:
    """Task shapes and their popularity (counts); the target workload of FGD."""

    shapes: tuple[PodShape, ...]
    counts: tuple[int, ...]

    def __post_init__(self) -> None:
        if not self.shapes or len(self.shapes) != len(self.counts):
            raise ValueError("a distribution needs one positive count per shape")
        if any(c <= 0 for c in self.counts) or len(set(self.shapes)) != len(self.shapes):
            raise ValueError("counts must be positive and shapes distinct")

    @classmethod
    def from_pods(
        cls, pods: Iterable[PodShape], include_cpu_only: bool = False, coverage: float = 1.0
    ) -> TaskDistribution:
        """Count the shapes of ``pods``, most popular first.

        CPU-only shapes are left out unless ``include_cpu_only`` (they can use no GPU, so
        they only add a constant to every node's fragmentation). ``coverage`` < 1 keeps the
        most popular shapes until they account for that fraction of the pods.
        """
        if not 0 < coverage <= 1:
            raise ValueError("coverage must be in (0, 1]")
        counter = Counter(p for p in pods if include_cpu_only or p.gpu_request_milli)
        ranked = sorted(counter.items(), key=lambda kv: (-kv[1], repr(kv[0])))
        total, kept, seen = sum(counter.values()), [], 0
        for shape, count in ranked:
            if seen >= coverage * total:
                break
            kept.append((shape, count))
            seen += count
        return cls(tuple(s for s, _ in kept), tuple(c for _, c in kept))

    @property
    def probabilities(self) -> FloatArray:
        """Popularity of each shape (sums to 1)."""
        counts = np.array(self.counts, np.float64)
        result: FloatArray = counts / counts.sum()
        return result


class _FragModel:
    """Fragmentation of many hypothetical node states at once, in count x milli units."""

    def __init__(self, dist: TaskDistribution, models: Sequence[str]) -> None:
        shapes = dist.shapes
        self.weights = np.array(dist.counts, np.int64)
        self.total = int(self.weights.sum())
        self.cpu = np.array([s.cpu_milli for s in shapes], np.int64)
        self.mem = np.array([s.memory_mib for s in shapes], np.int64)
        self.k = np.array([s.num_gpu for s in shapes], np.int64)
        per_gpu = np.array([s.per_gpu_milli for s in shapes], np.int64)
        self.uses_gpu = per_gpu > 0
        self.whole = self.k > 0
        self.levels = np.unique(per_gpu[self.uses_gpu]) if self.uses_gpu.any() else np.ones(1)
        self.levels = self.levels.astype(np.int64)
        self.level = np.searchsorted(self.levels, np.maximum(per_gpu, 1)).clip(
            0, len(self.levels) - 1
        )
        self.model_ok = np.array(
            [[not s.gpu_models or m in s.gpu_models for s in shapes] for m in models], np.bool_
        ).reshape(len(models), len(shapes))

    def evaluate(self, cpu: IntArray, mem: IntArray, model: IntArray, free: IntArray) -> IntArray:
        """Σ_t count_t x (free GPU milli that task type t cannot use), per state (row)."""
        total_free = free.sum(axis=1)
        at_least = free[:, :, None] >= self.levels[None, None, :]
        usable_by_level = (free[:, :, None] * at_least).sum(axis=1)  # states x levels
        full = (free == GPU_MILLI).sum(axis=1)
        usable = usable_by_level[:, self.level]  # states x types
        gpu_fits = np.where(self.whole, full[:, None] >= self.k, usable > 0) & self.uses_gpu
        fits = (
            gpu_fits
            & (cpu[:, None] >= self.cpu)
            & (mem[:, None] >= self.mem)
            & self.model_ok[model]
        )
        result: IntArray = total_free * self.total - (fits * usable) @ self.weights
        return result


def node_fragmentation(cluster: GpuCluster, distribution: TaskDistribution) -> FloatArray:
    """Per node: expected free GPU milli that a task of ``distribution`` could not use."""
    model = _FragModel(distribution, cluster.models)
    raw = model.evaluate(cluster.cpu_free, cluster.mem_free, cluster.model, cluster.gpu_free)
    result: FloatArray = raw / model.total
    return result


def fragmentation(cluster: GpuCluster, distribution: TaskDistribution) -> float:
    """Cluster fragmentation in milli-GPU: the sum of :func:`node_fragmentation`."""
    return float(node_fragmentation(cluster, distribution).sum())


# -- policies ----------------------------------------------------------------------------------


class Policy(Protocol):
    """Chooses a node and GPUs among the feasible nodes."""

    name: str

    def choose(self, cluster: GpuCluster, pod: PodShape, candidates: BoolArray) -> Placement:
        """A placement on one of ``candidates`` (a non-empty feasibility mask)."""
        ...


class FirstFit:
    """The first feasible node, the first GPU(s) that fit."""

    name = "first_fit"

    def choose(self, cluster: GpuCluster, pod: PodShape, candidates: BoolArray) -> Placement:
        node = int(np.argmax(candidates))
        return Placement(node, _first_fit_gpus(cluster, node, pod))


class BestFit:
    """Least free GPU after placement, ties by least free CPU; fullest fitting GPU."""

    name = "best_fit"

    def choose(self, cluster: GpuCluster, pod: PodShape, candidates: BoolArray) -> Placement:
        node = _tightest(cluster, np.flatnonzero(candidates))
        return Placement(node, _best_fit_gpus(cluster, node, pod))


class DotProduct:
    """The FGD paper's dot-product baseline (Tetris' alignment, packing variant).

    As the paper's simulator defines it (``dimExtMethod: share``, ``normMethod: max``): a
    node offers one *virtual node* per partly used GPU that fits a fractional pod (its free
    share) and one for its fully free GPUs when they fit the pod (their free milli summed);
    a virtual node's vector is (free CPU, its free GPU milli) and the pod's is (CPU request,
    GPU request milli), both divided by the largest node's CPU and GPU capacity. Memory is
    not a dimension. The pod goes to the virtual node with the smallest dot product over all
    feasible nodes: a partly used GPU, or the first fully free GPU(s). Scores are exact
    floats and ties go to the lower node index, then the partly used GPU of the lowest index
    (the simulator rounds scores to integers 0-100 and breaks ties at random).
    """

    name = "dot_product"

    def choose(self, cluster: GpuCluster, pod: PodShape, candidates: BoolArray) -> Placement:
        nodes = np.flatnonzero(candidates)
        cpu_scale = max(1, int(cluster.cpu_capacity.max(initial=0)))
        gpu_scale = max(1, int(cluster.num_gpus.max(initial=0)) * GPU_MILLI)
        cpu = (pod.cpu_milli / cpu_scale) * (cluster.cpu_free[nodes] / cpu_scale)
        want = pod.gpu_request_milli / gpu_scale
        rows = cluster.gpu_free[nodes]
        idle = (rows == GPU_MILLI).sum(axis=1)
        # the virtual node of the fully free GPUs, where they fit the pod
        best = np.where(
            idle * GPU_MILLI >= pod.gpu_request_milli,
            cpu + want * (idle * GPU_MILLI / gpu_scale),
            np.inf,
        )
        shared = np.full(len(nodes), -1)
        if pod.gpu_milli:  # the partly used GPUs that fit the fraction
            part = (rows < GPU_MILLI) & (rows >= pod.gpu_milli)
            score = np.where(part, cpu[:, None] + want * (rows / gpu_scale), np.inf)
            gpu = np.argmin(score, axis=1)
            low = score[np.arange(len(nodes)), gpu]
            better = low <= best
            shared = np.where(better & np.isfinite(low), gpu, -1)
            best = np.where(better, low, best)
        k = int(np.argmin(best))
        node = int(nodes[k])
        if shared[k] >= 0:
            return Placement(node, (int(shared[k]),))
        return Placement(node, _first_fit_gpus(cluster, node, pod))


class FGD:
    """Fragmentation gradient descent with incrementally maintained per-node changes."""

    name = "fgd"

    def __init__(self, distribution: TaskDistribution) -> None:
        self.distribution = distribution
        self._cluster: GpuCluster | None = None

    # -- cache -------------------------------------------------------------------------------

    def _bind(self, cluster: GpuCluster) -> None:
        self._cluster = cluster
        self._model = _FragModel(self.distribution, cluster.models)
        self._seen = cluster.version.copy()
        self._now = self._model.evaluate(
            cluster.cpu_free, cluster.mem_free, cluster.model, cluster.gpu_free
        )
        self._shapes: dict[PodShape, int] = {}
        self._s_cpu = np.zeros(0, np.int64)
        self._s_mem = np.zeros(0, np.int64)
        self._s_k = np.zeros(0, np.int64)
        self._s_milli = np.zeros(0, np.int64)
        self._delta = np.zeros((cluster.n_nodes, 0), np.int64)
        self._gpu = np.zeros((cluster.n_nodes, 0), np.int64)

    def _sync(self, cluster: GpuCluster) -> None:
        if self._cluster is not cluster or len(self._seen) != cluster.n_nodes:
            self._bind(cluster)
            return
        stale = np.flatnonzero(cluster.version != self._seen)
        if len(stale) == 0:
            return
        self._seen[stale] = cluster.version[stale]
        self._now[stale] = self._model.evaluate(
            cluster.cpu_free[stale],
            cluster.mem_free[stale],
            cluster.model[stale],
            cluster.gpu_free[stale],
        )
        n_shapes = len(self._shapes)
        if n_shapes:
            nodes = np.repeat(stale, n_shapes)
            shapes = np.tile(np.arange(n_shapes), len(stale))
            delta, gpu = self._changes(cluster, nodes, shapes)
            self._delta[stale] = delta.reshape(len(stale), n_shapes)
            self._gpu[stale] = gpu.reshape(len(stale), n_shapes)

    def _column(self, cluster: GpuCluster, pod: PodShape) -> int:
        col = self._shapes.get(pod)
        if col is not None:
            return col
        col = len(self._shapes)
        self._shapes[pod] = col
        self._s_cpu = np.append(self._s_cpu, pod.cpu_milli)
        self._s_mem = np.append(self._s_mem, pod.memory_mib)
        self._s_k = np.append(self._s_k, pod.num_gpu)
        self._s_milli = np.append(self._s_milli, pod.gpu_milli)
        nodes = np.arange(cluster.n_nodes)
        delta, gpu = self._changes(cluster, nodes, np.full(cluster.n_nodes, col))
        self._delta = np.column_stack([self._delta, delta])
        self._gpu = np.column_stack([self._gpu, gpu])
        return col

    def _changes(
        self, cluster: GpuCluster, nodes: IntArray, shapes: IntArray
    ) -> tuple[IntArray, IntArray]:
        """Per (node, shape) pair: least fragmentation change and the GPU giving it."""
        free = cluster.gpu_free[nodes]
        width = free.shape[1]
        k = self._s_k[shapes]
        milli = self._s_milli[shapes]
        share = milli > 0
        # Fractional shapes: one candidate per distinct free value that fits (first GPU).
        dup = (free[:, :, None] == free[:, None, :]) & np.tri(width, k=-1, dtype=np.bool_).T[None]
        first = ~dup.any(axis=1)
        fits = share[:, None] & (free >= milli[:, None]) & first
        pair_s, gpu_s = np.nonzero(fits)
        free_s = free[pair_s]
        free_s[np.arange(len(pair_s)), gpu_s] -= milli[pair_s]
        # Whole-GPU and CPU-only shapes: one candidate (the first k fully free GPUs).
        pair_w = np.flatnonzero(~share)
        full = free[pair_w] == GPU_MILLI
        take = full & (np.cumsum(full, axis=1) <= k[pair_w, None])
        free_w = free[pair_w] - GPU_MILLI * take
        ok_w = full.sum(axis=1) >= k[pair_w]

        pair = np.concatenate([pair_s, pair_w])
        gpu = np.concatenate([gpu_s, np.full(len(pair_w), -1, np.int64)])
        after = np.concatenate([free_s, free_w]).reshape(len(pair), width)
        valid = np.concatenate([np.ones(len(pair_s), np.bool_), ok_w])
        node = nodes[pair]
        cpu = cluster.cpu_free[node] - self._s_cpu[shapes[pair]]
        mem = cluster.mem_free[node] - self._s_mem[shapes[pair]]
        valid &= (cpu >= 0) & (mem >= 0)
        change = self._model.evaluate(cpu, mem, cluster.model[node], after) - self._now[node]
        change = np.where(valid, change, _NONE)
        tie = np.where(gpu >= 0, free[pair, np.maximum(gpu, 0)], 0)
        order = np.lexsort((tie, change, pair))
        pair, change, gpu = pair[order], change[order], gpu[order]
        starts = np.flatnonzero(np.r_[True, pair[1:] != pair[:-1]]) if len(pair) else pair
        best = np.full(len(nodes), _NONE, np.int64)
        best_gpu = np.full(len(nodes), -1, np.int64)
        best[pair[starts]] = change[starts]
        best_gpu[pair[starts]] = gpu[starts]
        return best, best_gpu

    # -- policy ------------------------------------------------------------------------------

    def choose(self, cluster: GpuCluster, pod: PodShape, candidates: BoolArray) -> Placement:
        self._sync(cluster)
        col = self._column(cluster, pod)
        nodes = np.flatnonzero(candidates)
        change = self._delta[nodes, col]
        nodes = nodes[change == change.min()]
        node = _tightest(cluster, nodes) if len(nodes) > 1 else int(nodes[0])
        if pod.gpu_milli:
            return Placement(node, (int(self._gpu[node, col]),))
        return Placement(node, _first_fit_gpus(cluster, node, pod))


POLICIES = ("first_fit", "best_fit", "dot_product", "fgd")


def make_policy(name: str, distribution: TaskDistribution | None = None) -> Policy:
    """A policy by name; ``fgd`` needs the target ``distribution``."""
    if name == "first_fit":
        return FirstFit()
    if name == "best_fit":
        return BestFit()
    if name == "dot_product":
        return DotProduct()
    if name == "fgd":
        if distribution is None:
            raise ValueError("fgd needs a task distribution")
        return FGD(distribution)
    raise ValueError(f"unknown policy {name!r}; choose from {', '.join(POLICIES)}")


def place(cluster: GpuCluster, pod: PodShape, policy: Policy | str) -> Placement | None:
    """Where ``policy`` would put ``pod`` now, or None if no node can take it (no change)."""
    chooser = make_policy(policy) if isinstance(policy, str) else policy
    candidates = feasible(cluster, pod)
    if not candidates.any():
        return None
    return chooser.choose(cluster, pod, candidates)


def schedule(cluster: GpuCluster, pod: PodShape, policy: Policy | str) -> Placement | None:
    """``place`` then ``allocate``; None (and no change) if the pod does not fit."""
    placement = place(cluster, pod, policy)
    if placement is not None:
        allocate(cluster, pod, placement)
    return placement
