"""Partial admission: the most pods of a workload that can run when all of them cannot.

Kueue admits a pod set with a ``minCount`` (a Job's ``kueue.x-k8s.io/job-min-parallelism``)
with fewer pods "after both borrowing and preemption was taken into account in the admission
process, and none of them are feasible" (tasks/run/jobs, "Partial admission"): its pod set
reducer searches, by bisection, the smallest reduction that the flavor assigner finds a fit
for (or preemption targets), taking pods off the last reducible pod set first, down to its
minimum, then the one before (``NewOrderedPodSetReducer``). The caller says what fits; this
module only counts.
"""

from __future__ import annotations

from collections.abc import Callable

from fleetshare.model.workload import Workload

Counts = tuple[int, ...]
"""Pods per pod set."""


def reducible(wl: Workload) -> tuple[int, ...]:
    """Per pod set, how many pods it may give up (``count - min_count``; 0 without one)."""
    return tuple(
        ps.count - ps.min_count if ps.min_count is not None and ps.min_count < ps.count else 0
        for ps in wl.podsets
    )


def counts_after(wl: Workload, deltas: tuple[int, ...], amount: int) -> Counts:
    """The pod counts with ``amount`` pods taken off, from the last pod set that may give
    some up, each down to its minimum before the one before it."""
    out = [ps.count for ps in wl.podsets]
    left = amount
    for i in range(len(out) - 1, -1, -1):
        cut = min(deltas[i], left)
        out[i] -= cut
        left -= cut
    return tuple(out)


def largest_fit(wl: Workload, fits: Callable[[Counts], bool]) -> Counts | None:
    """The counts with the fewest pods taken off that ``fits`` accepts (bisection over the
    number taken off, as Kueue: what fits with fewer pods taken off is assumed to fit with
    more), or None when even every pod set at its minimum does not fit. The full counts are
    not tried (the caller did)."""
    deltas = reducible(wl)
    total = sum(deltas)
    if not total or not fits(counts_after(wl, deltas, total)):
        return None
    low, high = 1, total  # fits(high) holds
    while low < high:
        mid = (low + high) // 2
        if fits(counts_after(wl, deltas, mid)):
            high = mid
        else:
            low = mid + 1
    return counts_after(wl, deltas, high)
