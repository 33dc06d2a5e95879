"""GPU shares in governance placement: a pod's share of a GPU stays inside one physical GPU.

A pod's ``nvidia.com/gpu`` request (milli-GPU, per pod) is

- a multiple of 1000: that many *whole* GPUs, each fully free;
- below 1000: a *share* of one GPU (Alibaba's ``gpu_milli``), placed on a single GPU whose
  shares then add up to at most 1000;
- anything else (``1500m``): refused with a reason (Kubernetes counts GPUs whole; a share
  is of one GPU).

MIG slices are their own resources (``nvidia.com/mig-1g.10gb``), as the device plugin's mixed
strategy advertises them from the node's MIG layout (``model.catalog.mig_allocatable``); a
node's ``nvidia.com/gpu`` counts only its GPUs left whole, so shares never land on a
partitioned GPU. A slice is taken whole: a request that is not a whole number of slices is
refused likewise.

:class:`GpuShares` keeps, per node and GPU, the share milli in use (0: the GPU hosts no share).
The node's free ``nvidia.com/gpu`` total stays in the caller's free-room matrix; the node's
*fully free* GPUs follow from the two (the total minus the room left on share-hosting GPUs,
in thousands). Whole GPUs are interchangeable, so only shares are pinned to a GPU index
(GPUs taken whole are whichever GPUs hosting no share are not free); a node without shares
needs no per-GPU state at all.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt

from fleetshare.model.quantity import format_quantity
from fleetshare.model.resources import GPU, MIG_PREFIX
from fleetshare.placement.gpu_share import GPU_MILLI

IntArray = npt.NDArray[np.int64]


def gpu_need(requests: Mapping[str, int]) -> tuple[int, int]:
    """(whole GPUs, share milli) of one pod's requests (see the module docstring)."""
    amount = requests.get(GPU, 0)
    if amount <= 0:
        return 0, 0
    if amount < GPU_MILLI:
        return 0, amount
    return amount // GPU_MILLI, 0


def share_footprint(share: int) -> int:
    """The milli-GPU a share of ``share`` milli counts for where room is counted in node
    totals (the autoscaler's packing): ``1000 // (1000 // share)``, so that a GPU's total
    holds as many identical shares as one GPU does (600m counts 1000: one per GPU; 300m
    counts 333: three per GPU, 999m).

    Exact for identical shares of 0.1 GPU or more on nodes of up to 8 GPUs. Below that the
    milli left on each GPU can add up to one more share in a node's total (75m counts 76:
    105 on 8 GPUs, where 104 fit); the governance placement then leaves that pod pending
    and the next plan asks for it again.
    """
    return GPU_MILLI // (GPU_MILLI // share)


def counted_requests(requests: Mapping[str, int]) -> dict[str, int]:
    """A pod's requests as packing by node totals counts them: a GPU share at its
    :func:`share_footprint`, everything else as asked.

    Shares of different sizes on one node may, rarely, add up within the node's total yet
    not split over its GPUs (500m + 2 x 333m + 4 x 200m on two GPUs); the same fallback
    applies.
    """
    share = gpu_need(requests)[1]
    if not share:
        return dict(requests)
    return {**requests, GPU: share_footprint(share)}


def request_problem(
    requests: Mapping[str, int], ignore: frozenset[str] = frozenset()
) -> str | None:
    """Why a pod's GPU or MIG request cannot be placed as asked (None: it can); resources in
    ``ignore`` (counted as quota only) are not asked of a node."""
    for resource, amount in requests.items():
        if amount <= 0 or amount % GPU_MILLI == 0 or resource in ignore:
            continue
        if resource == GPU and amount > GPU_MILLI:
            return (
                f"{resource}: {format_quantity(amount, resource)} per pod is neither whole GPUs "
                "nor a share of one GPU (below 1)"
            )
        if resource.startswith(MIG_PREFIX):
            return (
                f"{resource}: {format_quantity(amount, resource)} per pod; MIG slices are "
                "taken whole"
            )
    return None


class GpuShares:
    """Share milli in use per (node, GPU); see the module docstring."""

    def __init__(self, gpus: IntArray) -> None:
        """``gpus``: whole GPUs per node (``nvidia.com/gpu`` allocatable // 1000)."""
        self.count = gpus
        self.used: IntArray = np.zeros((len(gpus), max(1, int(gpus.max(initial=0)))), np.int64)

    def copy(self) -> GpuShares:
        """An independent copy of the shares in use."""
        new = object.__new__(GpuShares)
        new.count = self.count
        new.used = self.used.copy()
        return new

    def full(self, rows: IntArray, free_gpu: IntArray) -> IntArray:
        """Fully free GPUs of ``rows`` whose free ``nvidia.com/gpu`` totals are ``free_gpu``."""
        used = self.used[rows]
        hosting = used > 0
        spare = np.where(hosting, GPU_MILLI - used, 0).sum(axis=1)
        found: IntArray = np.clip(
            (free_gpu - spare) // GPU_MILLI, 0, self.count[rows] - hosting.sum(axis=1)
        )
        return found

    def room(self, rows: IntArray, free_gpu: IntArray, share: int) -> IntArray:
        """How many shares of ``share`` milli fit on each of ``rows``, each inside one GPU."""
        used = self.used[rows]
        on_hosting = np.where(used > 0, (GPU_MILLI - used) // share, 0).sum(axis=1)
        found: IntArray = on_hosting + self.full(rows, free_gpu) * (GPU_MILLI // share)
        return found

    def per_gpu_free(self, rows: IntArray, free_gpu: IntArray) -> IntArray:
        """Free milli of each GPU of ``rows`` (0 past a node's GPUs): share-hosting GPUs keep
        their index, the fully free ones are the first other indices, the rest are taken
        whole. A policy choosing a GPU from this view opens or joins exactly that GPU."""
        used = self.used[rows]
        hosting = used > 0
        rank = np.cumsum(~hosting, axis=1)
        free_whole = rank <= self.full(rows, free_gpu)[:, None]
        found: IntArray = np.where(
            hosting, GPU_MILLI - used, np.where(free_whole & ~hosting, GPU_MILLI, 0)
        )
        return found

    def _row(self, node: int, free_gpu: int) -> tuple[list[int], int]:
        """One node's share milli per GPU and its fully free GPUs (:meth:`full`, in Python:
        cheaper than arrays for one row)."""
        used = self.used[node, : int(self.count[node])].tolist()
        hosting = sum(1 for u in used if u)
        spare = sum(GPU_MILLI - u for u in used if u)
        return used, max(0, min((free_gpu - spare) // GPU_MILLI, len(used) - hosting))

    def pick(self, node: int, free_gpu: int, share: int) -> int | None:
        """The GPU of ``node`` a share goes to by default: the fullest share-hosting GPU with
        room (best fit; ties to the lower index), else the first fully free GPU."""
        used, full = self._row(node, free_gpu)
        best, best_used = None, 0
        for g, u in enumerate(used):
            if u and u + share <= GPU_MILLI and u > best_used:
                best, best_used = g, u
        if best is None and full > 0:
            best = used.index(0)
        return best

    def fits(self, node: int, gpu: int, free_gpu: int, share: int) -> bool:
        """``share`` milli fit on GPU ``gpu`` of ``node`` now: a share-hosting GPU with that
        much room, or a GPU hosting no share while one is fully free (GPUs taken whole are
        not pinned to an index, so any GPU without shares may be the free one)."""
        if not 0 <= gpu < int(self.count[node]):
            return False
        used, full = self._row(node, free_gpu)
        return used[gpu] + share <= GPU_MILLI if used[gpu] else full > 0

    def take(self, node: int, gpus: Sequence[int], share: int, sign: int) -> None:
        """Take (``sign=1``) or give back (``-1``) one share per entry of ``gpus``."""
        for g in gpus:
            self.used[node, g] += sign * share
